// The training network (see train_net.hpp): each layer adds its forward primitive now and
// a closure that adds its backward primitives; finish() runs the closures in reverse, so the
// backward list is the forward list reversed and every gradient is complete before its
// producer reads it.
#include "train_net.hpp"

#include <cmath>
#include <cstring>
#include <stdexcept>

namespace stackcost::onednn {

using dnnl::algorithm;
using dnnl::prop_kind;
using nflags = dnnl::normalization_flags;

namespace {

constexpr float kBnEps = 1e-5f;        // torch.nn.BatchNorm2d's default
constexpr double kBnMomentum = 0.1;    // ... and its running-stat momentum

float* data_of(const memory& m) { return static_cast<float*>(m.get_data_handle()); }
size_t floats_of(const memory& m) { return m.get_desc().get_size() / sizeof(float); }

memory zeros(const memory::desc& md, const dnnl::engine& engine) {
  memory m(md, engine);
  std::memset(m.get_data_handle(), 0, md.get_size());
  return m;
}

memory::desc any_of(const memory::dims& dims) { return {dims, dt::f32, tag::any}; }

}  // namespace

// ---- State ------------------------------------------------------------------------------

memory State::load(const std::string& name, const std::vector<int64_t>& dims,
                   const memory::desc& plain, const memory::desc& layout) {
  HostTensor t = weights_.take(name, dims);
  memory user(plain, ctx_.engine, t.data.data());
  memory own = zeros(layout, ctx_.engine);
  if (plain == layout) {
    std::memcpy(own.get_data_handle(), t.data.data(), layout.get_size());
  } else {
    dnnl::reorder(user, own).execute(ctx_.stream, user, own);
    ctx_.stream.wait();
  }
  entries_.push_back({name, dims, own, plain});
  return own;
}

Param& State::create(const std::string& name, const std::vector<int64_t>& dims,
                     const memory::desc& plain, const memory::desc& layout) {
  auto p = std::make_unique<Param>();
  p->name = name;
  p->plain = plain;
  p->value = load(name, dims, plain, layout);
  p->grad = zeros(layout, ctx_.engine);
  p->buf = zeros(layout, ctx_.engine);
  Param& ref = *p;
  by_name_[name] = &ref;
  params_.push_back(std::move(p));
  return ref;
}

Param& State::param(const std::string& name) const {
  const auto it = by_name_.find(name);
  if (it == by_name_.end()) throw std::logic_error("no parameter " + name);
  return *it->second;
}

BnStats& State::create_bn(const std::string& prefix, int64_t channels) {
  auto s = std::make_unique<BnStats>();
  s->prefix = prefix;
  const memory::desc c_md({channels}, dt::f32, tag::x), one_md({1}, dt::f32, tag::x);
  s->running_mean = load(prefix + ".running_mean", {channels}, c_md, c_md);
  s->running_var = load(prefix + ".running_var", {channels}, c_md, c_md);
  s->num_batches_tracked = load(prefix + ".num_batches_tracked", {}, one_md, one_md);
  BnStats& ref = *s;
  bn_by_name_[prefix] = &ref;
  bns_.push_back(std::move(s));
  return ref;
}

BnStats& State::bn(const std::string& prefix) const {
  const auto it = bn_by_name_.find(prefix);
  if (it == bn_by_name_.end()) throw std::logic_error("no batch norm " + prefix);
  return *it->second;
}

void State::sgd(float lr, float momentum) {
  for (auto& p : params_) {
    float* v = data_of(p->value);
    const float* g = data_of(p->grad);
    float* b = data_of(p->buf);
    const auto n = static_cast<int64_t>(floats_of(p->value));
    if (momentum == 0.f) {  // torch keeps no buffer: p -= lr * grad
#pragma omp parallel for if (n > 32768)
      for (int64_t i = 0; i < n; ++i) v[i] += -lr * g[i];
    } else if (!p->has_buf) {  // torch: buf = clone(grad) on the first step
      std::memcpy(b, g, static_cast<size_t>(n) * sizeof(float));
      p->has_buf = true;
#pragma omp parallel for if (n > 32768)
      for (int64_t i = 0; i < n; ++i) v[i] += -lr * b[i];
    } else {  // buf.mul_(momentum).add_(grad); p.add_(buf, alpha=-lr)
#pragma omp parallel for if (n > 32768)
      for (int64_t i = 0; i < n; ++i) {
        b[i] = momentum * b[i] + g[i];
        v[i] += -lr * b[i];
      }
    }
  }
}

void State::adam(double lr) {
  constexpr double kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8;
  ++adam_steps_;
  // Python floats in torch (double), cast to float where they meet a tensor.
  const double bias1 = 1 - std::pow(kBeta1, static_cast<double>(adam_steps_));
  const double bias2 = 1 - std::pow(kBeta2, static_cast<double>(adam_steps_));
  const auto step_size = static_cast<float>(lr / bias1);
  const auto bias2_sqrt = static_cast<float>(std::sqrt(bias2));
  const auto w1 = static_cast<float>(1 - kBeta1), b2 = static_cast<float>(kBeta2);
  const auto w2 = static_cast<float>(1 - kBeta2), eps = static_cast<float>(kEps);
  for (auto& p : params_) {
    if (!p->buf2) p->buf2 = zeros(p->value.get_desc(), ctx_.engine);
    float* v = data_of(p->value);
    const float* g = data_of(p->grad);
    float* m = data_of(p->buf);
    float* s = data_of(p->buf2);
    const auto n = static_cast<int64_t>(floats_of(p->value));
#pragma omp parallel for if (n > 32768)
    for (int64_t i = 0; i < n; ++i) {
      m[i] = m[i] + w1 * (g[i] - m[i]);         // exp_avg.lerp_(grad, 1 - beta1)
      s[i] = s[i] * b2 + w2 * g[i] * g[i];      // exp_avg_sq.mul_(beta2).addcmul_(g, g, 1 - beta2)
      const float denom = std::sqrt(s[i]) / bias2_sqrt + eps;
      v[i] = v[i] + -step_size * (m[i] / denom);  // param.addcdiv_(exp_avg, denom, -step_size)
    }
  }
}

HostTensors State::export_plain() const {
  HostTensors out;
  for (const auto& e : entries_) {
    HostTensor t;
    t.dims = e.dims;
    t.data.resize(e.plain.get_size() / sizeof(float));
    memory dst(e.plain, ctx_.engine, t.data.data());
    if (e.mem.get_desc() == e.plain) {
      std::memcpy(t.data.data(), e.mem.get_data_handle(), e.plain.get_size());
    } else {
      memory src = e.mem;
      dnnl::reorder(src, dst).execute(ctx_.stream, src, dst);
      ctx_.stream.wait();
    }
    out.emplace_back(e.name, std::move(t));
  }
  return out;
}

// ---- Net: bookkeeping -------------------------------------------------------------------

Net::Net(Mode mode, Context& ctx, State& state) : mode_(mode), ctx_(ctx), state_(state) {}

Act Net::new_act(const memory::desc& md, const memory::dims& dims) {
  Act a;
  a.id = static_cast<int>(diffs_.size());
  diffs_.emplace_back();
  a.mem = memory(md, ctx_.engine);
  a.dims = dims;
  return a;
}

Act Net::input(const memory::dims& dims, float* data) {
  Act a;
  a.id = static_cast<int>(diffs_.size());
  diffs_.emplace_back();
  a.mem = memory({dims, dt::f32, tag::nchw}, ctx_.engine, data);
  a.dims = dims;
  a.needs_grad = false;  // no backward_data for the first conv
  return a;
}

void Net::add_op(std::vector<Op>& ops, dnnl::primitive p, std::unordered_map<int, memory> args,
                 bool reorder) {
  ops.push_back({std::move(p), std::move(args), reorder});
}

size_t Net::reorders() const {
  size_t n = 0;
  for (const auto* ops : {&fwd_, &bwd_}) {
    for (const auto& op : *ops) n += op.reorder ? 1 : 0;
  }
  return n;
}

// `m` in layout `md`: itself, or a copy a reorder in `ops` makes every step. A forward
// activation's copy is reused (by backward too): nothing writes an activation after the
// forward pass made it.
memory Net::to_layout(const memory& m, const memory::desc& md, std::vector<Op>& ops) {
  if (m.get_desc() == md) return m;
  for (const auto& [from, out] : forward_copies_) {
    if (from.get() == m.get() && out.get_desc() == md) return out;
  }
  memory out(md, ctx_.engine);
  add_op(ops, dnnl::reorder(m, out), {{DNNL_ARG_FROM, m}, {DNNL_ARG_TO, out}}, true);
  if (&ops == &fwd_) forward_copies_.emplace_back(m, out);
  return out;
}

// A backward primitive's weights: the master copy, or a per-step reorder of it.
memory Net::weights_for(const Param& w, const memory::desc& md) {
  if (w.value.get_desc() == md) return w.value;
  ++weight_reorders_;
  return to_layout(w.value, md, bwd_);
}

// Where backward_weights writes: the gradient itself when the layouts agree ...
memory Net::grad_target(const Param& w, const memory::desc& md) {
  return w.grad.get_desc() == md ? w.grad : memory(md, ctx_.engine);
}

// ... else a temporary reordered into it.
void Net::grad_finish(const Param& w, const memory& target) {
  if (target.get() == w.grad.get()) return;
  ++weight_reorders_;
  memory src = target, dst = w.grad;
  add_op(bwd_, dnnl::reorder(src, dst), {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}}, true);
}

