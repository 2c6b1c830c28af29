// stackcost's cuDNN rung: the zoo's networks built from cuDNN 9's legacy API and cuBLAS,
// float32 tensors in NCHW; inference here, training in train.cpp. Written and compiled on
// a machine without a GPU: not yet run on one (native/README.md, "The cuDNN program").
//
//   stackcost_cudnn echo IN.scw OUT.scw         read a tensor file, write it back
//   stackcost_cudnn run key=value ...            measure one repetition on CUDA device 0
//   stackcost_cudnn train key=value ...          train in the program's own loop (train.cpp)
//
// run keys: those of stackcost_onednn (family and its parameters, arch, weights, folded_bn,
// num_classes, in_channels, resolution, input, output, threads and the protocol's), plus
// device=cuda and math=fp32|tf32 (default fp32), and optionally profile_iters=N
// profile_out=PATH (a profiled pass after the timed loop: every layer between CUDA events,
// native/README.md "Profiling"). The answer is the shared JSON (common/protocol.hpp) plus
// "device_samples_ns": CUDA events around each timed call.
//
// What a call is: every layer enqueued on one stream between two CUDA events, then
// cudaStreamSynchronize, so the work is done before the protocol's clock is read. The
// input is copied to the device once at load; the output is copied back after the cold
// call, untimed. Training is train.cpp's (the network in train_net.{hpp,cpp}, the
// optimizer's kernels in optimizer.cu).
//
// The weights file is prepared by Python exactly as for stackcost_onednn
// (stackcost.backends.native.folded_state): BatchNorm folded into every convolution.
#include "common/commands.hpp"
#include "common/protocol.hpp"
#include "common/resnet_blocks.hpp"
#include "cuda_util.hpp"
#include "host_tensors.hpp"
#include "train.hpp"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace stackcost;         // the shared protocol and SCW1 format (common/)
using namespace stackcost::cudnn;  // checks, device memory, descriptors, host tensors

const float kOne = 1.f, kZero = 0.f;

// ---- the network: layers enqueued on one stream -----------------------------------------

struct Act {  // an activation on the device, dense NCHW float
  float* data = nullptr;
  int n = 0, c = 0, h = 0, w = 0;
  size_t numel() const { return static_cast<size_t>(n) * c * h * w; }
};

// What the answer records of one convolution.
struct ConvChoice {
  std::string name, algo, math, fused;
  size_t workspace_bytes = 0;
  int heuristic_rank = -1;  // its place in cudnnGetConvolutionForwardAlgorithm_v7's list
  int rejected = 0;         // heuristic entries skipped before it (status, math, or a refusal)
};

class Net {
 public:
  Net(Weights& weights, DeviceMemory& mem, cudnnHandle_t dnn, cublasHandle_t blas,
      cudaStream_t stream, bool tf32)
      : w_(weights), mem_(mem), dnn_(dnn), blas_(blas), stream_(stream), tf32_(tf32),
        relu_(CUDNN_ACTIVATION_RELU) {}

  // The input, copied to the device once here: the timed call starts from device memory.
  Act input(const HostTensor& x) {
    Act a{nullptr, static_cast<int>(x.dims[0]), static_cast<int>(x.dims[1]),
          static_cast<int>(x.dims[2]), static_cast<int>(x.dims[3])};
    a.data = mem_.floats(a.numel(), "input");
    copy_in(a.data, x.data);
    return a;
  }

