// stackcost's oneDNN rung: the zoo's networks built directly from oneDNN primitives.
//
//   stackcost_onednn echo IN.scw OUT.scw         read a tensor file, write it back
//   stackcost_onednn run key=value ...            measure one repetition
//   stackcost_onednn train key=value ...          train in the program's own loop (train.cpp)
//
// run keys: family=resnet|mnist-cnn and its parameters (block, depths: the zoo entry's),
// arch (a label), weights=PATH.scw, folded_bn, num_classes,
// in_channels, resolution, input=PATH.scw, output=PATH.scw, threads, and the protocol:
// min_time_s, min_iters, max_time_s, max_iters, target_ci, z, warmup_tolerance,
// warmup_max_time_s, check_interval_s; optionally profile_iters=N profile_out=PATH (a profiled
// pass after the timed loop: every primitive timed on its own, native/README.md "Profiling").
// Same answer as stackcost_libtorch (native/README.md).
//
// The weights file is prepared by Python (stackcost.backends.native.OneDNNBackend): every
// convolution comes with BatchNorm already folded in, as "<conv>.folded_weight" and
// "<conv>.folded_bias"; linear layers keep their state_dict names. The protocol loop and the
// SCW1 format are shared with stackcost_libtorch (common/), the tensor helpers with train.cpp
// (onednn_util.hpp).
#include <oneapi/dnnl/dnnl.hpp>
#include <oneapi/dnnl/dnnl_debug.h>

#include "common/commands.hpp"
#include "common/protocol.hpp"
#include "onednn_util.hpp"
#include "common/resnet_blocks.hpp"
#include "train.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

using namespace stackcost;  // the shared protocol (common/protocol.hpp)
using namespace stackcost::onednn;  // tensors, weights, names (onednn_util.hpp)

// ---- the network as a list of primitives ------------------------------------------------

struct Act {  // an activation: its memory (whose desc is the layout oneDNN chose)
  memory mem;
  memory::dims dims;  // logical NCHW (or NC)
};