// y's complete gradient, in layout `md`.
memory Net::diff_of(const Act& y, const memory::desc& md) {
  const Diff& d = diffs_.at(static_cast<size_t>(y.id));
  if (!d.written) throw std::logic_error("no gradient reaches an activation");
  return to_layout(d.mem, md, bwd_);
}

Net::Sink Net::sink(const Act& x, const memory::desc& md) {
  Diff& d = diffs_.at(static_cast<size_t>(x.id));
  if (!d.written && md == x.mem.get_desc()) {
    d.mem = memory(md, ctx_.engine);
    d.written = true;
    return {x, d.mem, true};
  }
  return {x, memory(md, ctx_.engine), false};
}

void Net::finish_sink(const Sink& s) {
  if (!s.direct) pass_diff(s.x, s.mem, true);
}

// Add `d` into x's gradient: the first contribution becomes it (aliased when `alias` and
// the layouts agree, else copied); later ones are added with binary_add, in place.
void Net::pass_diff(const Act& x, const memory& d, bool alias) {
  Diff& dd = diffs_.at(static_cast<size_t>(x.id));
  const memory::desc md = x.mem.get_desc();
  if (!dd.written) {
    dd.written = true;
    if (alias && d.get_desc() == md) {
      dd.mem = d;
    } else {
      dd.mem = memory(md, ctx_.engine);
      memory src = d;
      add_op(bwd_, dnnl::reorder(src, dd.mem), {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dd.mem}}, true);
    }
    return;
  }
  const memory src = to_layout(d, md, bwd_);
  const dnnl::binary::primitive_desc pd({algorithm::binary_add, md, md, md}, ctx_.engine);
  add_op(bwd_, dnnl::binary(pd),
         {{DNNL_ARG_SRC_0, dd.mem}, {DNNL_ARG_SRC_1, src}, {DNNL_ARG_DST, dd.mem}});
}