  // Convolution with BatchNorm folded: weights "<name>.folded_weight", bias
  // "<name>.folded_bias". With `relu`, one cudnnConvolutionBiasActivationForward computes
  // relu(conv(x) + bias + residual) (alpha2 = 1 with the residual as z, else alpha2 = 0).
  // Without (a projection shortcut), cudnnConvolutionForward then cudnnAddTensor for the
  // bias: the fused call's IDENTITY activation runs only with IMPLICIT_PRECOMP_GEMM, which
  // would overrule the heuristic's choice.
  Act conv(const std::string& name, const Act& x, int cout, int k, int stride, int pad, bool relu,
           const Act* residual = nullptr) {
    if (residual && !relu) throw std::runtime_error(name + ": a residual add comes with ReLU here");
    const cudnnMathType_t math = tf32_ ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    auto L = std::make_unique<ConvLayer>(x.c, cout, k, pad, stride, math);
    L->x = x;
    L->relu = relu;
    L->residual = residual ? residual->data : nullptr;
    const int oh = (x.h + 2 * pad - k) / stride + 1, ow = (x.w + 2 * pad - k) / stride + 1;
    L->xd = std::make_unique<TensorDesc>(x.n, x.c, x.h, x.w);
    int n = 0, c = 0, h = 0, w = 0;
    SC_CHECK(cudnnGetConvolution2dForwardOutputDim(L->cd.get(), L->xd->get(), L->fd.get(), &n, &c, &h, &w));
    if (n != x.n || c != cout || h != oh || w != ow) {
      throw std::runtime_error(name + ": cuDNN's output shape differs from torch's");
    }
    if (residual && (residual->n != n || residual->c != c || residual->h != h || residual->w != w)) {
      throw std::runtime_error(name + ": the residual's shape differs from the output's");
    }
    L->yd = std::make_unique<TensorDesc>(n, c, h, w);
    L->bd = std::make_unique<TensorDesc>(1, cout, 1, 1);
    L->weight = upload(w_.take(name + ".folded_weight", {cout, x.c, k, k}));
    L->bias = upload(w_.take(name + ".folded_bias", {cout}));
    L->y = Act{mem_.floats(static_cast<size_t>(n) * c * h * w, "activations"), n, c, h, w};
    L->choice.name = name;
    L->choice.fused = relu ? (residual ? "conv+bias+residual+relu" : "conv+bias+relu")
                           : "conv, then bias (cudnnAddTensor)";
    choose_algorithm(*L);
    ConvLayer* layer = L.get();
    convs_.push_back(std::move(L));
    add_step(name, "convolution", layer->choice.algo, [this, layer] { SC_CHECK(launch(*layer)); },
             &layer->choice);
    return layer->y;
  }

  // Max pooling (resnet's stem: 3x3/2 pad 1 over a ReLU output, so whether a pad counts as
  // 0 or -inf cannot change a max) and global average pooling (window = spatial size).
  Act pool(const std::string& name, const Act& x, cudnnPoolingMode_t mode, int kh, int kw, int stride,
           int pad) {
    auto pd = std::make_shared<PoolDesc>(mode, kh, kw, pad, stride);
    auto xd = std::make_shared<TensorDesc>(x.n, x.c, x.h, x.w);
    int n = 0, c = 0, h = 0, w = 0;
    SC_CHECK(cudnnGetPooling2dForwardOutputDim(pd->get(), xd->get(), &n, &c, &h, &w));
    if (h != (x.h + 2 * pad - kh) / stride + 1 || w != (x.w + 2 * pad - kw) / stride + 1) {
      throw std::runtime_error("pooling: cuDNN's output shape differs from torch's (floor mode)");
    }
    const Act y{mem_.floats(static_cast<size_t>(n) * c * h * w, "activations"), n, c, h, w};
    auto yd = std::make_shared<TensorDesc>(n, c, h, w);
    cudnnHandle_t dnn = dnn_;
    const char* impl = mode == CUDNN_POOLING_MAX ? "max" : "average, padding excluded";
    add_step(name, "pooling", impl, [=] {
      SC_CHECK(cudnnPoolingForward(dnn, pd->get(), &kOne, xd->get(), x.data, &kZero, yd->get(), y.data));
    });
    return y;
  }

