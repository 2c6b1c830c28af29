// `stackcost_cudnn train key=value ...` (native/README.md "Training"): the whole loop in the
// program, on CUDA device 0, fp32. Keys: those of stackcost_onednn's train (weights,
// train_data, test_data, family (+ block, depths), arch, num_classes, in_channels, conv_bias,
// resolution, threads, batch, epochs, optimizer (sgd|adam), lr, momentum, schedule
// (constant|cosine), max_steps, divergence_factor, optional final_weights=PATH, dropout=on|off,
// seed) plus device=cuda. Same answer. Written and compiled without a GPU: not yet run on one.
//
// A step: gather the batch on the host and copy it to the device (loader), then new dropout
// masks, forward in train mode (BatchNorm with batch statistics, running statistics updated
// by cuDNN in the same call), log_softmax on the device copied back, mean cross-entropy and
// its gradient in a plain loop (double) on the host, the gradient copied to the device,
// backward, SGD or Adam (optimizer.cu), and a stream synchronization before the clock is
// read. The first step also builds the network (descriptors, every buffer, each
// convolution's algorithms chosen and launched once): that is cold_ns. Evaluation runs the
// same network in eval mode (BatchNorm with the running statistics, no dropout) on the
// test set in batches of `batch`, a partial last batch padded with zeros and its padding
// ignored (rows are independent in eval mode).
//
// Agreement with eager (the train table's `loss Δ eager`, report/train_agreement.py): step 1
// within 1e-4 relative, steps 2-3 within 5e-2. Step 1 is one forward of the same weights on
// the same batch: only fp32 rounding differs (cuDNN's algorithms sum in their own order; FMA
// math, no TF32 anywhere), ~1e-6. Later steps add updates from gradients that differ by
// more: backward-filter/data algorithms with atomics (ALGO_0, ALGO_3: non-deterministic
// order), max pooling's choice between tied maxima, and a ReLU input within rounding of
// zero landing on the other side (native/README.md, oneDNN training) each move a gradient
// element by far more than rounding, and 5e-2 is the tolerance every level gets for that.
// Models with dropout are not compared (each framework draws its own masks); `dropout=off`
// compares them step by step against an eager model with p = 0.
#include "train.hpp"

#include "common/train_networks.hpp"
#include "cuda_util.hpp"
#include "host_tensors.hpp"
#include "train_net.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace stackcost::cudnn {
namespace {

std::string opt(const Args& args, const std::string& key, const std::string& fallback) {
  const auto it = args.find(key);
  return it == args.end() ? fallback : it->second;
}

int64_t ns_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count();
}

constexpr double kPi = 3.14159265358979323846;