class Net {
 public:
  explicit Net(Weights& weights) : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_), w_(weights) {}

  // The input: a plain nchw buffer the caller fills; the first consumer reorders it if it
  // picked another layout.
  Act input(const memory::dims& dims, float* data) {
    input_ = memory({dims, dt::f32, tag::nchw}, engine_, data);
    return {input_, dims};
  }

  // Convolution with folded BN: weights "<name>.folded_weight", bias "<name>.folded_bias".
  // Post-ops: sum (residual: `residual` is added, its buffer becomes the output), then ReLU.
  Act conv(const std::string& name, const Act& x, int64_t cout, int64_t k, int64_t stride,
           int64_t pad, bool relu, const std::optional<Act>& residual = std::nullopt) {
    const int64_t n = x.dims[0], cin = x.dims[1];
    const int64_t oh = (x.dims[2] + 2 * pad - k) / stride + 1, ow = (x.dims[3] + 2 * pad - k) / stride + 1;
    const memory::dims wdims{cout, cin, k, k}, odims{n, cout, oh, ow};
    dnnl::post_ops ops;
    if (residual) ops.append_sum(1.f);
    if (relu) ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
    dnnl::primitive_attr attr;
    attr.set_post_ops(ops);
    const dnnl::convolution_forward::desc desc(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
        {x.dims, dt::f32, tag::any}, {wdims, dt::f32, tag::any}, {{cout}, dt::f32, tag::x},
        {odims, dt::f32, tag::any}, {stride, stride}, {pad, pad}, {pad, pad});
    const dnnl::convolution_forward::primitive_desc pd(desc, attr, engine_);
    if (first_conv_src_.empty()) {
      first_conv_src_ = format_name(pd.src_desc());
      first_conv_weights_ = format_name(pd.weights_desc());
    }
    const memory src = to_layout(x.mem, pd.src_desc(), name);
    const memory wts = constant(w_.take(name + ".folded_weight", wdims), wdims, tag::oihw, pd.weights_desc());
    const memory bias = constant(w_.take(name + ".folded_bias", {cout}), {cout}, tag::x, pd.bias_desc());
    memory dst;
    if (residual) {
      // In place: the identity's buffer receives conv + identity (nothing reads it later).
      if (residual->mem.get_desc() == pd.dst_desc()) {
        dst = residual->mem;
      } else {
        dst = memory(pd.dst_desc(), engine_);
        add(dnnl::reorder(residual->mem, dst), {{DNNL_ARG_FROM, residual->mem}, {DNNL_ARG_TO, dst}},
            name + " residual");
      }
    } else {
      dst = memory(pd.dst_desc(), engine_);
    }
    add(dnnl::convolution_forward(pd), {{DNNL_ARG_SRC, src},
                                        {DNNL_ARG_WEIGHTS, wts},
                                        {DNNL_ARG_BIAS, bias},
                                        {DNNL_ARG_DST, dst}},
        name);
    return {dst, odims};
  }

  Act pool(const std::string& name, const Act& x, dnnl::algorithm alg, int64_t k, int64_t stride,
           int64_t pad) {
    const int64_t oh = (x.dims[2] + 2 * pad - k) / stride + 1, ow = (x.dims[3] + 2 * pad - k) / stride + 1;
    const memory::dims odims{x.dims[0], x.dims[1], oh, ow};
    const dnnl::pooling_forward::desc desc(dnnl::prop_kind::forward_inference, alg, x.mem.get_desc(),
                                           {odims, dt::f32, tag::any}, {stride, stride}, {k, k},
                                           {pad, pad}, {pad, pad});
    const dnnl::pooling_forward::primitive_desc pd(desc, engine_);
    memory dst(pd.dst_desc(), engine_);
    add(dnnl::pooling_forward(pd), {{DNNL_ARG_SRC, x.mem}, {DNNL_ARG_DST, dst}}, name);
    return {dst, odims};
  }

  // Inner product over all of x's non-batch dims (flatten in C,H,W order, as torch does);
  // the weight [out, C*H*W] is viewed as oihw. Output: plain nc.
  Act linear(const std::string& name, const Act& x, int64_t out, bool relu) {
    memory::dims wdims = x.dims;
    wdims[0] = out;
    int64_t in = 1;
    for (size_t i = 1; i < x.dims.size(); ++i) in *= x.dims[i];
    const tag plain = x.dims.size() == 4 ? tag::oihw : tag::oi;
    dnnl::post_ops ops;
    if (relu) ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
    dnnl::primitive_attr attr;
    attr.set_post_ops(ops);
    const memory::dims odims{x.dims[0], out};
    const dnnl::inner_product_forward::desc desc(
        dnnl::prop_kind::forward_inference, {x.dims, dt::f32, tag::any}, {wdims, dt::f32, tag::any},
        {{out}, dt::f32, tag::x}, {odims, dt::f32, tag::nc});
    const dnnl::inner_product_forward::primitive_desc pd(desc, attr, engine_);
    const memory src = to_layout(x.mem, pd.src_desc(), name);
    const memory wts = constant(w_.take(name + ".weight", {out, in}), wdims, plain, pd.weights_desc());
    const memory bias = constant(w_.take(name + ".bias", {out}), {out}, tag::x, pd.bias_desc());
    memory dst(pd.dst_desc(), engine_);
    add(dnnl::inner_product_forward(pd),
        {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wts}, {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST, dst}},
        name);
    return {dst, odims};
  }

  Act log_softmax(const Act& x) {
    const dnnl::logsoftmax_forward::desc desc(dnnl::prop_kind::forward_inference, x.mem.get_desc(), 1);
    const dnnl::logsoftmax_forward::primitive_desc pd(desc, engine_);
    memory dst(pd.dst_desc(), engine_);
    add(dnnl::logsoftmax_forward(pd), {{DNNL_ARG_SRC, x.mem}, {DNNL_ARG_DST, dst}}, "log_softmax");
    return {dst, x.dims};
  }

  // The network's answer as a plain nc buffer.
  void output(const Act& y) {
    output_ = to_layout(y.mem, memory::desc(y.dims, dt::f32, tag::nc), "output");
    output_dims_ = y.dims;
  }

  void execute() {
    for (auto& s : steps_) s.prim.execute(stream_, s.args);
    stream_.wait();
  }

  // One call with every primitive timed on its own: waiting after each one makes its time
  // its own (a no-op on CPU, where execute returns when the work is done). Adds to `ns`.
  void execute_timed(std::vector<int64_t>& ns) {
    for (size_t i = 0; i < steps_.size(); ++i) {
      const auto t0 = Clock::now();
      steps_[i].prim.execute(stream_, steps_[i].args);
      stream_.wait();
      ns[i] += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
    }
  }

  // The profiled pass's file: each primitive's name (the layer it belongs to), kind,
  // implementation (e.g. jit:avx512_core) and total time over the profiled iterations.
  std::string timeline_json(const std::vector<int64_t>& ns, int64_t iters, int64_t iteration_ns) const {
    std::ostringstream out;
    out << "{\"method\":\"per-primitive steady_clock timers (stackcost_onednn)\",\"iters\":" << iters
        << ",\"iteration_ns\":" << iteration_ns << ",\"steps\":[";
    for (size_t i = 0; i < steps_.size(); ++i) {
      const auto& s = steps_[i];
      const char* impl = nullptr;
      dnnl_primitive_desc_query(s.prim.get_primitive_desc(), dnnl_query_impl_info_str, 0, &impl);
      out << (i ? "," : "") << "{\"name\":" << json_string(s.name) << ",\"kind\":"
          << json_string(dnnl_prim_kind2str(static_cast<dnnl_primitive_kind_t>(s.prim.get_kind())))
          << ",\"impl\":" << json_string(impl ? impl : "") << ",\"ns\":" << ns[i] << "}";
    }
    out << "]}";
    return out.str();
  }

  HostTensor result() const {
    HostTensor t;
    t.dims.assign(output_dims_.begin(), output_dims_.end());
    const auto* p = static_cast<const float*>(output_.get_data_handle());
    t.data.assign(p, p + output_.get_desc().get_size() / sizeof(float));
    return t;
  }

  size_t primitives() const { return steps_.size(); }
  size_t reorders() const { return reorders_; }
  const std::string& first_conv_src() const { return first_conv_src_; }
  const std::string& first_conv_weights() const { return first_conv_weights_; }

 private:
  struct Step {
    dnnl::primitive prim;
    std::unordered_map<int, memory> args;
    std::string name;  // the layer it belongs to, for the profiled pass
  };

  void add(dnnl::primitive p, std::unordered_map<int, memory> args, std::string name) {
    steps_.push_back({std::move(p), std::move(args), std::move(name)});
  }

  // `m` in layout `md`: itself when it already is, else a reorder added to every call.
  memory to_layout(const memory& m, const memory::desc& md, const std::string& consumer) {
    if (m.get_desc() == md) return m;
    memory out(md, engine_);
    add(dnnl::reorder(m, out), {{DNNL_ARG_FROM, m}, {DNNL_ARG_TO, out}}, consumer + " input");
    ++reorders_;
    return out;
  }

  // A weight in the layout the primitive chose, reordered once, now.
  memory constant(HostTensor t, const memory::dims& dims, tag plain, const memory::desc& md) {
    memory user({dims, dt::f32, plain}, engine_, t.data.data());
    if (user.get_desc() == md) {
      memory own(md, engine_);
      std::memcpy(own.get_data_handle(), t.data.data(), md.get_size());
      return own;
    }
    memory out(md, engine_);
    dnnl::reorder(user, out).execute(stream_, user, out);
    stream_.wait();
    return out;
  }

  dnnl::engine engine_;
  dnnl::stream stream_;
  Weights& w_;
  std::vector<Step> steps_;
  memory input_, output_;
  memory::dims output_dims_;
  size_t reorders_ = 0;
  std::string first_conv_src_, first_conv_weights_;
};

