// stackcost's LibTorch rungs: one program, two ways to run the same network.
//
//   stackcost_libtorch echo IN.scw OUT.scw         read a tensor file, write it back
//   stackcost_libtorch run key=value ...            measure one repetition
//
// run keys: kind=jit|nn, module=PATH.pt (jit), arch=resnet18|resnet34|resnet50|mnist-cnn,
// weights=PATH.scw, num_classes, in_channels, conv_bias, resolution (nn), input=PATH.scw,
// output=PATH.scw, threads, and the protocol: min_time_s, min_iters, max_time_s, max_iters,
// target_ci, z (normal quantile of the confidence), warmup_tolerance, warmup_max_time_s,
// check_interval_s. Answers with one JSON line on stdout; errors go to stderr, exit 1.
#include <torch/script.h>
#include <torch/torch.h>

#include "common/protocol.hpp"
#include "common/scw1.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace stackcost;  // the shared protocol (common/protocol.hpp)
using Forward = std::function<torch::Tensor()>;
using Named = std::vector<std::pair<std::string, torch::Tensor>>;

// ---- SCW1 tensor files (see native/README.md) -------------------------------------------

Named read_tensors(const std::string& path) {
  return read_scw1<torch::Tensor>(path, [](const std::string&, const std::vector<int64_t>& dims) {
    auto t = torch::empty(dims, torch::kFloat32);
    return std::pair{t, t.data_ptr<float>()};
  });
}

void write_tensors(const std::string& path, const Named& tensors) {
  std::vector<torch::Tensor> keep;  // contiguous float32 copies alive while writing
  std::vector<ScwView> views;
  for (const auto& [name, tensor] : tensors) {
    keep.push_back(tensor.detach().to(torch::kCPU, torch::kFloat32).contiguous());
    const auto& t = keep.back();
    views.push_back({name, t.sizes().vec(), t.data_ptr<float>(), static_cast<size_t>(t.numel())});
  }
  write_scw1(path, views);
}

// ---- the architectures, named so state_dict keys map 1:1 to the Python zoo ----------------

torch::nn::Conv2d conv(int64_t cin, int64_t cout, int64_t k, int64_t stride, bool bias) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(cin, cout, k).stride(stride).padding(k / 2).bias(bias));
}

// BasicBlock (two 3x3) or Bottleneck v1.5 (1x1, strided 3x3, 1x1), with a projection
// shortcut only where the shape changes, as in stackcost.zoo.resnet.
struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t cin, int64_t width, int64_t stride, bool bias, bool bottleneck)
      : bottleneck(bottleneck) {
    const int64_t cout = width * (bottleneck ? 4 : 1);
    if (bottleneck) {
      conv1 = register_module("conv1", conv(cin, width, 1, 1, bias));
      bn1 = register_module("bn1", torch::nn::BatchNorm2d(width));
      conv2 = register_module("conv2", conv(width, width, 3, stride, bias));
      bn2 = register_module("bn2", torch::nn::BatchNorm2d(width));
      conv3 = register_module("conv3", conv(width, cout, 1, 1, bias));
      bn3 = register_module("bn3", torch::nn::BatchNorm2d(cout));
    } else {
      conv1 = register_module("conv1", conv(cin, width, 3, stride, bias));
      bn1 = register_module("bn1", torch::nn::BatchNorm2d(width));
      conv2 = register_module("conv2", conv(width, cout, 3, 1, bias));
      bn2 = register_module("bn2", torch::nn::BatchNorm2d(cout));
    }
    if (stride != 1 || cin != cout) {
      downsample = register_module(
          "downsample", torch::nn::Sequential(conv(cin, cout, 1, stride, bias),
                                              torch::nn::BatchNorm2d(cout)));
    }
  }

  torch::Tensor forward(const torch::Tensor& x) {
    const auto identity = downsample ? downsample->forward(x) : x;
    auto out = bn1(conv1(x)).relu_();
    if (bottleneck) {
      out = bn2(conv2(out)).relu_();
      out = bn3(conv3(out));
    } else {
      out = bn2(conv2(out));
    }
    return (out + identity).relu_();
  }

  bool bottleneck;
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr};
  torch::nn::Sequential downsample{nullptr};
};
TORCH_MODULE(Block);

struct ResNetImpl : torch::nn::Module {
  ResNetImpl(std::vector<int64_t> depths, bool bottleneck, int64_t num_classes,
             int64_t in_channels, bool bias) {
    conv1 = register_module(
        "conv1", torch::nn::Conv2d(
                     torch::nn::Conv2dOptions(in_channels, 64, 7).stride(2).padding(3).bias(bias)));
    bn1 = register_module("bn1", torch::nn::BatchNorm2d(64));
    int64_t cin = 64;
    for (size_t i = 0; i < depths.size(); ++i) {
      const int64_t width = 64LL << i;
      torch::nn::Sequential stage;
      for (int64_t j = 0; j < depths[i]; ++j) {
        const int64_t stride = (i > 0 && j == 0) ? 2 : 1;
        stage->push_back(Block(cin, width, stride, bias, bottleneck));
        cin = width * (bottleneck ? 4 : 1);
      }
      layers.push_back(register_module("layer" + std::to_string(i + 1), stage));
    }
    fc = register_module("fc", torch::nn::Linear(cin, num_classes));
  }

  torch::Tensor forward(const torch::Tensor& input) {
    auto x = torch::max_pool2d(bn1(conv1(input)).relu_(), 3, 2, 1);
    for (auto& stage : layers) x = stage->forward(x);
    x = torch::adaptive_avg_pool2d(x, {1, 1});
    return fc(torch::flatten(x, 1));
  }