  // Fully connected over all of x's non-batch dims (C,H,W order, torch's flatten):
  // Y[N, out] = X[N, in] W[out, in]^T in cuBLAS's column-major terms Y^T = W^T' X^T, i.e.
  // cublasSgemm(T, N, m=out, n=N, k=in); then the bias (cudnnAddTensor) and ReLU in place.
  Act linear(const std::string& name, const Act& x, int out, bool relu) {
    const int in = x.c * x.h * x.w;
    const float* weight = upload(w_.take(name + ".weight", {out, in}));
    const float* bias = upload(w_.take(name + ".bias", {out}));
    const Act y{mem_.floats(static_cast<size_t>(x.n) * out, "activations"), x.n, out, 1, 1};
    auto yd = std::make_shared<TensorDesc>(x.n, out, 1, 1);
    auto bd = std::make_shared<TensorDesc>(1, out, 1, 1);
    cudnnHandle_t dnn = dnn_;
    cublasHandle_t blas = blas_;
    const cudnnActivationDescriptor_t act = relu ? relu_.get() : nullptr;
    const char* impl = relu ? "cublasSgemm, bias, relu" : "cublasSgemm, bias";
    add_step(name, "fully connected", impl, [=] {
      SC_CHECK(cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, out, x.n, in, &kOne, weight, in, x.data,
                           in, &kZero, y.data, out));
      SC_CHECK(cudnnAddTensor(dnn, &kOne, bd->get(), bias, &kOne, yd->get(), y.data));
      if (act) {
        SC_CHECK(cudnnActivationForward(dnn, act, &kOne, yd->get(), y.data, &kZero, yd->get(), y.data));
      }
    });
    return y;
  }

  Act log_softmax(const Act& x) {
    const Act y{mem_.floats(x.numel(), "activations"), x.n, x.c, x.h, x.w};
    auto d = std::make_shared<TensorDesc>(x.n, x.c, x.h, x.w);
    cudnnHandle_t dnn = dnn_;
    add_step("log_softmax", "softmax", "log, instance", [=] {
      SC_CHECK(cudnnSoftmaxForward(dnn, CUDNN_SOFTMAX_LOG, CUDNN_SOFTMAX_MODE_INSTANCE, &kOne, d->get(),
                                   x.data, &kZero, d->get(), y.data));
    });
    return y;
  }

  void output(const Act& y) { output_ = y; }

  // One call's work, enqueued on the stream (the caller records events and synchronizes).
  void enqueue() {
    for (const auto& s : steps_) s.fn();
  }

  // One call with every layer between CUDA events on the stream (`events` has one more than
  // there are layers): no synchronization between layers, so the device runs them back to
  // back as in the timed loop, and layer i's time is the gap between events i and i+1.
  void enqueue_timed(const std::vector<cudaEvent_t>& events) {
    for (size_t i = 0; i < steps_.size(); ++i) {
      SC_CHECK(cudaEventRecord(events[i], stream_));
      steps_[i].fn();
    }
    SC_CHECK(cudaEventRecord(events[steps_.size()], stream_));
  }

  // The profiled pass's file, in stackcost_onednn's shape: each layer's name, kind,
  // implementation (a convolution's algorithm) and total time over the profiled iterations;
  // a convolution adds its algorithm, workspace, math type and what is fused.
  std::string timeline_json(const std::vector<int64_t>& ns, int64_t iters, int64_t iteration_ns) const {
    std::ostringstream out;
    out << "{\"method\":\"per-layer CUDA events on the stream (stackcost_cudnn)\""
        << ",\"note\":\"" << steps_.size()
        << " layers per iteration, each between two CUDA events on the stream, no "
           "synchronization between layers (a gap the device waits for the host counts in its "
           "layer); kernels = their sum, overhead = the rest of each iteration (the first "
           "launch, the final synchronization)\""
        << ",\"iters\":" << iters << ",\"iteration_ns\":" << iteration_ns << ",\"steps\":[";
    for (size_t i = 0; i < steps_.size(); ++i) {
      const Launch& s = steps_[i];
      out << (i ? "," : "") << "{\"name\":" << json_string(s.name) << ",\"kind\":" << json_string(s.kind)
          << ",\"impl\":" << json_string(s.impl) << ",\"ns\":" << ns[i];
      if (s.conv) {
        out << ",\"algo\":" << json_string(s.conv->algo) << ",\"workspace_bytes\":" << s.conv->workspace_bytes
            << ",\"math\":" << json_string(s.conv->math) << ",\"fused\":" << json_string(s.conv->fused);
      }
      out << "}";
    }
    out << "]}";
    return out.str();
  }

  // The network's answer [N, classes], copied back (synchronously: after the call).
  HostTensor result() const {
    HostTensor t;
    t.dims = {output_.n, static_cast<int64_t>(output_.c) * output_.h * output_.w};
    t.data.resize(output_.numel());
    SC_CHECK(cudaMemcpy(t.data.data(), output_.data, t.data.size() * sizeof(float), cudaMemcpyDeviceToHost));
    return t;
  }

  size_t launches() const { return steps_.size(); }
  size_t workspace_bytes() const { return workspace_bytes_; }
  std::string convs_json() const {
    std::ostringstream out;
    out << "[";
    for (size_t i = 0; i < convs_.size(); ++i) {
      const ConvChoice& c = convs_[i]->choice;
      out << (i ? "," : "") << "{\"name\":" << json_string(c.name) << ",\"algo\":" << json_string(c.algo)
          << ",\"workspace_bytes\":" << c.workspace_bytes << ",\"math\":" << json_string(c.math)
          << ",\"heuristic_rank\":" << c.heuristic_rank << ",\"rejected\":" << c.rejected
          << ",\"fused\":" << json_string(c.fused) << "}";
    }
    return out.str() + "]";
  }

 private:
  struct ConvLayer {
    ConvLayer(int cin, int cout, int k, int pad, int stride, cudnnMathType_t math)
        : fd(cout, cin, k, k), cd(pad, stride, math) {}
    FilterDesc fd;
    ConvDesc cd;
    std::unique_ptr<TensorDesc> xd, yd, bd;
    Act x, y;
    const float* weight = nullptr;
    const float* bias = nullptr;
    const float* residual = nullptr;
    bool relu = false;
    cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
    size_t workspace = 0;
    ConvChoice choice;
  };

  struct Launch {
    std::function<void()> fn;
    std::string name, kind, impl;  // for the profiled pass's timeline
    const ConvChoice* conv;        // a convolution's choice (owned by convs_), else null
  };

  void add_step(std::string name, std::string kind, std::string impl, std::function<void()> fn,
                const ConvChoice* conv = nullptr) {
    steps_.push_back({std::move(fn), std::move(name), std::move(kind), std::move(impl), conv});
  }

  float* upload(const HostTensor& t) {
    float* p = mem_.floats(t.data.size(), "weights");
    copy_in(p, t.data);
    return p;
  }

  // On the network's stream and waited for: a plain cudaMemcpy from pageable memory may
  // return before its DMA lands, and the trial launches at load read these buffers.
  void copy_in(float* dst, const std::vector<float>& src) {
    SC_CHECK(cudaMemcpyAsync(dst, src.data(), src.size() * sizeof(float), cudaMemcpyHostToDevice, stream_));
    SC_CHECK(cudaStreamSynchronize(stream_));
  }

  // The one workspace every convolution shares (they run one after another on one stream):
  // grown to the largest a chosen algorithm asks for.
  void reserve_workspace(size_t bytes) {
    if (bytes <= workspace_bytes_) return;
    SC_CHECK(cudaDeviceSynchronize());  // nothing may still use the old one
    mem_.release(workspace_);
    workspace_ = mem_.bytes(bytes, "workspace");
    workspace_bytes_ = bytes;
  }

  cudnnStatus_t launch(const ConvLayer& L) {
    if (L.relu) {
      // z: the residual (alpha2 = 1), else y itself with alpha2 = 0 (z must be a valid
      // tensor of y's shape; y holds the previous call's finite output, or zeros).
      const float* alpha2 = L.residual ? &kOne : &kZero;
      const float* z = L.residual ? L.residual : L.y.data;
      return cudnnConvolutionBiasActivationForward(
          dnn_, &kOne, L.xd->get(), L.x.data, L.fd.get(), L.weight, L.cd.get(), L.algo, workspace_,
          L.workspace, alpha2, L.yd->get(), z, L.bd->get(), L.bias, relu_.get(), L.yd->get(), L.y.data);
    }
    const cudnnStatus_t s =
        cudnnConvolutionForward(dnn_, &kOne, L.xd->get(), L.x.data, L.fd.get(), L.weight, L.cd.get(),
                                L.algo, workspace_, L.workspace, &kZero, L.yd->get(), L.y.data);
    if (s != CUDNN_STATUS_SUCCESS) return s;
    return cudnnAddTensor(dnn_, &kOne, L.bd->get(), L.bias, &kOne, L.yd->get(), L.y.data);
  }

  // cuDNN's heuristics rank the algorithms (cudnnGetConvolutionForwardAlgorithm_v7, no
  // benchmarking); the first that suits the cell's math and that the call accepts is kept.
  // fp32: the descriptor stays CUDNN_FMA_MATH and tensor-op entries are skipped, so TF32
  // never runs; tf32: the entry's own math type is set, as the heuristic's contract asks.
  // Each candidate is launched once here, at load, on the zeroed buffers: a refusal
  // (CUDNN_STATUS_NOT_SUPPORTED for this fused call) moves on to the next entry.
  void choose_algorithm(ConvLayer& L) {
    int max_count = 0;
    SC_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(dnn_, &max_count));
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<size_t>(std::max(max_count, 1)));
    int returned = 0;
    SC_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(dnn_, L.xd->get(), L.fd.get(), L.cd.get(),
                                                    L.yd->get(), max_count, &returned, perf.data()));
    std::string refusals;
    for (int i = 0; i < returned; ++i) {
      const auto& p = perf[static_cast<size_t>(i)];
      const bool tensor_op =
          p.mathType == CUDNN_TENSOR_OP_MATH || p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
      if (p.status != CUDNN_STATUS_SUCCESS || (!tf32_ && tensor_op)) {
        ++L.choice.rejected;
        continue;
      }
      const cudnnMathType_t math = tf32_ ? p.mathType : CUDNN_FMA_MATH;
      SC_CHECK(cudnnSetConvolutionMathType(L.cd.get(), math));
      size_t bytes = 0;
      cudnnStatus_t s = cudnnGetConvolutionForwardWorkspaceSize(dnn_, L.xd->get(), L.fd.get(), L.cd.get(),
                                                                L.yd->get(), p.algo, &bytes);
      if (s == CUDNN_STATUS_SUCCESS) {
        reserve_workspace(bytes);
        L.algo = p.algo;
        L.workspace = bytes;
        s = launch(L);
      }
      if (s != CUDNN_STATUS_SUCCESS) {
        refusals += " " + algo_name(p.algo) + ": " + cudnnGetErrorString(s) + ";";
        ++L.choice.rejected;
        continue;
      }
      SC_CHECK(cudaStreamSynchronize(stream_));  // a launch that failed on the device throws here
      L.choice.algo = algo_name(p.algo);
      L.choice.math = math_name(math);
      L.choice.workspace_bytes = bytes;
      L.choice.heuristic_rank = i;
      return;
    }
    throw std::runtime_error(L.choice.name + ": none of the " + std::to_string(returned) +
                             " algorithms cuDNN's heuristics offered runs it;" + refusals);
  }

  Weights& w_;
  DeviceMemory& mem_;
  cudnnHandle_t dnn_;
  cublasHandle_t blas_;
  cudaStream_t stream_;
  bool tf32_;
  ActivationDesc relu_;
  std::vector<std::unique_ptr<ConvLayer>> convs_;
  std::vector<Launch> steps_;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  Act output_;
};