void build_resnet(Net& net, Act x, const Family& family, int64_t classes) {
  x = net.conv("conv1", x, kResNetStem, 7, 2, 3, true);
  x = net.pool("maxpool", x, dnnl::algorithm::pooling_max, 3, 2, 1);
  for (const ResBlock& b : resnet_blocks(family)) {
    const std::string& p = b.prefix;
    // The projection first, so the block's last conv can add into its buffer.
    const Act identity = b.project ? net.conv(p + "downsample.0", x, b.cout, 1, b.stride, 0, false) : x;
    if (family.bottleneck()) {
      x = net.conv(p + "conv1", x, b.width, 1, 1, 0, true);
      x = net.conv(p + "conv2", x, b.width, 3, b.stride, 1, true);
      x = net.conv(p + "conv3", x, b.cout, 1, 1, 0, true, identity);
    } else {
      x = net.conv(p + "conv1", x, b.width, 3, b.stride, 1, true);
      x = net.conv(p + "conv2", x, b.cout, 3, 1, 1, true, identity);
    }
  }
  x = net.pool("avgpool", x, dnnl::algorithm::pooling_avg_exclude_padding, x.dims[2], 1, 0);
  net.output(net.linear("fc", x, classes, false));
}

// conv -> max pool 2 -> relu is computed as conv+relu -> max pool 2: max and relu commute.
void build_mnist(Net& net, Act x, int64_t classes) {
  x = net.conv("conv1", x, 10, 5, 1, 0, true);
  x = net.pool("pool1", x, dnnl::algorithm::pooling_max, 2, 2, 0);
  x = net.conv("conv2", x, 20, 5, 1, 0, true);
  x = net.pool("pool2", x, dnnl::algorithm::pooling_max, 2, 2, 0);
  x = net.linear("fc1", x, 50, true);
  net.output(net.log_softmax(net.linear("fc2", x, classes, false)));
}

