// What both commands of stackcost_onednn share: SCW1 tensors as plain float vectors, the
// take-every-tensor-once-by-name rule, and names for oneDNN's layouts and runtimes.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include "common/scw1.hpp"
#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace stackcost::onednn {

// Pin OpenMP (Debian's oneDNN runtime) to `threads` on top of the parent's OMP_NUM_THREADS;
// returns the count OpenMP then reports, -1 without OpenMP.
inline int set_threads(int threads) {
#ifdef _OPENMP
  omp_set_num_threads(threads);
  return omp_get_max_threads();
#else
  (void)threads;
  return -1;
#endif
}

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

// ---- SCW1 tensor files (see native/README.md) -------------------------------------------

struct Tensor {
  std::vector<int64_t> dims;
  std::vector<float> data;
};
using Named = std::vector<std::pair<std::string, Tensor>>;

inline Named read_tensors(const std::string& path) {
  return read_scw1<Tensor>(path, [&](const std::string& name, const std::vector<int64_t>& dims,
                                     ScwType dtype) {
    if (dtype != ScwType::f32) {
      throw std::runtime_error(path + ": " + name + " is " + scw_name(dtype) +
                               "; stackcost_onednn reads float32 only");
    }
    Tensor t;
    t.dims = dims;
    size_t numel = 1;
    for (const int64_t d : dims) numel *= static_cast<size_t>(d);
    t.data.resize(numel);
    float* dst = t.data.data();  // a moved vector keeps its buffer
    return std::pair{std::move(t), dst};
  });
}

inline void write_tensors(const std::string& path, const Named& tensors) {
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
  explicit Weights(Named tensors, std::string label = "weights file") : label_(std::move(label)) {
    for (auto& [name, t] : tensors) by_name_.emplace(name, std::move(t));
  }
  Tensor take(const std::string& name, const std::vector<int64_t>& dims) {
    const auto it = by_name_.find(name);
    if (it == by_name_.end()) throw std::runtime_error(label_ + " has no tensor " + name);
    Tensor t = std::move(it->second);
    by_name_.erase(it);
    if (t.dims != dims) {
      throw std::runtime_error("shape mismatch for " + name + ": file " + dims_str(t.dims) +
                               ", model " + dims_str(dims));
    }
    return t;
  }
  Tensor take_any(const std::string& name) {  // any shape: the caller checks it
    const auto it = by_name_.find(name);
    if (it == by_name_.end()) throw std::runtime_error(label_ + " has no tensor " + name);
    Tensor t = std::move(it->second);
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
  std::map<std::string, Tensor> by_name_;
};

// ---- names, for the details -------------------------------------------------------------

// oneDNN's own spelling of a blocked layout ("aBcd16b" = nChw16c), or a familiar tag name.
inline std::string format_name(const memory::desc& md) {
  const auto& d = md.data;
  const memory::dims dims(d.dims, d.dims + d.ndims);
  static const std::vector<std::pair<tag, const char*>> known = {
      {tag::nchw, "nchw"},       {tag::nhwc, "nhwc"},         {tag::nChw8c, "nChw8c"},
      {tag::nChw16c, "nChw16c"}, {tag::oihw, "oihw"},         {tag::hwio, "hwio"},
      {tag::ohwi, "ohwi"},       {tag::Ohwi8o, "Ohwi8o"},     {tag::Ohwi16o, "Ohwi16o"},
      {tag::OIhw8i8o, "OIhw8i8o"}, {tag::OIhw16i16o, "OIhw16i16o"}, {tag::Oihw16o, "Oihw16o"},
      {tag::nc, "nc"}};
  for (const auto& [t, name] : known) {
    try {
      if (md == memory::desc(dims, dt::f32, t)) return name;
    } catch (const dnnl::error&) {  // tag of another rank
    }
  }
  if (d.format_kind != dnnl_blocked) return "format_kind " + std::to_string(d.format_kind);
  const auto& b = d.format_desc.blocking;
  std::vector<int> order(d.ndims);
  for (int i = 0; i < d.ndims; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int c) { return b.strides[a] > b.strides[c]; });
  std::string s;
  for (const int i : order) {
    bool blocked = false;
    for (int k = 0; k < b.inner_nblks; ++k) blocked = blocked || b.inner_idxs[k] == i;
    s += static_cast<char>((blocked ? 'A' : 'a') + i);
  }
  for (int k = 0; k < b.inner_nblks; ++k) {
    s += std::to_string(b.inner_blks[k]) + static_cast<char>('a' + b.inner_idxs[k]);
  }
  return s;
}

inline std::string runtime_name(unsigned runtime) {
  switch (runtime) {
    case DNNL_RUNTIME_SEQ: return "sequential";
    case DNNL_RUNTIME_OMP: return "openmp";
    case DNNL_RUNTIME_TBB: return "tbb";
    case DNNL_RUNTIME_THREADPOOL: return "threadpool";
    default: return std::to_string(runtime);
  }
}

inline std::string version_string() {
  const auto* v = dnnl::version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

}  // namespace stackcost::onednn