void build_resnet(Net& net, Act x, const Family& family, int classes) {
  x = net.conv("conv1", x, static_cast<int>(kResNetStem), 7, 2, 3, true);
  x = net.pool("maxpool", x, CUDNN_POOLING_MAX, 3, 3, 2, 1);
  for (const ResBlock& b : resnet_blocks(family)) {
    const std::string& p = b.prefix;
    const int width = static_cast<int>(b.width), cout = static_cast<int>(b.cout);
    const int stride = static_cast<int>(b.stride);
    const Act identity = b.project ? net.conv(p + "downsample.0", x, cout, 1, stride, 0, false) : x;
    if (family.bottleneck()) {
      x = net.conv(p + "conv1", x, width, 1, 1, 0, true);
      x = net.conv(p + "conv2", x, width, 3, stride, 1, true);
      x = net.conv(p + "conv3", x, cout, 1, 1, 0, true, &identity);
    } else {
      x = net.conv(p + "conv1", x, width, 3, stride, 1, true);
      x = net.conv(p + "conv2", x, cout, 3, 1, 1, true, &identity);
    }
  }
  x = net.pool("avgpool", x, CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING, x.h, x.w, 1, 0);
  net.output(net.linear("fc", x, classes, false));
}

// conv -> max pool 2 -> relu is computed as conv+relu -> max pool 2: max and relu commute.
void build_mnist(Net& net, Act x, int classes) {
  x = net.conv("conv1", x, 10, 5, 1, 0, true);
  x = net.pool("pool1", x, CUDNN_POOLING_MAX, 2, 2, 2, 0);
  x = net.conv("conv2", x, 20, 5, 1, 0, true);
  x = net.pool("pool2", x, CUDNN_POOLING_MAX, 2, 2, 2, 0);
  x = net.linear("fc1", x, 50, true);
  net.output(net.log_softmax(net.linear("fc2", x, classes, false)));
}

