// What both commands of stackcost_onednn share: its SCW1 reader (the host tensors of
// common/host_tensors.hpp), the OpenMP thread count, and names for oneDNN's layouts and
// runtimes.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include "common/host_tensors.hpp"
#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <cstdint>
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

// ---- SCW1 tensor files (common/host_tensors.hpp) ---------------------------------------

inline HostTensors read_tensors(const std::string& path) {
  return read_host_tensors(path, "stackcost_onednn");
}

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