// A number as JSON (as Python reads it: NaN and infinities included), in the fewest digits
// that read back as exactly `v` (a float loss arrives in Python as that float's value).
std::string num(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  char buf[64];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string fmt3(double v) {  // Python's "{:.3g}"
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// A class index stored as float: an integer in [0, bound), else an error naming it.
int64_t index_in(float v, int64_t bound, const std::string& what, size_t at) {
  if (!(v >= 0.f && v < static_cast<float>(bound)) || v != std::floor(v)) {
    std::ostringstream msg;
    msg << what << " " << v << " at position " << at << " outside [0, " << bound << ")";
    throw std::runtime_error(msg.str());
  }
  return static_cast<int64_t>(v);
}

struct Split {
  HostTensor images;
  std::vector<int64_t> labels;
  std::vector<int64_t> order;  // train only: [epochs, N], row-major
  int64_t n = 0;
};

Split read_split(const std::string& path, const std::string& label, int64_t channels,
                 int64_t resolution, int64_t classes, int64_t epochs) {
  Weights file(read_tensors(path), label);
  Split s;
  HostTensor images = file.take_any("images");
  if (images.dims.size() != 4 || images.dims[1] != channels || images.dims[2] != resolution ||
      images.dims[3] != resolution) {
    throw std::runtime_error(label + " images are " + dims_str(images.dims) + ", expected [N, " +
                             std::to_string(channels) + ", " + std::to_string(resolution) + ", " +
                             std::to_string(resolution) + "]");
  }
  s.n = images.dims[0];
  s.images = std::move(images);
  const HostTensor labels = file.take("labels", {s.n});
  for (size_t i = 0; i < labels.data.size(); ++i) {
    s.labels.push_back(index_in(labels.data[i], classes, label + " label", i));
  }
  if (epochs > 0) {
    const HostTensor order = file.take("order", {epochs, s.n});
    for (size_t i = 0; i < order.data.size(); ++i) {
      s.order.push_back(index_in(order.data[i], s.n, label + " order index", i));
    }
  }
  file.check_all_used();
  return s;
}

// Mean (train) or summed (eval) cross-entropy from rows of log-probabilities (cuDNN's
// log_softmax of the logits); `grad` (when given) gets d(mean loss)/d(logits) =
// (softmax - onehot) / rows, softmax = exp(log-probabilities), in double. Correct: argmax
// (first max) == label, the logits' argmax.
struct LossOut {
  double loss_sum = 0;
  int64_t correct = 0;
};

LossOut cross_entropy(const float* logp, float* grad, const int64_t* labels, int64_t rows,
                      int64_t classes) {
  LossOut out;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logp + r * classes;
    int64_t arg = 0;
    for (int64_t c = 1; c < classes; ++c) arg = row[c] > row[arg] ? c : arg;
    out.correct += arg == labels[r] ? 1 : 0;
    out.loss_sum -= static_cast<double>(row[labels[r]]);
    if (grad != nullptr) {
      for (int64_t c = 0; c < classes; ++c) {
        const double p = std::exp(static_cast<double>(row[c]));
        grad[r * classes + c] = static_cast<float>((p - (c == labels[r] ? 1.0 : 0.0)) / rows);
      }
    }
  }
  return out;
}

struct EpochRec {
  int64_t epoch = 0;
  bool complete = false;
  int64_t steps = 0, train_samples = 0, train_correct = 0;
  double train_loss_sum = 0;
  int64_t train_ns = 0, loader_ns = 0, step_ns = 0;
  int64_t copy_ns = 0, copy_bytes_per_batch = 0;  // the batch's host-to-device copy (in loader_ns)
  int64_t eval_samples = 0, eval_correct = 0, eval_ns = 0;
  double eval_loss_sum = 0;
};

std::string epoch_json(const EpochRec& e) {
  std::ostringstream js;
  js << "{\"epoch\":" << e.epoch << ",\"complete\":" << (e.complete ? "true" : "false")
     << ",\"steps\":" << e.steps << ",\"train_samples\":" << e.train_samples
     << ",\"train_loss_sum\":" << num(e.train_loss_sum) << ",\"train_correct\":" << e.train_correct
     << ",\"train_ns\":" << e.train_ns << ",\"loader_ns\":" << e.loader_ns
     << ",\"step_ns\":" << e.step_ns << ",\"copy_ns\":" << e.copy_ns
     << ",\"copy_bytes_per_batch\":" << e.copy_bytes_per_batch << ",\"eval_samples\":" << e.eval_samples
     << ",\"eval_correct\":" << e.eval_correct << ",\"eval_loss_sum\":" << num(e.eval_loss_sum)
     << ",\"eval_ns\":" << e.eval_ns << "}";
  return js.str();
}

// The library handles and the stream, destroyed on every way out.
struct Handles {
  cudaStream_t stream = nullptr;
  cudnnHandle_t dnn = nullptr;
  cublasHandle_t blas = nullptr;
  Handles() = default;
  Handles(const Handles&) = delete;
  Handles& operator=(const Handles&) = delete;
  ~Handles() {
    if (blas) cublasDestroy(blas);
    if (dnn) cudnnDestroy(dnn);
    if (stream) cudaStreamDestroy(stream);
  }
};

}  // namespace