// After the timed loop: one untimed call through the timers, then `prof.iters` calls with
// every layer between CUDA events (Net::enqueue_timed). Each iteration's steady_clock spans
// the enqueueing and the synchronization; the events are read after it. Writes the
// timeline file; returns the answer's "profile_iters" and "profile_wall_ns".
std::string profiled_pass(Net& net, cudaStream_t stream, const ProfileRequest& prof) {
  std::vector<cudaEvent_t> events(net.launches() + 1, nullptr);
  struct Destroy {  // the events, on every way out
    std::vector<cudaEvent_t>& e;
    ~Destroy() {
      for (cudaEvent_t ev : e) {
        if (ev) cudaEventDestroy(ev);
      }
    }
  } destroy{events};
  for (cudaEvent_t& ev : events) SC_CHECK(cudaEventCreate(&ev));
  std::vector<int64_t> ns(net.launches(), 0);
  const auto read = [&] {
    for (size_t i = 0; i < ns.size(); ++i) {
      float ms = 0;
      SC_CHECK(cudaEventElapsedTime(&ms, events[i], events[i + 1]));
      ns[i] += static_cast<int64_t>(std::llround(static_cast<double>(ms) * 1e6));
    }
  };
  net.enqueue_timed(events);  // the timers' own first call is not steady state
  SC_CHECK(cudaStreamSynchronize(stream));
  int64_t iteration_ns = 0, wall_ns = 0;
  for (int64_t i = 0; i < prof.iters; ++i) {
    const auto t0 = Clock::now();
    net.enqueue_timed(events);
    SC_CHECK(cudaStreamSynchronize(stream));
    const int64_t took = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
    iteration_ns += took;
    wall_ns += took;
    const auto t1 = Clock::now();
    read();  // the events are reused: read before the next iteration, outside its clock
    // The reading is part of the profiled loop's wall (between iterations: "remainder").
    wall_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t1).count();
  }
  std::ofstream out(prof.out);
  out << net.timeline_json(ns, prof.iters, iteration_ns) << "\n";
  if (!out) throw std::runtime_error("cannot write " + prof.out);
  return "\"profile_iters\":" + std::to_string(prof.iters) + ",\"profile_wall_ns\":" + std::to_string(wall_ns);
}

