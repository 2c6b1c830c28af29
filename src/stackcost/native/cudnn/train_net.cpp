// The training network (see train_net.hpp). Not yet run on a GPU: every call below is
// checked against cuDNN 9's and cuBLAS's headers, not against a device.
#include "train_net.hpp"

#include "optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <tuple>

namespace stackcost::cudnn {

namespace {

const float kOne = 1.f, kZero = 0.f;
constexpr double kBnEps = 1e-5;       // torch.nn.BatchNorm2d's default
constexpr double kBnMomentum = 0.1;   // ... and its running-stat momentum
// SPATIAL: one mean and variance per channel over N*H*W, as BatchNorm2d. (PERSISTENT is
// faster but may overflow on some inputs, and is not what torch's reference runs.)
constexpr cudnnBatchNormMode_t kBnMode = CUDNN_BATCHNORM_SPATIAL;

bool tensor_op(cudnnMathType_t m) {
  return m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

// The heuristic's ranked list, tried in order (see AlgoChoice). `size(algo, &bytes)` and
// `launch(algo, bytes)` return cuDNN's status; the workspace is grown before the launch.
template <typename Perf, typename Size, typename Launch>
AlgoChoice choose(const std::string& what, const std::vector<Perf>& perf, int returned, Context& ctx,
                  const Size& size, const Launch& launch, decltype(Perf::algo)* chosen) {
  AlgoChoice c;
  std::string refusals;
  for (int i = 0; i < returned; ++i) {
    const Perf& p = perf[static_cast<size_t>(i)];
    if (p.status != CUDNN_STATUS_SUCCESS || tensor_op(p.mathType)) {
      ++c.rejected;
      continue;
    }
    size_t bytes = 0;
    cudnnStatus_t s = size(p.algo, &bytes);
    if (s == CUDNN_STATUS_SUCCESS) {
      ctx.reserve_workspace(bytes);
      s = launch(p.algo, bytes);
    }
    if (s != CUDNN_STATUS_SUCCESS) {
      refusals += " " + algo_name(p.algo) + ": " + cudnnGetErrorString(s) + ";";
      ++c.rejected;
      continue;
    }
    SC_CHECK(cudaStreamSynchronize(ctx.stream));  // a launch that failed on the device throws here
    *chosen = p.algo;
    c.algo = algo_name(p.algo);
    c.workspace_bytes = bytes;
    c.heuristic_rank = i;
    c.deterministic = p.determinism == CUDNN_DETERMINISTIC;
    return c;
  }
  throw std::runtime_error(what + ": none of the " + std::to_string(returned) +
                           " algorithms cuDNN's heuristics offered runs it;" + refusals);
}

std::string algo_json(const AlgoChoice& c) {
  std::ostringstream out;
  out << "{\"algo\":" << json_string(c.algo) << ",\"workspace_bytes\":" << c.workspace_bytes
      << ",\"heuristic_rank\":" << c.heuristic_rank << ",\"rejected\":" << c.rejected
      << ",\"deterministic\":" << (c.deterministic ? "true" : "false") << "}";
  return out.str();
}

}  // namespace

// ---- Context ----------------------------------------------------------------------------

void Context::reserve_workspace(size_t bytes) {
  if (bytes <= workspace_bytes) return;
  SC_CHECK(cudaDeviceSynchronize());  // nothing may still use the old one
  mem.release(workspace);
  workspace = nullptr;
  workspace = mem.bytes(bytes, "workspace");
  workspace_bytes = bytes;
}

void Context::upload(float* dst, const float* src, size_t count) {
  SC_CHECK(cudaMemcpyAsync(dst, src, count * sizeof(float), cudaMemcpyHostToDevice, stream));
  SC_CHECK(cudaStreamSynchronize(stream));
}

// ---- State ------------------------------------------------------------------------------

float* State::load(const std::string& name, const std::vector<int64_t>& dims) {
  const HostTensor t = weights_.take(name, dims);
  float* p = ctx_.mem.floats(t.data.size(), "parameters and buffers");
  ctx_.upload(p, t.data.data(), t.data.size());
  entries_.push_back({name, dims, p, nullptr});
  return p;
}

Param& State::create(const std::string& name, const std::vector<int64_t>& dims) {
  auto p = std::make_unique<Param>();
  p->name = name;
  p->value = load(name, dims);
  p->count = 1;
  for (const int64_t d : dims) p->count *= static_cast<size_t>(d);
  p->grad = ctx_.mem.floats(p->count, "gradients");
  Param& ref = *p;
  params_.push_back(std::move(p));
  return ref;
}

BnStats& State::create_bn(const std::string& prefix, int channels) {
  auto s = std::make_unique<BnStats>();
  s->prefix = prefix;
  s->channels = channels;
  const auto c = static_cast<int64_t>(channels);
  s->running_mean = load(prefix + ".running_mean", {c});
  s->running_var = load(prefix + ".running_var", {c});
  const HostTensor tracked = weights_.take(prefix + ".num_batches_tracked", {});
  s->num_batches_tracked = tracked.data.at(0);
  entries_.push_back({prefix + ".num_batches_tracked", {}, nullptr, s.get()});
  s->save_mean = ctx_.mem.floats(static_cast<size_t>(channels), "batch statistics");
  s->save_inv_var = ctx_.mem.floats(static_cast<size_t>(channels), "batch statistics");
  BnStats& ref = *s;
  bns_.push_back(std::move(s));
  return ref;
}

void State::sgd(float lr, float momentum) {
  for (auto& p : params_) {
    if (momentum != 0.f && p->buf == nullptr) p->buf = ctx_.mem.floats(p->count, "optimizer state");
    sgd_update(p->value, p->grad, p->buf, p->count, lr, momentum, !p->has_buf, ctx_.stream);
    if (momentum != 0.f) p->has_buf = true;
  }
}

void State::adam(double lr) {
  constexpr double kBeta1 = 0.9, kBeta2 = 0.999;
  ++adam_steps_;
  // Python floats in torch (double), cast to float where they meet a tensor.
  const double bias1 = 1 - std::pow(kBeta1, static_cast<double>(adam_steps_));
  const double bias2 = 1 - std::pow(kBeta2, static_cast<double>(adam_steps_));
  const auto step_size = static_cast<float>(lr / bias1);
  const auto bias2_sqrt = static_cast<float>(std::sqrt(bias2));
  for (auto& p : params_) {
    if (p->buf == nullptr) p->buf = ctx_.mem.floats(p->count, "optimizer state");
    if (p->buf2 == nullptr) p->buf2 = ctx_.mem.floats(p->count, "optimizer state");
    adam_update(p->value, p->grad, p->buf, p->buf2, p->count, step_size, bias2_sqrt, ctx_.stream);
  }
}

HostTensors State::export_plain() const {
  SC_CHECK(cudaStreamSynchronize(ctx_.stream));
  HostTensors out;
  for (const auto& e : entries_) {
    HostTensor t;
    t.dims = e.dims;
    size_t count = 1;
    for (const int64_t d : e.dims) count *= static_cast<size_t>(d);
    t.data.resize(count);
    if (e.device != nullptr) {
      SC_CHECK(cudaMemcpy(t.data.data(), e.device, count * sizeof(float), cudaMemcpyDeviceToHost));
    } else {
      t.data[0] = e.bn->num_batches_tracked;
    }
    out.emplace_back(e.name, std::move(t));
  }
  return out;
}

// ---- Net: bookkeeping -------------------------------------------------------------------

struct Net::Conv {
  Conv(int cin, int cout, int k, int pad, int stride)
      : fd(cout, cin, k, k), cd(pad, stride, CUDNN_FMA_MATH) {}
  FilterDesc fd;
  ConvDesc cd;  // CUDNN_FMA_MATH: fp32 training, no TF32 in any direction
  cudnnTensorDescriptor_t xd = nullptr, yd = nullptr, bd = nullptr;
  const float* x = nullptr;  // its input and output activations
  float* y = nullptr;
  const Param* w = nullptr;
  const Param* b = nullptr;  // null without a bias
  cudnnConvolutionFwdAlgo_t fwd = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  cudnnConvolutionBwdDataAlgo_t bwd_data = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  ConvRecord record;
};

Net::Net(Context& ctx, State& state)
    : ctx_(ctx), state_(state), relu_(CUDNN_ACTIVATION_RELU), add_(CUDNN_OP_TENSOR_ADD),
      mul_(CUDNN_OP_TENSOR_MUL) {}

Net::~Net() = default;

cudnnTensorDescriptor_t Net::desc(int n, int c, int h, int w) {
  descs_.push_back(std::make_unique<TensorDesc>(n, c, h, w));
  return descs_.back()->get();
}

Act Net::new_act(int n, int c, int h, int w) {
  Act a;
  a.id = static_cast<int>(diff_.size());
  diff_.push_back(nullptr);
  written_.push_back(false);
  a.n = n, a.c = c, a.h = h, a.w = w;
  a.data = ctx_.mem.floats(a.numel(), "activations");
  return a;
}

Act Net::input(int n, int c, int h, int w) {
  Act a = new_act(n, c, h, w);
  a.needs_grad = false;  // no backward data for the first conv
  input_ = a;
  return a;
}

const float* Net::grad_of(const Act& y) const {
  const auto i = static_cast<size_t>(y.id);
  if (diff_.at(i) == nullptr || !written_.at(i)) {
    throw std::logic_error("no gradient reaches activation " + std::to_string(y.id));
  }
  return diff_[i];
}

std::pair<float*, const float*> Net::sink(const Act& x) {
  if (!x.needs_grad) throw std::logic_error("the input batch takes no gradient");
  const auto i = static_cast<size_t>(x.id);
  if (diff_.at(i) == nullptr) diff_[i] = ctx_.mem.floats(x.numel(), "gradients");
  const float* beta = written_[i] ? &kOne : &kZero;
  written_[i] = true;
  return {diff_[i], beta};
}

// d reaches x unchanged: x's gradient becomes d itself (alias, when d is its first and the
// caller knows nothing else reads d afterwards), else d is copied or added in.
void Net::pass_diff(const Act& x, float* d, bool alias) {
  if (!x.needs_grad) return;
  const auto i = static_cast<size_t>(x.id);
  if (alias && diff_.at(i) == nullptr && !written_.at(i)) {
    diff_[i] = d;
    written_[i] = true;
    return;
  }
  const auto sunk = sink(x);
  float* dx = sunk.first;
  const float* beta = sunk.second;
  const cudnnTensorDescriptor_t xd = desc(x);
  cudnnHandle_t dnn = ctx_.dnn;
  bwd_.push_back([=] { SC_CHECK(cudnnAddTensor(dnn, &kOne, xd, d, beta, xd, dx)); });
}

// ---- Net: layers ------------------------------------------------------------------------

// Convolution (cross-correlation, torch's Conv2d) with an optional bias added by
// cudnnAddTensor; no fusion (BatchNorm follows it in training). Backward: the filter's
// gradient (cudnnConvolutionBackwardFilter), the bias's (cudnnConvolutionBackwardBias) and
// the input's (cudnnConvolutionBackwardData, skipped for the input batch).
Act Net::conv(const std::string& name, const Act& x, int cout, int k, int stride, int pad, bool bias) {
  Param& w = state_.create(name + ".weight", {cout, x.c, k, k});
  Param* b = bias ? &state_.create(name + ".bias", {cout}) : nullptr;
  convs_.push_back(std::make_unique<Conv>(x.c, cout, k, pad, stride));
  Conv* L = convs_.back().get();
  L->record.name = name;
  L->xd = desc(x);
  int n = 0, c = 0, h = 0, wd = 0;
  SC_CHECK(cudnnGetConvolution2dForwardOutputDim(L->cd.get(), L->xd, L->fd.get(), &n, &c, &h, &wd));
  if (n != x.n || c != cout || h != (x.h + 2 * pad - k) / stride + 1 ||
      wd != (x.w + 2 * pad - k) / stride + 1) {
    throw std::runtime_error(name + ": cuDNN's output shape differs from torch's");
  }
  const Act y = new_act(n, c, h, wd);
  L->yd = desc(y);
  L->bd = desc(1, cout, 1, 1);
  L->x = x.data;
  L->y = y.data;
  L->w = &w;
  L->b = b;
  choose_forward(*L);
  Context* ctx = &ctx_;
  fwd_.push_back([L, ctx](bool) {
    SC_CHECK(cudnnConvolutionForward(ctx->dnn, &kOne, L->xd, L->x, L->fd.get(), L->w->value, L->cd.get(),
                                     L->fwd, ctx->workspace, L->record.fwd.workspace_bytes, &kZero, L->yd,
                                     L->y));
    if (L->b) SC_CHECK(cudnnAddTensor(ctx->dnn, &kOne, L->bd, L->b->value, &kOne, L->yd, L->y));
  });

  builders_.push_back([this, L, ctx, x, y] {
    const float* dy = grad_of(y);
    float* dx = nullptr;
    const float* beta_dx = nullptr;
    if (x.needs_grad) std::tie(dx, beta_dx) = sink(x);
    choose_backward(*L, dy, dx, beta_dx);
    bwd_.push_back([L, ctx, dy, dx, beta_dx] {
      SC_CHECK(cudnnConvolutionBackwardFilter(ctx->dnn, &kOne, L->xd, L->x, L->yd, dy, L->cd.get(), L->bwd_filter,
                                              ctx->workspace, L->record.bwd_filter.workspace_bytes, &kZero,
                                              L->fd.get(), L->w->grad));
      if (L->b) SC_CHECK(cudnnConvolutionBackwardBias(ctx->dnn, &kOne, L->yd, dy, &kZero, L->bd, L->b->grad));
      if (dx) {
        SC_CHECK(cudnnConvolutionBackwardData(ctx->dnn, &kOne, L->fd.get(), L->w->value, L->yd, dy, L->cd.get(),
                                              L->bwd_data, ctx->workspace, L->record.bwd_data.workspace_bytes,
                                              beta_dx, L->xd, dx));
      }
    });
  });
  return y;
}

void Net::choose_forward(Conv& L) {
  Context& ctx = ctx_;
  int max_count = 0;
  SC_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(ctx.dnn, &max_count));
  std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<size_t>(std::max(max_count, 1)));
  int returned = 0;
  SC_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(ctx.dnn, L.xd, L.fd.get(), L.cd.get(), L.yd, max_count,
                                                  &returned, perf.data()));
  L.record.fwd = choose(
      L.record.name + " (forward)", perf, returned, ctx,
      [&](cudnnConvolutionFwdAlgo_t algo, size_t* bytes) {
        return cudnnGetConvolutionForwardWorkspaceSize(ctx.dnn, L.xd, L.fd.get(), L.cd.get(), L.yd, algo, bytes);
      },
      [&](cudnnConvolutionFwdAlgo_t algo, size_t bytes) {
        return cudnnConvolutionForward(ctx.dnn, &kOne, L.xd, L.x, L.fd.get(), L.w->value, L.cd.get(), algo,
                                       ctx.workspace, bytes, &kZero, L.yd, L.y);
      },
      &L.fwd);
}