// An eval-mode primitive reads the training pass's weights in their layout; should no
// implementation take that layout, it gets its own layout and a reorder per batch.
template <typename MakePd>
auto Net::eval_pd(const std::string& name, const MakePd& make_pd, const memory::desc& any)
    -> decltype(make_pd(any)) {
  try {
    return make_pd(state_.param(name + ".weight").value.get_desc());
  } catch (const dnnl::error&) {
    return make_pd(any);
  }
}

// ---- Net: layers ------------------------------------------------------------------------

Act Net::conv(const std::string& name, const Act& x, int64_t cout, int64_t k, int64_t stride,
              int64_t pad, bool bias) {
  const int64_t n = x.dims[0], cin = x.dims[1];
  const int64_t oh = (x.dims[2] + 2 * pad - k) / stride + 1;
  const int64_t ow = (x.dims[3] + 2 * pad - k) / stride + 1;
  const memory::dims wdims{cout, cin, k, k}, odims{n, cout, oh, ow}, strides{stride, stride},
      pads{pad, pad};
  const memory::desc bias_md({cout}, dt::f32, tag::x);
  const auto prop = train() ? prop_kind::forward_training : prop_kind::forward_inference;
  using F = dnnl::convolution_forward;
  const auto make_pd = [&](const memory::desc& w_md) {
    return F::primitive_desc(
        bias ? F::desc(prop, algorithm::convolution_direct, any_of(x.dims), w_md, bias_md,
                       any_of(odims), strides, pads, pads)
             : F::desc(prop, algorithm::convolution_direct, any_of(x.dims), w_md, any_of(odims),
                       strides, pads, pads),
        ctx_.engine);
  };
  const F::primitive_desc pd = train() ? make_pd(any_of(wdims)) : eval_pd(name, make_pd, any_of(wdims));
  if (first_conv_src_.empty()) {
    first_conv_src_ = format_name(pd.src_desc());
    first_conv_weights_ = format_name(pd.weights_desc());
  }
  Param& w = train() ? state_.create(name + ".weight", wdims, {wdims, dt::f32, tag::oihw},
                                     pd.weights_desc())
                     : state_.param(name + ".weight");
  Param* b = nullptr;
  if (bias) {
    b = train() ? &state_.create(name + ".bias", {cout}, bias_md, bias_md)
                : &state_.param(name + ".bias");
  }
  const memory src = to_layout(x.mem, pd.src_desc(), fwd_);
  const Act y = new_act(pd.dst_desc(), odims);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src},
                                       {DNNL_ARG_WEIGHTS, to_layout(w.value, pd.weights_desc(), fwd_)},
                                       {DNNL_ARG_DST, y.mem}};
  if (b) args[DNNL_ARG_BIAS] = b->value;
  add_op(fwd_, F(pd), args);
  if (!train()) return y;

  backward_builders_.push_back([=, &w] {
    using W = dnnl::convolution_backward_weights;
    const W::desc wd = b ? W::desc(algorithm::convolution_direct, any_of(x.dims), any_of(wdims),
                                   bias_md, any_of(odims), strides, pads, pads)
                         : W::desc(algorithm::convolution_direct, any_of(x.dims), any_of(wdims),
                                   any_of(odims), strides, pads, pads);
    const W::primitive_desc wpd(wd, ctx_.engine, pd);
    const memory dw = grad_target(w, wpd.diff_weights_desc());
    std::unordered_map<int, memory> wargs{{DNNL_ARG_SRC, to_layout(x.mem, wpd.src_desc(), bwd_)},
                                          {DNNL_ARG_DIFF_DST, diff_of(y, wpd.diff_dst_desc())},
                                          {DNNL_ARG_DIFF_WEIGHTS, dw}};
    if (b) wargs[DNNL_ARG_DIFF_BIAS] = b->grad;
    add_op(bwd_, W(wpd), wargs);
    grad_finish(w, dw);
    if (!x.needs_grad) return;

    using D = dnnl::convolution_backward_data;
    const D::desc dd(algorithm::convolution_direct, any_of(x.dims), any_of(wdims), any_of(odims),
                     strides, pads, pads);
    const D::primitive_desc dpd(dd, ctx_.engine, pd);
    const memory wts = weights_for(w, dpd.weights_desc());
    const memory ddst = diff_of(y, dpd.diff_dst_desc());
    const Sink s = sink(x, dpd.diff_src_desc());
    add_op(bwd_, D(dpd),
           {{DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_WEIGHTS, wts}, {DNNL_ARG_DIFF_SRC, s.mem}});
    finish_sink(s);
  });
  return y;
}

