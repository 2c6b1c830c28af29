// stackcost's LibTorch rungs: one program, two ways to run the same network, and a
// training loop.
//
//   stackcost_libtorch echo IN.scw OUT.scw         read a tensor file, write it back
//   stackcost_libtorch run key=value ...            measure one repetition
//   stackcost_libtorch train key=value ...          train (train.hpp, native/README.md)
//
// run keys: kind=jit|nn, module=PATH.pt and optimize=0|1 (jit), family=resnet|mnist-cnn and
// its parameters (block, depths: the zoo entry's), arch (a label), weights=PATH.scw,
// num_classes, in_channels, conv_bias, resolution (nn), input=PATH.scw (jit: every input of
// forward, in its order, any dtype; nn: one image), output=PATH.scw (every tensor of the
// output, flattened in order, as output0..N-1), threads, device=cpu|cuda (default cpu), and the protocol: min_time_s,
// min_iters, max_time_s, max_iters, target_ci, z (normal quantile of the confidence),
// warmup_tolerance, warmup_max_time_s, check_interval_s; optionally the profiled pass after
// the timed loop (--profile): profile_iters=N profile_out=PATH, which runs 2 warm-up and N
// profiled iterations under the Kineto profiler (CPU activities), each iteration inside a
// "stackcost.warmup" / "stackcost.step" user scope, writes the chrome trace to PATH and adds
// "profile_iters" and "profile_wall_ns" (steady_clock around the N iterations) to details.
//
// train keys: those of native/README.md "Training" (weights, train_data, test_data, arch,
// num_classes, in_channels, conv_bias, resolution, threads, batch, epochs, optimizer=sgd|adam,
// lr, momentum, schedule=constant|cosine, max_steps, divergence_factor, final_weights), plus
// device=cpu|cuda (default cpu) and dropout=on|off (default on; mnist-cnn only: `off` makes
// its dropouts identities in training too, so losses can be compared step by step with an
// eager model whose dropouts are off, the masks being drawn from different RNGs otherwise).
//
// Each command answers with one JSON line on stdout; errors go to stderr as one line
// "error: ...", exit 1.
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/script.h>
#include <torch/torch.h>

#include "common/protocol.hpp"
#include "model.hpp"
#include "train.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <iostream>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace stackcost;  // the shared protocol (common/protocol.hpp)
using namespace stackcost::lt;
using Forward = std::function<c10::IValue()>;

// Every tensor in an output, depth first in order (tuple, list, dict values in insertion
// order), as stackcost.verify.leaves flattens the eager model's output; numbers become 0-d
// tensors and None is skipped, as there.
void flatten(const c10::IValue& v, std::vector<torch::Tensor>& out) {
  if (v.isTensor()) {
    out.push_back(v.toTensor());
  } else if (v.isTuple()) {
    for (const auto& e : v.toTupleRef().elements()) flatten(e, out);
  } else if (v.isList()) {
    for (const auto& e : v.toListRef()) flatten(e, out);
  } else if (v.isGenericDict()) {
    for (const auto& item : v.toGenericDict()) flatten(item.value(), out);
  } else if (v.isDouble()) {
    out.push_back(torch::tensor(v.toDouble(), torch::kFloat64));
  } else if (v.isInt()) {
    out.push_back(torch::tensor(v.toInt(), torch::kInt64));
  } else if (v.isBool()) {
    out.push_back(torch::tensor(v.toBool(), torch::kBool));
  } else if (!v.isNone()) {
    throw std::runtime_error("output holds a " + v.tagKind() + ", not tensors");
  }
}

// The names stackcost.profile.torch_profile looks for (STEP_MARK, WARMUP_MARK).
constexpr const char* kStepMark = "stackcost.step";
constexpr const char* kWarmupMark = "stackcost.warmup";
constexpr int64_t kProfileWarmup = 2;

// The profiled pass: after the timed loop, so the profiler cannot change what it measured.
// The warm-up iterations run inside the profiler but outside the step marks, as in
// torch_profile.profile_step: the profiler's first iterations are slower than steady state.
// Returns the steady_clock time of the `prof.iters` marked iterations.
int64_t profile_pass(const Forward& step, const ProfileRequest& prof) {
  namespace tp = torch::autograd::profiler;
  const tp::ProfilerConfig config(tp::ProfilerState::KINETO);
  const std::set<tp::ActivityType> activities{tp::ActivityType::CPU};
  tp::prepareProfiler(config, activities);
  tp::enableProfiler(config, activities);
  for (int64_t i = 0; i < kProfileWarmup; ++i) {
    RECORD_USER_SCOPE(kWarmupMark);
    step();
  }
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < prof.iters; ++i) {
    RECORD_USER_SCOPE(kStepMark);
    step();
  }
  const auto t1 = Clock::now();
  tp::disableProfiler()->save(prof.out);
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
}