// Backward filter (always) and backward data (where x takes a gradient: dx, written with
// beta_dx), each from its own heuristic list, each launched once on the still-zero
// activations and gradients (so the trial writes zeros, or adds them).
void Net::choose_backward(Conv& L, const float* dy, float* dx, const float* beta_dx) {
  Context& ctx = ctx_;
  int max_count = 0, returned = 0;
  SC_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(ctx.dnn, &max_count));
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> fperf(static_cast<size_t>(std::max(max_count, 1)));
  SC_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(ctx.dnn, L.xd, L.yd, L.cd.get(), L.fd.get(), max_count,
                                                         &returned, fperf.data()));
  L.record.bwd_filter = choose(
      L.record.name + " (backward filter)", fperf, returned, ctx,
      [&](cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(ctx.dnn, L.xd, L.yd, L.cd.get(), L.fd.get(), algo,
                                                              bytes);
      },
      [&](cudnnConvolutionBwdFilterAlgo_t algo, size_t bytes) {
        return cudnnConvolutionBackwardFilter(ctx.dnn, &kOne, L.xd, L.x, L.yd, dy, L.cd.get(), algo, ctx.workspace,
                                              bytes, &kZero, L.fd.get(), L.w->grad);
      },
      &L.bwd_filter);
  if (dx == nullptr) return;
  L.record.has_bwd_data = true;
  returned = 0;
  SC_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(ctx.dnn, &max_count));
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> dperf(static_cast<size_t>(std::max(max_count, 1)));
  SC_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(ctx.dnn, L.fd.get(), L.yd, L.cd.get(), L.xd, max_count,
                                                       &returned, dperf.data()));
  L.record.bwd_data = choose(
      L.record.name + " (backward data)", dperf, returned, ctx,
      [&](cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(ctx.dnn, L.fd.get(), L.yd, L.cd.get(), L.xd, algo,
                                                            bytes);
      },
      [&](cudnnConvolutionBwdDataAlgo_t algo, size_t bytes) {
        return cudnnConvolutionBackwardData(ctx.dnn, &kOne, L.fd.get(), L.w->value, L.yd, dy, L.cd.get(), algo,
                                            ctx.workspace, bytes, beta_dx, L.xd, dx);
      },
      &L.bwd_data);
}