Act Net::batch_norm(const std::string& prefix, const Act& x) {
  const int64_t c = x.dims[1];
  const memory::desc md = x.mem.get_desc(), c_md({c}, dt::f32, tag::x);
  using F = dnnl::batch_normalization_forward;
  const nflags scale_shift = nflags::use_scale | nflags::use_shift;
  const F::desc desc = train()
                           ? F::desc(prop_kind::forward_training, md, kBnEps, scale_shift)
                           : F::desc(prop_kind::forward_inference, md, kBnEps,
                                     scale_shift | nflags::use_global_stats);
  const F::primitive_desc pd(desc, ctx_.engine);
  Param& gamma = train() ? state_.create(prefix + ".weight", {c}, c_md, c_md)
                         : state_.param(prefix + ".weight");
  Param& beta = train() ? state_.create(prefix + ".bias", {c}, c_md, c_md)
                        : state_.param(prefix + ".bias");
  BnStats& st = train() ? state_.create_bn(prefix, c) : state_.bn(prefix);
  const Act y = new_act(pd.dst_desc(), x.dims);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, x.mem}, {DNNL_ARG_DST, y.mem},
                                       {DNNL_ARG_SCALE, gamma.value}, {DNNL_ARG_SHIFT, beta.value}};
  if (!train()) {  // eval: normalize with the running statistics
    args[DNNL_ARG_MEAN] = st.running_mean;
    args[DNNL_ARG_VARIANCE] = st.running_var;
    add_op(fwd_, F(pd), args);
    return y;
  }
  st.count = x.dims[0] * x.dims[2] * x.dims[3];
  if (st.count < 2) {  // torch refuses too: the unbiased variance needs two values
    throw std::runtime_error("batch norm " + prefix +
                             " needs more than 1 value per channel when training (N*H*W = " +
                             std::to_string(st.count) + ")");
  }
  st.batch_mean = memory(pd.mean_desc(), ctx_.engine);
  st.batch_var = memory(pd.variance_desc(), ctx_.engine);
  args[DNNL_ARG_MEAN] = st.batch_mean;
  args[DNNL_ARG_VARIANCE] = st.batch_var;
  add_op(fwd_, F(pd), args);
  bns_.push_back(&st);

  backward_builders_.push_back([=, &gamma, &beta, &st] {
    using B = dnnl::batch_normalization_backward;
    const B::desc bd(prop_kind::backward, md, md, kBnEps, scale_shift);
    const B::primitive_desc bpd(bd, ctx_.engine, pd);
    const memory ddst = diff_of(y, bpd.diff_dst_desc());
    const Sink s = sink(x, bpd.diff_src_desc());
    add_op(bwd_, B(bpd),
           {{DNNL_ARG_SRC, x.mem}, {DNNL_ARG_MEAN, st.batch_mean}, {DNNL_ARG_VARIANCE, st.batch_var},
            {DNNL_ARG_SCALE, gamma.value}, {DNNL_ARG_SHIFT, beta.value}, {DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_DIFF_SRC, s.mem},
            {DNNL_ARG_DIFF_SCALE, gamma.grad}, {DNNL_ARG_DIFF_SHIFT, beta.grad}});
    finish_sink(s);
  });
  return y;
}