// After the timed loop: one untimed call, then `prof.iters` calls with every primitive timed.
// Writes the timeline file; returns the answer's "profile_iters" and "profile_wall_ns".
std::string profiled_pass(Net& net, const ProfileRequest& prof) {
  std::vector<int64_t> ns(net.primitives(), 0);
  net.execute_timed(ns);  // the timers' own first call is not steady state
  std::fill(ns.begin(), ns.end(), 0);
  int64_t iteration_ns = 0;
  const auto start = Clock::now();
  for (int64_t i = 0; i < prof.iters; ++i) {
    const auto t0 = Clock::now();
    net.execute_timed(ns);
    iteration_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
  }
  const auto wall_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
  std::ofstream out(prof.out);
  out << net.timeline_json(ns, prof.iters, iteration_ns) << "\n";
  if (!out) throw std::runtime_error("cannot write " + prof.out);
  return "\"profile_iters\":" + std::to_string(prof.iters) + ",\"profile_wall_ns\":" + std::to_string(wall_ns);
}

int run(const Args& args) {
  const Protocol p = parse_protocol(args);
  const ProfileRequest prof = parse_profile(args);
  const int threads = static_cast<int>(std::stoll(arg(args, "threads")));
  const int omp_threads = set_threads(threads);
  const auto* version = dnnl::version();
  const int64_t baseline_rss = vm_bytes("VmRSS:");

  const Family family = parse_family(args, "onednn");
  const std::string& arch = family.arch;
  const auto folded_bn = std::stoll(arg(args, "folded_bn"));  // BatchNorms Python folded
  const auto classes = std::stoll(arg(args, "num_classes"));
  auto input = read_tensors(arg(args, "input"));
  if (input.size() != 1) throw std::runtime_error("input file must hold exactly one tensor");
  HostTensor& x = input[0].second;
  if (x.dims.size() != 4) throw std::runtime_error("input must be NCHW, got " + dims_str(x.dims));

  Weights weights(read_tensors(arg(args, "weights")));
  Net net(weights);
  const Act in = net.input({x.dims[0], x.dims[1], x.dims[2], x.dims[3]}, x.data.data());
  if (family.resnet()) {
    build_resnet(net, in, family, classes);
  } else {
    build_mnist(net, in, classes);
  }
  weights.check_all_used();
  const Step step = [&net] { net.execute(); };

  const int64_t cold_ns = time_once(step);
  const HostTensor output = net.result();
  const Measured m = measure_after_cold(step, p, cold_ns);

  write_host_tensors(arg(args, "output"), {{"output", output}});

  std::ostringstream details;
  if (prof.iters > 0) details << profiled_pass(net, prof) << ",";
  details << "\"arch\":" << json_string(arch) << ",\"onednn\":\"" << version->major << "."
          << version->minor << "." << version->patch
          << "\",\"onednn_cpu_runtime\":" << json_string(runtime_name(version->cpu_runtime))
          << ",\"omp_threads\":" << omp_threads
          << ",\"bn_folded\":" << (folded_bn > 0 ? "true" : "false")
          << ",\"bn_folded_count\":" << folded_bn << ",\"primitives\":" << net.primitives()
          << ",\"per_call_reorders\":" << net.reorders()
          << ",\"first_conv_src_format\":" << json_string(net.first_conv_src())
          << ",\"first_conv_weights_format\":" << json_string(net.first_conv_weights())
          << ",\"conv_algorithm\":\"convolution_direct\"";
  std::cout << answer_json(m, baseline_rss, details.str()) << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return stackcost::dispatch(argc, argv, "stackcost_onednn", run, stackcost::onednn::train);
  } catch (const dnnl::error& e) {
    std::cerr << "error: oneDNN: " << e.what() << " (status " << e.status << ")\n";
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
  }
  return 1;
}