// Train: cudnnBatchNormalizationForwardTraining (biased batch variance to normalize; the
// running statistics updated in the same call with factor 0.1 and the unbiased variance,
// as torch); eval: cudnnBatchNormalizationForwardInference with the running statistics.
// Backward: cudnnBatchNormalizationBackward from the saved mean and inverse deviation,
// writing gamma's and beta's gradients (beta = 0) and x's.
Act Net::batch_norm(const std::string& prefix, const Act& x) {
  Param* gamma = &state_.create(prefix + ".weight", {x.c});
  Param* beta = &state_.create(prefix + ".bias", {x.c});
  BnStats* st = &state_.create_bn(prefix, x.c);
  const int64_t count = static_cast<int64_t>(x.n) * x.h * x.w;
  if (count < 2) {  // torch refuses too: the unbiased variance needs two values
    throw std::runtime_error("batch norm " + prefix +
                             " needs more than 1 value per channel when training (N*H*W = " +
                             std::to_string(count) + ")");
  }
  const Act y = new_act(x.n, x.c, x.h, x.w);
  const cudnnTensorDescriptor_t xd = desc(x), bnd = desc(1, x.c, 1, 1);
  cudnnHandle_t dnn = ctx_.dnn;
  bns_.push_back(st);
  fwd_.push_back([=](bool train) {
    if (train) {
      SC_CHECK(cudnnBatchNormalizationForwardTraining(dnn, kBnMode, &kOne, &kZero, xd, x.data, xd, y.data, bnd,
                                                      gamma->value, beta->value, kBnMomentum, st->running_mean,
                                                      st->running_var, kBnEps, st->save_mean, st->save_inv_var));
    } else {
      SC_CHECK(cudnnBatchNormalizationForwardInference(dnn, kBnMode, &kOne, &kZero, xd, x.data, xd, y.data, bnd,
                                                       gamma->value, beta->value, st->running_mean,
                                                       st->running_var, kBnEps));
    }
  });
  builders_.push_back([=] {
    const float* dy = grad_of(y);
    const auto sunk = sink(x);  // (C++17 lambdas cannot capture bindings)
    float* dx = sunk.first;
    const float* beta_dx = sunk.second;
    bwd_.push_back([=] {
      SC_CHECK(cudnnBatchNormalizationBackward(dnn, kBnMode, &kOne, beta_dx, &kOne, &kZero, xd, x.data, xd, dy, xd,
                                               dx, bnd, gamma->value, gamma->grad, beta->grad, kBnEps,
                                               st->save_mean, st->save_inv_var));
    });
  });
  return y;
}