Act Net::relu(const Act& x) {
  const memory::desc md = x.mem.get_desc();
  using F = dnnl::eltwise_forward;
  const F::primitive_desc pd(
      {train() ? prop_kind::forward_training : prop_kind::forward_inference,
       algorithm::eltwise_relu, md, 0.f, 0.f},
      ctx_.engine);
  const Act y = new_act(pd.dst_desc(), x.dims);
  add_op(fwd_, F(pd), {{DNNL_ARG_SRC, x.mem}, {DNNL_ARG_DST, y.mem}});
  if (!train()) return y;

  backward_builders_.push_back([=] {
    using B = dnnl::eltwise_backward;
    // relu's backward from its source: diff_src = src > 0 ? diff_dst : 0, as torch.
    const B::primitive_desc bpd({algorithm::eltwise_relu, md, md, 0.f, 0.f}, ctx_.engine, pd);
    const memory ddst = diff_of(y, bpd.diff_dst_desc());
    const Sink s = sink(x, bpd.diff_src_desc());
    add_op(bwd_, B(bpd), {{DNNL_ARG_SRC, x.mem}, {DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_DIFF_SRC, s.mem}});
    finish_sink(s);
  });
  return y;
}

Act Net::max_pool(const Act& x, int64_t k, int64_t stride, int64_t pad) {
  const int64_t oh = (x.dims[2] + 2 * pad - k) / stride + 1;
  const int64_t ow = (x.dims[3] + 2 * pad - k) / stride + 1;
  return pool(x, algorithm::pooling_max, {k, k}, {stride, stride}, {pad, pad},
              {x.dims[0], x.dims[1], oh, ow});
}

// torch's AdaptiveAvgPool2d((1, 1)): the mean over all of H x W.
Act Net::global_avg_pool(const Act& x) {
  return pool(x, algorithm::pooling_avg_exclude_padding, {x.dims[2], x.dims[3]}, {1, 1}, {0, 0},
              {x.dims[0], x.dims[1], 1, 1});
}