int run(const Args& args) {
  require_device();  // before anything else: one clear line on a machine without a GPU
  const Protocol p = parse_protocol(args);
  const Family family = parse_family(args, "cudnn");
  const auto device = arg_or(args, "device", "cuda");
  if (device != "cuda") throw std::runtime_error("stackcost_cudnn runs on device=cuda only, not " + device);
  const auto math = arg_or(args, "math", "fp32");
  if (math != "fp32" && math != "tf32") throw std::runtime_error("math must be fp32 or tf32, not " + math);
  const bool tf32 = math == "tf32";
  const ProfileRequest prof = parse_profile(args);
  const auto threads = std::stoll(arg(args, "threads"));  // recorded: one host thread enqueues
  const auto folded_bn = std::stoll(arg(args, "folded_bn"));
  const auto classes = static_cast<int>(std::stoll(arg(args, "num_classes")));

  const DeviceStart dev = start_device();

  // fp32: PEDANTIC, the prescribed precision in every phase (DEFAULT would not use TF32 for
  // an SGEMM either, but may reduce in lower precision); tf32: TF32 tensor cores allowed.
  const cublasMath_t blas_math = tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH;
  DeviceMemory mem;
  const Handles h(mem, blas_math);
  const cudaStream_t stream = h.stream;
  const int64_t used_handles = device_used_bytes();
  const int64_t baseline_rss = vm_bytes("VmRSS:");

  auto input = read_tensors(arg(args, "input"));
  if (input.size() != 1) throw std::runtime_error("input file must hold exactly one tensor");
  const HostTensor& x = input[0].second;
  if (x.dims.size() != 4) throw std::runtime_error("input must be NCHW, got " + dims_str(x.dims));

  Weights weights(read_tensors(arg(args, "weights")));
  Net net(weights, mem, h.dnn, h.blas, stream, tf32);
  const Act in = net.input(x);
  if (family.resnet()) {
    build_resnet(net, in, family, classes);
  } else {
    build_mnist(net, in, classes);
  }
  weights.check_all_used();
  SC_CHECK(cudaDeviceSynchronize());
  const int64_t used_loaded = device_used_bytes();

  cudaEvent_t start = nullptr, stop = nullptr;
  SC_CHECK(cudaEventCreate(&start));
  SC_CHECK(cudaEventCreate(&stop));
  // The call: events around the enqueued layers, then wait, so the protocol's clock is read
  // only once the device is done.
  const stackcost::Step step = [&] {
    SC_CHECK(cudaEventRecord(start, stream));
    net.enqueue();
    SC_CHECK(cudaEventRecord(stop, stream));
    SC_CHECK(cudaStreamSynchronize(stream));
  };
  const DeviceTime event_ns = [&] {
    float ms = 0;
    SC_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return static_cast<int64_t>(std::llround(static_cast<double>(ms) * 1e6));
  };

  const int64_t cold_ns = time_once(step);
  const int64_t cold_event_ns = event_ns();
  const HostTensor output = net.result();  // the cold call's answer, copied back untimed
  const Measured m = measure_after_cold(step, p, cold_ns, event_ns);
  const int64_t used_after = device_used_bytes();

  write_host_tensors(arg(args, "output"), {{"output", output}});
  const std::string profiled = prof.iters > 0 ? profiled_pass(net, stream, prof) + "," : "";

  std::ostringstream by_kind;
  for (const auto& [kind, bytes] : mem.by_kind()) {
    by_kind << (by_kind.tellp() > 0 ? "," : "") << json_string(kind) << ":" << bytes;
  }
  std::ostringstream d;
  d << profiled << "\"arch\":" << json_string(family.arch) << "," << device_json(dev)
    << ",\"math\":" << json_string(math)
    << ",\"conv_math_type\":" << json_string(math_name(tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH))
    << ",\"cublas_math\":" << json_string(cublas_math_name(blas_math))
    << ",\"layout\":\"NCHW\",\"algo_choice\":\"heuristic\""
    << ",\"algo_heuristic\":\"cudnnGetConvolutionForwardAlgorithm_v7, first entry that runs\""
    << ",\"bn_folded\":" << (folded_bn > 0 ? "true" : "false") << ",\"bn_folded_count\":" << folded_bn
    << ",\"convs\":" << net.convs_json() << ",\"conv_workspace_bytes\":" << net.workspace_bytes()
    << ",\"launches_per_call\":" << net.launches()
    << ",\"device_alloc_peak_bytes\":" << mem.peak() << ",\"device_alloc_bytes\":{" << by_kind.str() << "}"
    << ",\"device_total_bytes\":" << dev.total_bytes
    << ",\"device_used_context_bytes\":" << dev.used_context_bytes
    << ",\"device_used_handles_bytes\":" << used_handles << ",\"device_used_loaded_bytes\":" << used_loaded
    << ",\"device_used_after_bytes\":" << used_after
    << ",\"device_used_method\":\"cudaMemGetInfo (total - free, whole device): after the context, "
       "after the library handles, after loading, after the timed loop\""
    << ",\"cold_event_ns\":" << cold_event_ns
    << ",\"device_clock\":\"cudaEventElapsedTime, events on the stream around each timed call\""
    << ",\"sync\":\"cudaStreamSynchronize inside every call, before the clock is read\""
    << ",\"input_copy\":\"host to device once at load, outside the timed step\""
    << ",\"output_copy\":\"device to host after the cold call, untimed\""
    << ",\"cold_call\":\"after one trial launch of each convolution at load (algorithm check)\""
    << ",\"host_threads\":1,\"threads_requested\":" << threads;
  std::cout << answer_json(m, baseline_rss, d.str()) << std::endl;

  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return stackcost::dispatch(argc, argv, "stackcost_cudnn", run, stackcost::cudnn::train);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
  }
  return 1;
}