// ReLU; backward from its output and input (dx = dy where the output is positive, as
// torch's threshold_backward).
Act Net::relu(const Act& x) {
  const Act y = new_act(x.n, x.c, x.h, x.w);
  const cudnnTensorDescriptor_t d = desc(x);
  cudnnHandle_t dnn = ctx_.dnn;
  const cudnnActivationDescriptor_t act = relu_.get();
  fwd_.push_back([=](bool) {
    SC_CHECK(cudnnActivationForward(dnn, act, &kOne, d, x.data, &kZero, d, y.data));
  });
  builders_.push_back([=] {
    const float* dy = grad_of(y);
    const auto sunk = sink(x);  // (C++17 lambdas cannot capture bindings)
    float* dx = sunk.first;
    const float* beta_dx = sunk.second;
    bwd_.push_back([=] {
      SC_CHECK(cudnnActivationBackward(dnn, act, &kOne, d, y.data, d, dy, d, x.data, beta_dx, d, dx));
    });
  });
  return y;
}

// Max pooling, CUDNN_POOLING_MAX_DETERMINISTIC: its backward routes each window's gradient
// to one element, reproducibly (plain MAX may not between tied maxima).
Act Net::max_pool(const Act& x, int k, int stride, int pad) {
  return pool(x, CUDNN_POOLING_MAX_DETERMINISTIC, k, k, stride, pad);
}

