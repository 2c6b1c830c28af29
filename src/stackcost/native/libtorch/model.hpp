// What both commands of stackcost_libtorch share: SCW1 files as torch tensors, the zoo's
// families re-defined with torch::nn (module names equal to the Python zoo's, so
// state_dict keys map 1:1), loading and saving a state by name, and the device key.
#pragma once

#include <torch/torch.h>

#include "common/protocol.hpp"
#include "common/scw1.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace stackcost::lt {

using Named = std::vector<std::pair<std::string, torch::Tensor>>;

// ---- SCW1 tensor files (see native/README.md) -------------------------------------------

inline torch::ScalarType torch_type(ScwType t) {
  switch (t) {
    case ScwType::f32: return torch::kFloat32;
    case ScwType::i64: return torch::kInt64;
    case ScwType::i32: return torch::kInt32;
    case ScwType::f64: return torch::kFloat64;
    case ScwType::u8: return torch::kUInt8;
    case ScwType::b8: return torch::kBool;
  }
  throw std::runtime_error("unknown SCW1 dtype");
}

// The file dtype a torch tensor keeps; float32 for anything else (half, bfloat16, ...).
inline ScwType scw_type(torch::ScalarType t) {
  switch (t) {
    case torch::kInt64: return ScwType::i64;
    case torch::kInt32: return ScwType::i32;
    case torch::kFloat64: return ScwType::f64;
    case torch::kUInt8: return ScwType::u8;
    case torch::kBool: return ScwType::b8;
    default: return ScwType::f32;
  }
}

// Every tensor in the dtype the file holds.
inline Named read_tensors(const std::string& path) {
  return read_scw1<torch::Tensor>(
      path, [](const std::string&, const std::vector<int64_t>& dims, ScwType dtype) {
        auto t = torch::empty(dims, torch_type(dtype));
        return std::pair{t, t.data_ptr()};
      });
}

// Weights and training data are written as float32 (the format's default); inputs and
// outputs keep their dtype (`keep_dtype`), so int64 ids and bool masks round-trip.
inline void write_tensors(const std::string& path, const Named& tensors, bool keep_dtype = false) {
  std::vector<torch::Tensor> keep;  // contiguous CPU copies alive while writing
  std::vector<ScwView> views;
  for (const auto& [name, tensor] : tensors) {
    const ScwType dtype = keep_dtype ? scw_type(tensor.scalar_type()) : ScwType::f32;
    keep.push_back(tensor.detach().to(torch::kCPU, torch_type(dtype)).contiguous());
    const auto& t = keep.back();
    views.push_back({name, t.sizes().vec(), t.data_ptr(), static_cast<size_t>(t.numel()), dtype});
  }
  write_scw1(path, views);
}

// ---- keys ---------------------------------------------------------------------------

// An optional key: the default where the parent did not pass it.
inline std::string arg_or(const Args& args, const std::string& key, const std::string& fallback) {
  const auto it = args.find(key);
  return it == args.end() ? fallback : it->second;
}

// Numbers parsed whole: std::stoll alone would take "8x" as 8 and say only "stoll" on "x".
template <typename T>
T number_arg(const Args& args, const std::string& key) {
  const auto text = arg(args, key);
  size_t used = 0;
  T value{};
  try {
    if constexpr (std::is_integral_v<T>) {
      value = std::stoll(text, &used);
    } else {
      value = std::stod(text, &used);
    }
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) {
    throw std::runtime_error(key + "=" + text + " is not " +
                             (std::is_integral_v<T> ? "an integer" : "a number"));
  }
  return value;
}

// `device=cpu|cuda` (default cpu). CUDA must be usable, not merely compiled in: a cell that
// asked for the GPU must fail rather than quietly measure the CPU.
inline torch::Device device_arg(const Args& args) {
  const auto name = arg_or(args, "device", "cpu");
  if (name == "cpu") return torch::kCPU;
  if (name != "cuda") throw std::runtime_error("device must be cpu or cuda, not " + name);
  if (!torch::cuda::is_available()) {
    throw std::runtime_error("CUDA requested but torch::cuda::is_available() is false");
  }
  return torch::kCUDA;
}

// Kernels run asynchronously on a GPU: wait for them before reading the clock.
inline void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

// ---- the architectures, named so state_dict keys map 1:1 to the Python zoo ----------------