int run(const Args& args) {
  const Protocol p = parse_protocol(args);
  const ProfileRequest prof = parse_profile(args);
  at::set_num_threads(static_cast<int>(number_arg<int64_t>(args, "threads")));
  const int64_t baseline_rss = vm_bytes("VmRSS:");
  const torch::Device device = device_arg(args);

  const auto kind = arg(args, "kind");
  // The inputs in the file's order: forward's positional arguments.
  std::vector<c10::IValue> inputs;
  for (const auto& [name, tensor] : read_tensors(arg(args, "input"))) {
    inputs.emplace_back(tensor.to(device));
  }
  if (inputs.empty()) throw std::runtime_error("input file holds no tensor");

  const auto opt = args.find("optimize");
  const bool optimize_jit = opt != args.end() && opt->second == "1";
  torch::jit::Module scripted;
  Net net;
  Forward forward;
  if (kind == "jit") {
    scripted = torch::jit::load(arg(args, "module"), device);
    scripted.eval();
    // As torch.jit.optimize_for_inference in the Python rung (conv-BN folding, oneDNN
    // layouts); done here because an optimized module does not load back from a file.
    if (optimize_jit) scripted = torch::jit::optimize_for_inference(scripted);
    forward = [&] { return scripted.forward(inputs); };
  } else if (kind == "nn") {
    if (inputs.size() != 1) throw std::runtime_error("kind=nn takes one input tensor");
    net = make_net(args);
    load_state(*net.module, arg(args, "weights"));
    net.module->to(device);
    net.module->eval();
    forward = [&] { return c10::IValue(net.forward(inputs[0].toTensor())); };
  } else {
    throw std::runtime_error("kind must be jit or nn, not " + kind);
  }
  // A GPU call has ended only once its kernels have: the clock must not stop before.
  const Forward step = [&] {
    auto y = forward();
    synchronize(device);
    return y;
  };

  // No autograd bookkeeping anywhere below, as the Python backends' inference_mode.
  c10::InferenceMode guard;
  c10::IValue output;
  const int64_t cold_ns = time_once([&] { output = step(); });
  const Measured m = measure_after_cold([&] { step(); }, p, cold_ns);

  std::vector<torch::Tensor> leaves;
  flatten(output, leaves);
  Named outputs;
  for (size_t i = 0; i < leaves.size(); ++i) outputs.emplace_back("output" + std::to_string(i), leaves[i]);
  write_tensors(arg(args, "output"), outputs, /*keep_dtype=*/true);
  output = c10::IValue();
  // Under the same InferenceMode guard as the timed loop; `step` synchronizes the device.
  const int64_t profile_wall_ns = prof.iters > 0 ? profile_pass(step, prof) : 0;

  std::ostringstream details;
  details << "\"kind\":" << json_string(kind) << ",\"arch\":" << json_string(net.arch)
          << ",\"forward_inputs\":" << inputs.size() << ",\"output_tensors\":" << leaves.size()
          << ",\"libtorch\":" << json_string(TORCH_VERSION)
          << ",\"torch_threads\":" << at::get_num_threads()
          << ",\"torch_interop_threads\":" << at::get_num_interop_threads()
          << ",\"grad_mode\":\"inference_mode\""
          << ",\"device\":" << json_string(device.str());
  if (kind == "jit") details << ",\"optimize_for_inference\":" << (optimize_jit ? "true" : "false");
  if (prof.iters > 0) {
    details << ",\"profile_iters\":" << prof.iters << ",\"profile_wall_ns\":" << profile_wall_ns;
  }
  std::cout << answer_json(m, baseline_rss, details.str()) << std::endl;
  return 0;
}

// Error messages as one line: the parent reports the last stderr line as the reason.
std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::vector<std::string> argv_(argv + 1, argv + argc);
    if (argv_.size() == 3 && argv_[0] == "echo") {
      write_tensors(argv_[2], read_tensors(argv_[1]), /*keep_dtype=*/true);
      return 0;
    }
    if (!argv_.empty() && argv_[0] == "run") return run(parse_args(argv_));
    if (!argv_.empty() && argv_[0] == "train") return stackcost::lt::train(parse_args(argv_));
    std::cerr << "usage: stackcost_libtorch echo IN OUT | run key=value ... | train key=value ...\n";
    return 2;
  } catch (const c10::Error& e) {
    std::cerr << "error: " << one_line(e.what_without_backtrace()) << "\n";
  } catch (const std::exception& e) {
    std::cerr << "error: " << one_line(e.what()) << "\n";
  }
  return 1;
}