// torch's AdaptiveAvgPool2d((1, 1)): the mean over all of H x W.
Act Net::global_avg_pool(const Act& x) {
  return pool(x, CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING, x.h, x.w, 1, 0);
}

Act Net::pool(const Act& x, cudnnPoolingMode_t mode, int kh, int kw, int stride, int pad) {
  pools_.push_back(std::make_unique<PoolDesc>(mode, kh, kw, pad, stride));
  const cudnnPoolingDescriptor_t pd = pools_.back()->get();
  const cudnnTensorDescriptor_t xd = desc(x);
  int n = 0, c = 0, h = 0, w = 0;
  SC_CHECK(cudnnGetPooling2dForwardOutputDim(pd, xd, &n, &c, &h, &w));
  if (h != (x.h + 2 * pad - kh) / stride + 1 || w != (x.w + 2 * pad - kw) / stride + 1) {
    throw std::runtime_error("pooling: cuDNN's output shape differs from torch's (floor mode)");
  }
  const Act y = new_act(n, c, h, w);
  const cudnnTensorDescriptor_t yd = desc(y);
  cudnnHandle_t dnn = ctx_.dnn;
  fwd_.push_back([=](bool) {
    SC_CHECK(cudnnPoolingForward(dnn, pd, &kOne, xd, x.data, &kZero, yd, y.data));
  });
  builders_.push_back([=] {
    const float* dy = grad_of(y);
    const auto sunk = sink(x);  // (C++17 lambdas cannot capture bindings)
    float* dx = sunk.first;
    const float* beta_dx = sunk.second;
    bwd_.push_back([=] {
      SC_CHECK(cudnnPoolingBackward(dnn, pd, &kOne, yd, y.data, yd, dy, xd, x.data, beta_dx, xd, dx));
    });
  });
  return y;
}