Act Net::pool(const Act& x, algorithm alg, const memory::dims& kernel, const memory::dims& strides,
              const memory::dims& pads, const memory::dims& odims) {
  const memory::desc md = x.mem.get_desc();
  using F = dnnl::pooling_forward;
  const F::primitive_desc pd(
      {train() ? prop_kind::forward_training : prop_kind::forward_inference, alg, md,
       any_of(odims), strides, kernel, pads, pads},
      ctx_.engine);
  const Act y = new_act(pd.dst_desc(), odims);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, x.mem}, {DNNL_ARG_DST, y.mem}};
  memory ws;  // max pooling's argmax, kept for backward
  if (train() && pd.workspace_desc().get_size() > 0) {
    ws = memory(pd.workspace_desc(), ctx_.engine);
    args[DNNL_ARG_WORKSPACE] = ws;
  }
  add_op(fwd_, F(pd), args);
  if (!train()) return y;

  backward_builders_.push_back([=] {
    using B = dnnl::pooling_backward;
    const B::primitive_desc bpd({alg, md, pd.dst_desc(), strides, kernel, pads, pads}, ctx_.engine, pd);
    const memory ddst = diff_of(y, bpd.diff_dst_desc());
    const Sink s = sink(x, bpd.diff_src_desc());
    std::unordered_map<int, memory> bargs{{DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_DIFF_SRC, s.mem}};
    if (ws) bargs[DNNL_ARG_WORKSPACE] = ws;
    add_op(bwd_, B(bpd), bargs);
    finish_sink(s);
  });
  return y;
}

// The residual add. Backward: the same gradient to both branches (a's aliases it).
Act Net::add(const Act& a, const Act& b) {
  const memory::desc md = a.mem.get_desc();
  const memory src1 = to_layout(b.mem, md, fwd_);
  const dnnl::binary::primitive_desc pd({algorithm::binary_add, md, md, md}, ctx_.engine);
  const Act y = new_act(md, a.dims);
  add_op(fwd_, dnnl::binary(pd), {{DNNL_ARG_SRC_0, a.mem}, {DNNL_ARG_SRC_1, src1}, {DNNL_ARG_DST, y.mem}});
  if (!train()) return y;

  backward_builders_.push_back([=] {
    const memory d = diff_of(y, md);
    pass_diff(b, d, false);  // first: a may alias d and accumulate into it later
    pass_diff(a, d, true);
  });
  return y;
}

// Inner product over all of x's non-batch dims (torch's C,H,W flatten order); the weight
// [out, C*H*W] is viewed as oihw when x is 4-D. Output: plain nc.
Act Net::linear(const std::string& name, const Act& x, int64_t out) {
  const int64_t n = x.dims[0];
  int64_t in = 1;
  for (size_t i = 1; i < x.dims.size(); ++i) in *= x.dims[i];
  memory::dims wdims = x.dims;
  wdims[0] = out;
  const tag plain = x.dims.size() == 4 ? tag::oihw : tag::oi;
  const memory::desc bias_md({out}, dt::f32, tag::x), dst_md({n, out}, dt::f32, tag::nc);
  using F = dnnl::inner_product_forward;
  const auto make_pd = [&](const memory::desc& w_md) {
    return F::primitive_desc({train() ? prop_kind::forward_training : prop_kind::forward_inference,
                              any_of(x.dims), w_md, bias_md, dst_md},
                             ctx_.engine);
  };
  const F::primitive_desc pd = train() ? make_pd(any_of(wdims)) : eval_pd(name, make_pd, any_of(wdims));
  Param& w = train() ? state_.create(name + ".weight", {out, in}, {wdims, dt::f32, plain},
                                     pd.weights_desc())
                     : state_.param(name + ".weight");
  Param& b = train() ? state_.create(name + ".bias", {out}, bias_md, bias_md)
                     : state_.param(name + ".bias");
  const memory src = to_layout(x.mem, pd.src_desc(), fwd_);
  const Act y = new_act(pd.dst_desc(), {n, out});
  add_op(fwd_, F(pd),
         {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, to_layout(w.value, pd.weights_desc(), fwd_)},
          {DNNL_ARG_BIAS, b.value}, {DNNL_ARG_DST, y.mem}});
  if (!train()) return y;

  backward_builders_.push_back([=, &w, &b] {
    using W = dnnl::inner_product_backward_weights;
    const W::primitive_desc wpd({any_of(x.dims), any_of(wdims), bias_md, dst_md}, ctx_.engine, pd);
    const memory dw = grad_target(w, wpd.diff_weights_desc());
    add_op(bwd_, W(wpd),
           {{DNNL_ARG_SRC, to_layout(x.mem, wpd.src_desc(), bwd_)},
            {DNNL_ARG_DIFF_DST, diff_of(y, wpd.diff_dst_desc())},
            {DNNL_ARG_DIFF_WEIGHTS, dw},
            {DNNL_ARG_DIFF_BIAS, b.grad}});
    grad_finish(w, dw);
    if (!x.needs_grad) return;

    using D = dnnl::inner_product_backward_data;
    const D::primitive_desc dpd({any_of(x.dims), any_of(wdims), dst_md}, ctx_.engine, pd);
    const memory wts = weights_for(w, dpd.weights_desc());
    const memory ddst = diff_of(y, dpd.diff_dst_desc());
    const Sink s = sink(x, dpd.diff_src_desc());
    add_op(bwd_, D(dpd), {{DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_WEIGHTS, wts}, {DNNL_ARG_DIFF_SRC, s.mem}});
    finish_sink(s);
  });
  return y;
}