inline torch::nn::Conv2d conv(int64_t cin, int64_t cout, int64_t k, int64_t stride, bool bias) {
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

// Koehler's MNIST CNN. The dropouts hold no tensors and are identities in eval mode; in
// training their masks come from this process's RNG, so `dropout=off` (p = 0) is how a
// run is made comparable step by step with an eager model whose dropouts are off too.
struct MnistCNNImpl : torch::nn::Module {
  MnistCNNImpl(int64_t num_classes, int64_t in_channels, bool bias, int64_t resolution,
               bool dropout) {
    const int64_t side = ((resolution - 4) / 2 - 4) / 2;
    const double p = dropout ? 0.5 : 0.0;
    conv1 = register_module(
        "conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_channels, 10, 5).bias(bias)));
    conv2 = register_module("conv2",
                            torch::nn::Conv2d(torch::nn::Conv2dOptions(10, 20, 5).bias(bias)));
    conv2_drop = register_module("conv2_drop", torch::nn::Dropout2d(p));
    fc1 = register_module("fc1", torch::nn::Linear(side * side * 20, 50));
    fc1_drop = register_module("fc1_drop", torch::nn::Dropout(p));
    fc2 = register_module("fc2", torch::nn::Linear(50, num_classes));
  }

  torch::Tensor forward(const torch::Tensor& input) {
    auto x = torch::relu(torch::max_pool2d(conv1(input), 2));
    x = torch::relu(torch::max_pool2d(conv2_drop(conv2(x)), 2));
    x = fc1_drop(torch::relu(fc1(torch::flatten(x, 1))));
    return torch::log_softmax(fc2(x), 1);
  }

  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Dropout2d conv2_drop{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::Dropout fc1_drop{nullptr};
};
TORCH_MODULE(MnistCNN);

// A network behind a type-erased forward, so the commands need not know which one it is.
struct Net {
  std::string arch;    // the zoo's name, a label
  std::string family;  // what was built
  std::shared_ptr<torch::nn::Module> module;
  std::function<torch::Tensor(const torch::Tensor&)> forward;
};

// The network the keys family (and its parameters: the zoo entry's), num_classes,
// in_channels, conv_bias (and resolution for mnist-cnn) describe, freshly initialized:
// load_state fills it.
inline Net make_net(const Args& args, bool dropout = true) {
  const Family family = parse_family(args, "libtorch");
  Net net{family.arch, family.name, nullptr, nullptr};
  const auto classes = number_arg<int64_t>(args, "num_classes");
  const auto channels = number_arg<int64_t>(args, "in_channels");
  const bool bias = arg(args, "conv_bias") == "1";
  if (family.resnet()) {
    auto m = ResNet(family.depths, family.bottleneck(), classes, channels, bias);
    net.module = m.ptr();
    net.forward = [m](const torch::Tensor& x) mutable { return m->forward(x); };
  } else {  // mnist-cnn: parse_family accepts no other
    auto m = MnistCNN(classes, channels, bias, number_arg<int64_t>(args, "resolution"), dropout);
    net.module = m.ptr();
    net.forward = [m](const torch::Tensor& x) mutable { return m->forward(x); };
  }
  return net;
}

// Read the weights file straight into the module's parameters and buffers, by state_dict
// name; any missing, extra or mis-shaped tensor is an error naming it (a mismatched file
// must not run). Reading in place keeps one copy of the weights in memory: the program's
// peak RSS is a measurement, and a file buffer plus a staging copy tripled it.
inline void load_state(torch::nn::Module& module, const std::string& path) {
  std::map<std::string, torch::Tensor> slots;
  for (auto& item : module.named_parameters(true)) slots.emplace(item.key(), item.value());
  for (auto& item : module.named_buffers(true)) slots.emplace(item.key(), item.value());
  std::vector<std::pair<torch::Tensor, torch::Tensor>> casts;  // (float32 as read, its slot)
  std::vector<std::string> extra;
  torch::NoGradGuard no_grad;
  read_scw1<torch::Tensor>(path, [&](const std::string& name, const std::vector<int64_t>& dims,
                                     ScwType dtype) {
    const auto type = torch_type(dtype);
    const auto it = slots.find(name);
    if (it == slots.end()) {
      extra.push_back(name);  // reported after the missing ones, which say more
      auto t = torch::empty(dims, type);
      return std::pair{t, t.data_ptr()};
    }
    torch::Tensor dst = it->second;
    if (dst.sizes() != c10::IntArrayRef(dims)) {
      std::ostringstream msg;
      msg << "shape mismatch for " << name << ": file " << c10::IntArrayRef(dims) << ", model "
          << dst.sizes();
      throw std::runtime_error(msg.str());
    }
    slots.erase(it);
    if (dst.scalar_type() == type && dst.is_contiguous() && dst.device().is_cpu()) {
      return std::pair{dst, dst.data_ptr()};
    }
    auto t = torch::empty(dims, type);  // e.g. num_batches_tracked, an int64 stored as float
    casts.emplace_back(t, dst);
    return std::pair{t, t.data_ptr()};
  });
  if (!slots.empty()) throw std::runtime_error("weights file has no tensor " + slots.begin()->first);
  if (!extra.empty()) throw std::runtime_error("weights file has a tensor the model lacks: " + extra[0]);
  for (auto& [src, dst] : casts) dst.copy_(src);
}

// Parameters and buffers under their state_dict names, in Python's state_dict order
// (each module's own parameters, then its buffers, modules in pre-order).
inline Named state_dict(const torch::nn::Module& module) {
  Named out;
  for (const auto& item : module.named_modules("", /*include_self=*/true)) {
    const auto prefix = item.key().empty() ? "" : item.key() + ".";
    for (const auto& p : item.value()->named_parameters(false)) {
      out.emplace_back(prefix + p.key(), p.value());
    }
    for (const auto& b : item.value()->named_buffers(false)) {
      out.emplace_back(prefix + b.key(), b.value());
    }
  }
  return out;
}

}  // namespace stackcost::lt