// The residual add, cudnnOpTensor(ADD). Backward: the same gradient to both branches; the
// shortcut's copy (or sum) is taken first, then the main branch aliases it (only the add's
// own backward reads the output's gradient).
Act Net::add(const Act& a, const Act& b) {
  if (a.n != b.n || a.c != b.c || a.h != b.h || a.w != b.w) throw std::logic_error("add: shapes differ");
  const Act y = new_act(a.n, a.c, a.h, a.w);
  const cudnnTensorDescriptor_t d = desc(a);
  cudnnHandle_t dnn = ctx_.dnn;
  const cudnnOpTensorDescriptor_t op = add_.get();
  fwd_.push_back([=](bool) {
    SC_CHECK(cudnnOpTensor(dnn, op, &kOne, d, a.data, &kOne, d, b.data, &kZero, d, y.data));
  });
  builders_.push_back([=] {
    auto* dy = const_cast<float*>(grad_of(y));
    pass_diff(b, dy, false);  // first: a may alias dy and accumulate into it later
    pass_diff(a, dy, true);
  });
  return y;
}

// Fully connected over all of x's non-batch dims (torch's C,H,W flatten order), row-major
// Y[N, out] = X[N, in] W[out, in]^T + b, in cuBLAS's column-major terms:
//   forward        Y^T = W^T' X^T       cublasSgemm(T, N, out, N, in)
//   weight grad    dW^T = X^T dY        cublasSgemm(N, T, in, out, N)    (beta = 0)
//   input grad     dX^T = W^T' dY^T     cublasSgemm(N, N, in, N, out)    (beta: the sink's)
//   bias grad      sum of dY over N     cudnnConvolutionBackwardBias     (beta = 0)
// and the bias added with cudnnAddTensor. cuBLAS runs CUBLAS_PEDANTIC_MATH (no TF32).
Act Net::linear(const std::string& name, const Act& x, int out) {
  const int in = x.c * x.h * x.w, n = x.n;
  Param* w = &state_.create(name + ".weight", {out, in});
  Param* b = &state_.create(name + ".bias", {out});
  const Act y = new_act(n, out, 1, 1);
  const cudnnTensorDescriptor_t yd = desc(y), bd = desc(1, out, 1, 1);
  cudnnHandle_t dnn = ctx_.dnn;
  cublasHandle_t blas = ctx_.blas;
  fwd_.push_back([=](bool) {
    SC_CHECK(cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &kOne, w->value, in, x.data, in, &kZero,
                         y.data, out));
    SC_CHECK(cudnnAddTensor(dnn, &kOne, bd, b->value, &kOne, yd, y.data));
  });
  builders_.push_back([=] {
    const float* dy = grad_of(y);
    float* dx = nullptr;
    const float* beta_dx = nullptr;
    if (x.needs_grad) std::tie(dx, beta_dx) = sink(x);
    bwd_.push_back([=] {
      SC_CHECK(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &kOne, x.data, in, dy, out, &kZero,
                           w->grad, in));
      SC_CHECK(cudnnConvolutionBackwardBias(dnn, &kOne, yd, dy, &kZero, bd, b->grad));
      if (dx) {
        SC_CHECK(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &kOne, w->value, in, dy, out, beta_dx,
                             dx, in));
      }
    });
  });
  return y;
}

