// SCW1 tensors as plain float vectors on the host, and the take-every-tensor-once-by-name
// rule: what a program that is not torch reads (weights, input, training and test data)
// before it moves anything into its library's own layouts or onto a device. stackcost_onednn
// and stackcost_cudnn read these; each names itself in the float32-only error.
#pragma once

#include "common/scw1.hpp"

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace stackcost {

struct HostTensor {
  std::vector<int64_t> dims;
  std::vector<float> data;
};
using HostTensors = std::vector<std::pair<std::string, HostTensor>>;

// `program` names the reader in the error for a tensor of another dtype.
inline HostTensors read_host_tensors(const std::string& path, const std::string& program) {
  return read_scw1<HostTensor>(path, [&](const std::string& name, const std::vector<int64_t>& dims,
                                         ScwType dtype) {
    if (dtype != ScwType::f32) {
      throw std::runtime_error(path + ": " + name + " is " + scw_name(dtype) + "; " + program +
                               " reads float32 only");
    }
    HostTensor t;
    t.dims = dims;
    size_t numel = 1;
    for (const int64_t d : dims) numel *= static_cast<size_t>(d);
    t.data.resize(numel);
    float* dst = t.data.data();  // a moved vector keeps its buffer
    return std::pair{std::move(t), dst};
  });
}

inline void write_host_tensors(const std::string& path, const HostTensors& tensors) {
  std::vector<ScwView> views;
  for (const auto& [name, t] : tensors) views.push_back({name, t.dims, t.data.data(), t.data.size()});
  write_scw1(path, views);
}

inline std::string dims_str(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

// Tensors by name; every one must be taken exactly once with the expected shape.
class Weights {
 public:
  explicit Weights(HostTensors tensors, std::string label = "weights file") : label_(std::move(label)) {
    for (auto& [name, t] : tensors) by_name_.emplace(name, std::move(t));
  }
  HostTensor take(const std::string& name, const std::vector<int64_t>& dims) {
    HostTensor t = take_any(name);
    if (t.dims != dims) {
      throw std::runtime_error("shape mismatch for " + name + ": file " + dims_str(t.dims) +
                               ", model " + dims_str(dims));
    }
    return t;
  }
  HostTensor take_any(const std::string& name) {  // any shape: the caller checks it
    const auto it = by_name_.find(name);
    if (it == by_name_.end()) throw std::runtime_error(label_ + " has no tensor " + name);
    HostTensor t = std::move(it->second);
    by_name_.erase(it);
    return t;
  }
  void check_all_used() const {
    if (!by_name_.empty()) {
      throw std::runtime_error(label_ + " has a tensor the model lacks: " + by_name_.begin()->first);
    }
  }

 private:
  std::string label_;
  std::map<std::string, HostTensor> by_name_;
};

}  // namespace stackcost