int train(const Args& args) {
  require_device();  // before anything else: one clear line on a machine without a GPU
  const auto device = opt(args, "device", "cuda");
  if (device != "cuda") throw std::runtime_error("stackcost_cudnn trains on device=cuda only, not " + device);
  const int threads = static_cast<int>(std::stoll(arg(args, "threads")));  // recorded: one host thread
  const Family family = parse_family(args, "cudnn");
  const std::string& arch = family.arch;
  const int64_t classes = std::stoll(arg(args, "num_classes"));
  const int64_t channels = std::stoll(arg(args, "in_channels"));
  const bool conv_bias = std::stoll(arg(args, "conv_bias")) != 0;
  const int64_t resolution = std::stoll(arg(args, "resolution"));
  const int64_t batch = std::stoll(arg(args, "batch"));
  const int64_t epochs = std::stoll(arg(args, "epochs"));
  const std::string optimizer = arg(args, "optimizer");
  const double lr = std::stod(arg(args, "lr"));
  const double momentum = std::stod(arg(args, "momentum"));
  const std::string schedule = arg(args, "schedule");
  const int64_t max_steps = std::stoll(opt(args, "max_steps", "0"));
  const double divergence_factor = std::stod(opt(args, "divergence_factor", "1000"));
  const std::string final_weights = opt(args, "final_weights", "");
  const std::string dropout = opt(args, "dropout", "on");
  const auto seed = static_cast<uint32_t>(std::stoul(opt(args, "seed", "0")));

  const bool resnet = family.resnet();
  if (optimizer != "sgd" && optimizer != "adam") {
    throw std::runtime_error("optimizer must be sgd|adam, not " + optimizer);
  }
  if (schedule != "constant" && schedule != "cosine") {
    throw std::runtime_error("unknown schedule " + schedule + " (constant or cosine)");
  }
  if (dropout != "on" && dropout != "off") throw std::runtime_error("dropout must be on or off");
  if (epochs < 1 || batch < 1 || classes < 1) {
    throw std::runtime_error("epochs, batch and num_classes must be positive");
  }

  SC_CHECK(cudaSetDevice(0));
  SC_CHECK(cudaFree(nullptr));  // the context, now, so the readings below exclude it
  size_t device_total = 0;
  const int64_t used_context = device_used_bytes(&device_total);
  cudaDeviceProp prop{};
  SC_CHECK(cudaGetDeviceProperties(&prop, 0));
  int runtime_version = 0, driver_version = 0;
  SC_CHECK(cudaRuntimeGetVersion(&runtime_version));
  SC_CHECK(cudaDriverGetVersion(&driver_version));

  // DeviceMemory before the handles: destroyed after them, so every buffer outlives the
  // libraries' last use of it.
  DeviceMemory mem;
  Handles h;
  // A blocking stream: it waits for the legacy default stream, where DeviceMemory's
  // cudaMemset zeroes each new buffer.
  SC_CHECK(cudaStreamCreate(&h.stream));
  SC_CHECK(cudnnCreate(&h.dnn));
  SC_CHECK(cudnnSetStream(h.dnn, h.stream));
  SC_CHECK(cublasCreate(&h.blas));
  SC_CHECK(cublasSetStream(h.blas, h.stream));  // before cublasSetWorkspace: it resets the workspace
  // fp32 training: the prescribed precision in every phase, no TF32.
  SC_CHECK(cublasSetMathMode(h.blas, CUBLAS_PEDANTIC_MATH));
  const size_t blas_workspace = size_t{32} << 20;  // cuBLAS's recommendation for Hopper
  SC_CHECK(cublasSetWorkspace(h.blas, mem.bytes(blas_workspace, "cublas_workspace"), blas_workspace));
  const int64_t used_handles = device_used_bytes();
  const int64_t baseline_rss = vm_bytes("VmRSS:");

  Weights weights(read_tensors(arg(args, "weights")));
  const Split train_set =
      read_split(arg(args, "train_data"), "train_data", channels, resolution, classes, epochs);
  const Split test_set =
      read_split(arg(args, "test_data"), "test_data", channels, resolution, classes, 0);
  if (batch > train_set.n) {
    throw std::runtime_error("batch " + std::to_string(batch) + " exceeds the " +
                             std::to_string(train_set.n) + " training samples");
  }
  const int64_t steps_per_epoch = train_set.n / batch;
  const int64_t total_steps = epochs * steps_per_epoch;
  const int64_t chw = channels * resolution * resolution;
  const float dropout_p = dropout == "on" ? 0.5f : 0.f;

  Context ctx{mem, h.dnn, h.blas, h.stream};
  State state(ctx, weights);
  std::vector<float> input(static_cast<size_t>(batch * chw), 0.f), eval_input(input.size(), 0.f);
  std::vector<int64_t> labels(static_cast<size_t>(batch));
  std::vector<float> grad(static_cast<size_t>(batch * classes), 0.f);
  std::unique_ptr<Net> net;
  const auto build = [&] {
    net = std::make_unique<Net>(ctx, state);
    const Act x = net->input(static_cast<int>(batch), static_cast<int>(channels), static_cast<int>(resolution),
                             static_cast<int>(resolution));
    if (resnet) {
      build_train_resnet(*net, x, family, classes, conv_bias);
    } else {
      build_train_mnist(*net, x, classes, conv_bias, dropout_p);
    }
    weights.check_all_used();
    SC_CHECK(cudaDeviceSynchronize());
  };
  std::mt19937 rng(seed);

  int64_t cold_ns = -1, used_built = -1;
  std::vector<int64_t> samples_ns;
  std::vector<float> losses;
  std::vector<EpochRec> records;
  std::string diverged;
  double reference = NAN;
  int64_t step = 0;  // global, 0-based
  for (int64_t epoch = 1; epoch <= epochs; ++epoch) {
    EpochRec rec;
    rec.epoch = epoch;
    rec.copy_bytes_per_batch = static_cast<int64_t>(input.size() * sizeof(float));  // images; labels stay on the host
    const int64_t* order = train_set.order.data() + (epoch - 1) * train_set.n;
    const auto t_epoch = Clock::now();
    for (int64_t i = 0; i < steps_per_epoch; ++i) {
      const auto t0 = Clock::now();
      for (int64_t r = 0; r < batch; ++r) {
        const int64_t idx = order[i * batch + r];
        std::memcpy(input.data() + r * chw, train_set.images.data.data() + idx * chw,
                    static_cast<size_t>(chw) * sizeof(float));
        labels[static_cast<size_t>(r)] = train_set.labels[static_cast<size_t>(idx)];
      }
      const auto t1 = Clock::now();
      int64_t build_ns = 0;
      if (!net) {  // the cold step: descriptors, buffers and algorithms are made here
        build();
        build_ns = ns_between(t1, Clock::now());
        used_built = device_used_bytes();
      }
      const auto t2 = Clock::now();
      ctx.upload(net->input_data(), input.data(), input.size());  // the loader's copy, waited for
      const auto t3 = Clock::now();
      const double lr_t = schedule == "cosine"
                              ? lr * (1 + std::cos(kPi * static_cast<double>(step) /
                                                   static_cast<double>(total_steps))) / 2
                              : lr;
      net->fill_masks(rng);
      net->forward(true);
      const LossOut l = cross_entropy(net->log_probs().data(), grad.data(), labels.data(), batch, classes);
      net->backward(grad);
      if (optimizer == "adam") {
        state.adam(lr_t);
      } else {
        state.sgd(static_cast<float>(lr_t), static_cast<float>(momentum));
      }
      SC_CHECK(cudaStreamSynchronize(h.stream));  // the step is done when the device is
      const auto t4 = Clock::now();

      const int64_t step_ns = build_ns + ns_between(t3, t4);
      if (cold_ns < 0) {
        cold_ns = step_ns;
      } else {
        samples_ns.push_back(step_ns);
      }
      rec.loader_ns += ns_between(t0, t1) + ns_between(t2, t3);
      rec.copy_ns += ns_between(t2, t3);
      rec.step_ns += step_ns;
      const auto loss = static_cast<float>(l.loss_sum / static_cast<double>(batch));
      losses.push_back(loss);
      rec.steps += 1;
      rec.train_samples += batch;
      rec.train_correct += l.correct;
      rec.train_loss_sum += loss;
      ++step;
      if (std::isnan(reference)) reference = loss;
      if (!std::isfinite(loss)) {
        diverged = "loss " + num(loss) + " at epoch " + std::to_string(epoch) + " step " +
                   std::to_string(i + 1);
      } else if (loss > divergence_factor * reference) {
        diverged = "loss " + fmt3(loss) + " > " + fmt3(divergence_factor) + " x " +
                   fmt3(reference) + " at epoch " + std::to_string(epoch) + " step " +
                   std::to_string(i + 1);
      }
      if (!diverged.empty() || (max_steps > 0 && step >= max_steps)) break;
    }
    rec.train_ns = ns_between(t_epoch, Clock::now());
    rec.complete = diverged.empty() && rec.steps == steps_per_epoch;
    if (!diverged.empty()) {  // as the Python worker: a diverged epoch is not evaluated
      records.push_back(rec);
      break;
    }
    if (epoch == 1) reference = rec.train_loss_sum / static_cast<double>(rec.steps);

    const auto t_eval = Clock::now();
    for (int64_t start = 0; start < test_set.n; start += batch) {
      const int64_t rows = std::min(batch, test_set.n - start);
      std::memcpy(eval_input.data(), test_set.images.data.data() + start * chw,
                  static_cast<size_t>(rows * chw) * sizeof(float));
      std::fill(eval_input.begin() + rows * chw, eval_input.end(), 0.f);  // padding rows
      ctx.upload(net->input_data(), eval_input.data(), eval_input.size());
      net->forward(false);
      const LossOut l = cross_entropy(net->log_probs().data(), nullptr, test_set.labels.data() + start, rows,
                                      classes);
      rec.eval_loss_sum += l.loss_sum;
      rec.eval_correct += l.correct;
    }
    rec.eval_samples = test_set.n;
    rec.eval_ns = ns_between(t_eval, Clock::now());
    records.push_back(rec);
    if (max_steps > 0 && step >= max_steps) break;
  }
  const int64_t used_after = device_used_bytes();

  if (!final_weights.empty()) write_host_tensors(final_weights, state.export_plain());

  std::ostringstream by_kind;
  for (const auto& [kind, bytes] : mem.by_kind()) {
    by_kind << (by_kind.tellp() > 0 ? "," : "") << json_string(kind) << ":" << bytes;
  }
  std::ostringstream js;
  js << "{\"cold_ns\":" << cold_ns << ",\"samples_ns\":[";
  for (size_t i = 0; i < samples_ns.size(); ++i) js << (i ? "," : "") << samples_ns[i];
  js << "],\"losses\":[";
  for (size_t i = 0; i < losses.size(); ++i) js << (i ? "," : "") << num(losses[i]);
  js << "],\"diverged\":" << json_string(diverged) << ",\"epochs\":[";
  for (size_t i = 0; i < records.size(); ++i) js << (i ? "," : "") << epoch_json(records[i]);
  js << "],\"peak_rss_bytes\":" << vm_bytes("VmHWM:") << ",\"baseline_rss_bytes\":" << baseline_rss;
  js << ",\"details\":{\"arch\":" << json_string(arch) << ",\"device\":\"cuda\""
     << ",\"device_name\":" << json_string(prop.name) << ",\"compute_capability\":\"" << prop.major << "."
     << prop.minor << "\""
     << ",\"cudnn\":\"" << version3(static_cast<int>(cudnnGetVersion())) << "\""
     << ",\"cudnn_header\":\"" << CUDNN_MAJOR << "." << CUDNN_MINOR << "." << CUDNN_PATCHLEVEL << "\""
     << ",\"cudnn_api\":\"legacy\",\"cublas\":\"" << CUBLAS_VER_MAJOR << "." << CUBLAS_VER_MINOR << "."
     << CUBLAS_VER_PATCH << "\",\"cuda_runtime\":\"" << cuda_version(runtime_version)
     << "\",\"cuda_driver\":\"" << cuda_version(driver_version) << "\""
     << ",\"math\":\"fp32\",\"conv_math_type\":" << json_string(math_name(CUDNN_FMA_MATH))
     << ",\"cublas_math\":" << json_string(cublas_math_name(CUBLAS_PEDANTIC_MATH))
     << ",\"layout\":\"NCHW\",\"algo_choice\":\"heuristic\""
     << ",\"algo_heuristic\":\"cudnnGetConvolution{Forward,BackwardFilter,BackwardData}Algorithm_v7, "
        "first FMA entry that runs\""
     << ",\"bn_folded\":false,\"bn_mode\":\"CUDNN_BATCHNORM_SPATIAL\""
     << ",\"bn_train\":\"cudnnBatchNormalizationForwardTraining (batch statistics; running statistics "
        "updated in the call, factor 0.1) and cudnnBatchNormalizationBackward\""
     << ",\"eval_bn\":\"cudnnBatchNormalizationForwardInference (running statistics)\""
     << ",\"max_pool_mode\":\"CUDNN_POOLING_MAX_DETERMINISTIC\""
     << ",\"optimizer\":" << json_string(optimizer) << ",\"optimizer_impl\":"
     << json_string(std::string("own CUDA kernel (optimizer.cu), torch's foreach order, one launch per tensor"))
     << ",\"schedule\":" << json_string(schedule) << ",\"lr\":" << num(lr)
     << ",\"momentum\":" << num(momentum)
     << ",\"dropout\":" << json_string(resnet ? "none in the model" : dropout)
     << ",\"seed\":" << seed << ",\"steps_per_epoch\":" << steps_per_epoch
     << ",\"parameters\":" << state.param_count();
  if (net) {
    js << ",\"forward_launches\":" << net->forward_launches() << ",\"backward_launches\":" << net->backward_launches()
       << ",\"convs\":" << net->convs_json();
  }
  js << ",\"conv_workspace_bytes\":" << ctx.workspace_bytes << ",\"device_alloc_peak_bytes\":" << mem.peak()
     << ",\"device_alloc_bytes\":{" << by_kind.str() << "}"
     << ",\"device_total_bytes\":" << device_total << ",\"device_used_context_bytes\":" << used_context
     << ",\"device_used_handles_bytes\":" << used_handles << ",\"device_used_built_bytes\":" << used_built
     << ",\"device_used_after_bytes\":" << used_after
     << ",\"device_used_method\":\"cudaMemGetInfo (total - free, whole device): after the context, after the "
        "library handles, after building the network, after the last epoch\""
     << ",\"loader\":\"gather on the host, then a pageable host-to-device copy, waited for\""
     << ",\"eval_partial_batch\":\"padded with zeros to the batch size\""
     << ",\"loss\":\"cudnnSoftmaxForward (LOG) on the device, copied back; cross-entropy and its gradient in a "
        "plain loop (double), the gradient copied to the device\""
     << ",\"sync\":\"cudaStreamSynchronize at the end of every step, before the clock is read\""
     << ",\"host_threads\":1,\"threads_requested\":" << threads
     << ",\"clock\":\"std::chrono::steady_clock\"}}";
  std::cout << js.str() << std::endl;
  return 0;
}

}  // namespace stackcost::cudnn