// Train: y = x * mask (cudnnOpTensor MUL, the mask [N, C, 1, 1] broadcast for Dropout2d);
// eval: y = x (a device copy). Backward: dx = dy * mask.
Act Net::dropout(const Act& x, float p, bool channel) {
  if (p <= 0.f) return x;
  const int mh = channel ? 1 : x.h, mw = channel ? 1 : x.w;
  const size_t count = static_cast<size_t>(x.n) * x.c * mh * mw;
  float* mask = ctx_.mem.floats(count, "dropout masks");
  masks_.push_back({mask, std::vector<float>(count, 0.f), p});
  const Act y = new_act(x.n, x.c, x.h, x.w);
  const cudnnTensorDescriptor_t xd = desc(x), md = desc(x.n, x.c, mh, mw);
  cudnnHandle_t dnn = ctx_.dnn;
  cudaStream_t stream = ctx_.stream;
  const cudnnOpTensorDescriptor_t op = mul_.get();
  fwd_.push_back([=](bool train) {
    if (train) {
      SC_CHECK(cudnnOpTensor(dnn, op, &kOne, xd, x.data, &kOne, md, mask, &kZero, xd, y.data));
    } else {
      SC_CHECK(cudaMemcpyAsync(y.data, x.data, x.numel() * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    }
  });
  builders_.push_back([=] {
    const float* dy = grad_of(y);
    const auto sunk = sink(x);  // (C++17 lambdas cannot capture bindings)
    float* dx = sunk.first;
    const float* beta_dx = sunk.second;
    bwd_.push_back([=] {
      SC_CHECK(cudnnOpTensor(dnn, op, &kOne, xd, dy, &kOne, md, mask, beta_dx, xd, dx));
    });
  });
  return y;
}

void Net::finish(const Act& logits) {
  logits_ = logits;
  logits_desc_ = desc(logits);
  log_probs_ = ctx_.mem.floats(logits.numel(), "activations");
  log_probs_host_.assign(logits.numel(), 0.f);
  logits_grad_ = ctx_.mem.floats(logits.numel(), "gradients");
  diff_.at(static_cast<size_t>(logits.id)) = logits_grad_;
  written_.at(static_cast<size_t>(logits.id)) = true;
  for (auto it = builders_.rbegin(); it != builders_.rend(); ++it) (*it)();
  builders_.clear();
}

// ---- Net: running a step ----------------------------------------------------------------

// The draws of stackcost_onednn (std::mt19937, one bernoulli per element, masks in forward
// order), uploaded on the stream: a pageable copy returns once its source is staged.
void Net::fill_masks(std::mt19937& rng) {
  for (auto& m : masks_) {
    std::bernoulli_distribution keep(1.0 - m.p);
    const float scale = 1.f / (1.f - m.p);
    for (float& v : m.host) v = keep(rng) ? scale : 0.f;
    SC_CHECK(cudaMemcpyAsync(m.device, m.host.data(), m.host.size() * sizeof(float), cudaMemcpyHostToDevice,
                             ctx_.stream));
  }
}

void Net::forward(bool train) {
  for (const auto& op : fwd_) op(train);
  if (train) {
    for (BnStats* st : bns_) st->num_batches_tracked += 1.f;
  }
}

const std::vector<float>& Net::log_probs() {
  SC_CHECK(cudnnSoftmaxForward(ctx_.dnn, CUDNN_SOFTMAX_LOG, CUDNN_SOFTMAX_MODE_INSTANCE, &kOne, logits_desc_,
                               logits_.data, &kZero, logits_desc_, log_probs_));
  SC_CHECK(cudaMemcpyAsync(log_probs_host_.data(), log_probs_, log_probs_host_.size() * sizeof(float),
                           cudaMemcpyDeviceToHost, ctx_.stream));
  SC_CHECK(cudaStreamSynchronize(ctx_.stream));
  return log_probs_host_;
}

void Net::backward(const std::vector<float>& logits_grad) {
  if (logits_grad.size() != logits_.numel()) throw std::logic_error("backward: gradient size");
  SC_CHECK(cudaMemcpyAsync(logits_grad_, logits_grad.data(), logits_grad.size() * sizeof(float),
                           cudaMemcpyHostToDevice, ctx_.stream));
  for (const auto& op : bwd_) op();
}

std::string Net::convs_json() const {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < convs_.size(); ++i) {
    const ConvRecord& r = convs_[i]->record;
    out << (i ? "," : "") << "{\"name\":" << json_string(r.name) << ",\"fwd\":" << algo_json(r.fwd)
        << ",\"bwd_filter\":" << algo_json(r.bwd_filter)
        << ",\"bwd_data\":" << (r.has_bwd_data ? algo_json(r.bwd_data) : "null") << "}";
  }
  return out.str() + "]";
}

}  // namespace stackcost::cudnn