  torch::nn::Conv2d conv1{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr};
  std::vector<torch::nn::Sequential> layers;
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(ResNet);

// Koehler's MNIST CNN (dropouts are identities in eval mode and hold no tensors).
struct MnistCNNImpl : torch::nn::Module {
  MnistCNNImpl(int64_t num_classes, int64_t in_channels, bool bias, int64_t resolution) {
    const int64_t side = ((resolution - 4) / 2 - 4) / 2;
    conv1 = register_module(
        "conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_channels, 10, 5).bias(bias)));
    conv2 = register_module("conv2",
                            torch::nn::Conv2d(torch::nn::Conv2dOptions(10, 20, 5).bias(bias)));
    fc1 = register_module("fc1", torch::nn::Linear(side * side * 20, 50));
    fc2 = register_module("fc2", torch::nn::Linear(50, num_classes));
  }

  torch::Tensor forward(const torch::Tensor& input) {
    auto x = torch::relu(torch::max_pool2d(conv1(input), 2));
    x = torch::relu(torch::max_pool2d(conv2(x), 2));
    x = torch::relu(fc1(torch::flatten(x, 1)));
    return torch::log_softmax(fc2(x), 1);
  }

  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(MnistCNN);

// Copy every parameter and buffer from the file by its state_dict name; any missing,
// extra or mis-shaped tensor is an error naming it (a mismatched file must not run).
void load_state(torch::nn::Module& module, const Named& tensors) {
  std::map<std::string, torch::Tensor> by_name(tensors.begin(), tensors.end());
  torch::NoGradGuard no_grad;
  auto assign = [&](const std::string& name, torch::Tensor& dst) {
    const auto it = by_name.find(name);
    if (it == by_name.end()) throw std::runtime_error("weights file has no tensor " + name);
    if (it->second.sizes() != dst.sizes()) {
      std::ostringstream msg;
      msg << "shape mismatch for " << name << ": file " << it->second.sizes() << ", model "
          << dst.sizes();
      throw std::runtime_error(msg.str());
    }
    dst.copy_(it->second);  // also casts num_batches_tracked back to int64
    by_name.erase(it);
  };
  for (auto& item : module.named_parameters(true)) assign(item.key(), item.value());
  for (auto& item : module.named_buffers(true)) assign(item.key(), item.value());
  if (!by_name.empty()) {
    throw std::runtime_error("weights file has a tensor the model lacks: " + by_name.begin()->first);
  }
}

int run(const Args& args) {
  const Protocol p = parse_protocol(args);
  at::set_num_threads(static_cast<int>(std::stoll(arg(args, "threads"))));
  const int64_t baseline_rss = vm_bytes("VmRSS:");

  const auto kind = arg(args, "kind");
  const auto input = read_tensors(arg(args, "input"));
  if (input.size() != 1) throw std::runtime_error("input file must hold exactly one tensor");
  const torch::Tensor x = input[0].second;

  torch::jit::Module scripted;
  std::shared_ptr<torch::nn::Module> net;
  Forward step;
  std::string arch;
  if (kind == "jit") {
    scripted = torch::jit::load(arg(args, "module"));
    scripted.eval();
    step = [&] { return scripted.forward({x}).toTensor(); };
  } else if (kind == "nn") {
    arch = arg(args, "arch");
    const auto classes = std::stoll(arg(args, "num_classes"));
    const auto channels = std::stoll(arg(args, "in_channels"));
    const bool bias = arg(args, "conv_bias") == "1";
    if (arch == "resnet18" || arch == "resnet34" || arch == "resnet50") {
      const std::vector<int64_t> depths =
          arch == "resnet18" ? std::vector<int64_t>{2, 2, 2, 2} : std::vector<int64_t>{3, 4, 6, 3};
      auto m = ResNet(depths, arch == "resnet50", classes, channels, bias);
      net = m.ptr();
      step = [m, &x]() mutable { return m->forward(x); };
    } else if (arch == "mnist-cnn") {
      auto m = MnistCNN(classes, channels, bias, std::stoll(arg(args, "resolution")));
      net = m.ptr();
      step = [m, &x]() mutable { return m->forward(x); };
    } else {
      throw std::runtime_error("libtorch has no C++ definition of " + arch);
    }
    load_state(*net, read_tensors(arg(args, "weights")));
    net->eval();
  } else {
    throw std::runtime_error("kind must be jit or nn, not " + kind);
  }

  // No autograd bookkeeping anywhere below, as the Python backends' inference_mode.
  c10::InferenceMode guard;
  torch::Tensor output;
  const int64_t cold_ns = time_once([&] { output = step(); });
  const Measured m = measure_after_cold([&] { step(); }, p, cold_ns);

  write_tensors(arg(args, "output"), {{"output", output}});

  std::ostringstream details;
  details << "\"kind\":" << json_string(kind) << ",\"arch\":" << json_string(arch)
          << ",\"libtorch\":" << json_string(TORCH_VERSION)
          << ",\"torch_threads\":" << at::get_num_threads()
          << ",\"torch_interop_threads\":" << at::get_num_interop_threads()
          << ",\"grad_mode\":\"inference_mode\"";
  std::cout << answer_json(m, baseline_rss, details.str()) << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::vector<std::string> argv_(argv + 1, argv + argc);
    if (argv_.size() == 3 && argv_[0] == "echo") {
      write_tensors(argv_[2], read_tensors(argv_[1]));
      return 0;
    }
    if (!argv_.empty() && argv_[0] == "run") {
      return run(parse_args(argv_));
    }
    std::cerr << "usage: stackcost_libtorch echo IN OUT | run key=value ...\n";
    return 2;
  } catch (const c10::Error& e) {
    std::cerr << "error: " << e.what_without_backtrace() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
  }
  return 1;
}
