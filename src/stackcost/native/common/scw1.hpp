// SCW1 tensor files (native/README.md): "SCW1", uint32 count, then per tensor uint32 name
// length, name, uint32 ndim, int64 dims, float32 data; little-endian. Shared by every
// native program; each supplies how to allocate its own tensor type.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace stackcost {

constexpr char kScw1Magic[4] = {'S', 'C', 'W', '1'};

// Reads straight from the file into each tensor's memory: holding the whole file first
// would double the weights in the program's peak RSS, which is one of its measurements.
class ScwReader {
 public:
  explicit ScwReader(const std::string& path) : path_(path), in_(path, std::ios::binary) {
    if (!in_) throw std::runtime_error("cannot open " + path);
    in_.seekg(0, std::ios::end);
    size_ = static_cast<size_t>(in_.tellg());
    in_.seekg(0, std::ios::beg);
  }
  void bytes(void* dst, size_t n) {
    if (n > left()) throw std::runtime_error(path_ + ": truncated at byte " + std::to_string(pos_));
    if (!in_.read(static_cast<char*>(dst), static_cast<std::streamsize>(n))) {
      throw std::runtime_error(path_ + ": read failed at byte " + std::to_string(pos_));
    }
    pos_ += n;
  }
  template <typename T>
  T scalar() {
    T v;
    bytes(&v, sizeof v);
    return v;
  }
  size_t left() const { return size_ - pos_; }

 private:
  std::string path_;
  std::ifstream in_;
  size_t size_ = 0, pos_ = 0;
};

// `alloc(name, dims)` returns {tensor, float* to its numel floats}; the data is copied there.
template <typename T, typename Alloc>
std::vector<std::pair<std::string, T>> read_scw1(const std::string& path, Alloc alloc) {
  static_assert(sizeof(float) == 4, "float32 expected");
  ScwReader r(path);
  char magic[4];
  r.bytes(magic, 4);
  if (std::memcmp(magic, kScw1Magic, 4) != 0) {
    throw std::runtime_error(path + ": not an SCW1 file");
  }
  const auto count = r.scalar<uint32_t>();
  std::vector<std::pair<std::string, T>> out;
  for (uint32_t i = 0; i < count; ++i) {
    const auto name_len = r.scalar<uint32_t>();
    if (name_len > r.left()) throw std::runtime_error(path + ": truncated name");
    std::string name(name_len, '\0');
    r.bytes(name.data(), name_len);
    const auto ndim = r.scalar<uint32_t>();
    if (ndim > 16) {
      throw std::runtime_error(path + ": " + name + " has ndim " + std::to_string(ndim));
    }
    std::vector<int64_t> dims(ndim);
    uint64_t numel = 1;
    for (auto& d : dims) {
      d = r.scalar<int64_t>();
      if (d < 0) throw std::runtime_error(path + ": " + name + " has a negative dimension");
      numel *= static_cast<uint64_t>(d);
      if (numel > r.left()) throw std::runtime_error(path + ": truncated data for " + name);
    }
    auto [tensor, dst] = alloc(name, dims);
    r.bytes(dst, numel * sizeof(float));
    out.emplace_back(std::move(name), std::move(tensor));
  }
  if (r.left() != 0) throw std::runtime_error(path + ": trailing bytes after the last tensor");
  return out;
}

struct ScwView {  // one tensor to write: contiguous float32
  std::string name;
  std::vector<int64_t> dims;
  const float* data;
  size_t numel;
};

inline void write_scw1(const std::string& path, const std::vector<ScwView>& tensors) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error("cannot write " + path);
  auto put = [&](const void* p, size_t n) { out.write(static_cast<const char*>(p), n); };
  put(kScw1Magic, 4);
  const auto count = static_cast<uint32_t>(tensors.size());
  put(&count, 4);
  for (const auto& t : tensors) {
    const auto name_len = static_cast<uint32_t>(t.name.size());
    put(&name_len, 4);
    put(t.name.data(), t.name.size());
    const auto ndim = static_cast<uint32_t>(t.dims.size());
    put(&ndim, 4);
    for (const int64_t d : t.dims) put(&d, 8);
    put(t.data, t.numel * sizeof(float));
  }
  if (!out) throw std::runtime_error("write failed: " + path);
}

}  // namespace stackcost