Act Net::dropout(const Act& x, float p, bool channel) {
  if (!train() || p <= 0.f) return x;
  const memory::desc md = x.mem.get_desc();
  const memory::dims mdims = channel ? memory::dims{x.dims[0], x.dims[1], 1, 1} : x.dims;
  const memory::desc mask_md(mdims, dt::f32, mdims.size() == 4 ? tag::nchw : tag::nc);
  const memory mask(mask_md, ctx_.engine);
  masks_.push_back({mask, p});
  const dnnl::binary::primitive_desc pd({algorithm::binary_mul, md, mask_md, md}, ctx_.engine);
  const Act y = new_act(md, x.dims);
  add_op(fwd_, dnnl::binary(pd), {{DNNL_ARG_SRC_0, x.mem}, {DNNL_ARG_SRC_1, mask}, {DNNL_ARG_DST, y.mem}});

  backward_builders_.push_back([=] {  // diff_src = diff_dst * mask
    const memory ddst = diff_of(y, md);
    const Sink s = sink(x, md);
    add_op(bwd_, dnnl::binary(pd),
           {{DNNL_ARG_SRC_0, ddst}, {DNNL_ARG_SRC_1, mask}, {DNNL_ARG_DST, s.mem}});
    finish_sink(s);
  });
  return y;
}

void Net::finish(const Act& logits) {
  const memory::desc plain(logits.dims, dt::f32, tag::nc);
  if (!(logits.mem.get_desc() == plain)) throw std::logic_error("logits must be plain nc");
  logits_ = logits.mem;
  if (!train()) return;
  logits_grad_ = memory(plain, ctx_.engine);
  diffs_.at(static_cast<size_t>(logits.id)) = {logits_grad_, true};
  for (auto it = backward_builders_.rbegin(); it != backward_builders_.rend(); ++it) (*it)();
  backward_builders_.clear();
}

// ---- Net: running a step ----------------------------------------------------------------

void Net::fill_masks(std::mt19937& rng) {
  for (const auto& m : masks_) {
    std::bernoulli_distribution keep(1.0 - m.p);
    const float scale = 1.f / (1.f - m.p);
    float* d = data_of(m.mem);
    const size_t n = floats_of(m.mem);
    for (size_t i = 0; i < n; ++i) d[i] = keep(rng) ? scale : 0.f;
  }
}

void Net::forward() {
  for (auto& op : fwd_) op.prim.execute(ctx_.stream, op.args);
  ctx_.stream.wait();
}

void Net::backward() {
  for (auto& op : bwd_) op.prim.execute(ctx_.stream, op.args);
  ctx_.stream.wait();
}

// running = (1 - 0.1) * running + 0.1 * batch statistic (the variance unbiased), in double
// as torch's CPU kernel; num_batches_tracked += 1.
void Net::update_running_stats() {
  for (BnStats* st : bns_) {
    float* rm = data_of(st->running_mean);
    float* rv = data_of(st->running_var);
    const float* mean = data_of(st->batch_mean);
    const float* var = data_of(st->batch_var);
    const double unbias = static_cast<double>(st->count) / static_cast<double>(st->count - 1);
    const size_t c = floats_of(st->running_mean);
    for (size_t i = 0; i < c; ++i) {
      rm[i] = static_cast<float>(kBnMomentum * mean[i] + (1 - kBnMomentum) * rm[i]);
      rv[i] = static_cast<float>(kBnMomentum * var[i] * unbias + (1 - kBnMomentum) * rv[i]);
    }
    data_of(st->num_batches_tracked)[0] += 1.f;
  }
}

}  // namespace stackcost::onednn
