// SCW1 tensor files (native/README.md): "SCW1", uint32 count, then per tensor uint32 name
// length, name, uint32 ndim | dtype << 8, int64 dims, data in that dtype (0 = float32, the
// only one before dtypes existed, so older files read unchanged); little-endian. Shared by
// every native program; each supplies how to allocate its own tensor type.
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

// The element types a file may hold; the code is the second byte of the ndim word.
enum class ScwType : uint8_t { f32 = 0, i64 = 1, i32 = 2, f64 = 3, u8 = 4, b8 = 5 };

inline size_t scw_size(ScwType t) {
  switch (t) {
    case ScwType::f32: case ScwType::i32: return 4;
    case ScwType::i64: case ScwType::f64: return 8;
    case ScwType::u8: case ScwType::b8: return 1;
  }
  throw std::runtime_error("unknown SCW1 dtype " + std::to_string(static_cast<int>(t)));
}

inline const char* scw_name(ScwType t) {
  switch (t) {
    case ScwType::f32: return "float32";
    case ScwType::i64: return "int64";
    case ScwType::i32: return "int32";
    case ScwType::f64: return "float64";
    case ScwType::u8: return "uint8";
    case ScwType::b8: return "bool";
  }
  return "unknown";
}

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

// `alloc(name, dims, dtype)` returns {tensor, pointer to its numel elements of dtype}; the
// data is copied there.
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
    const auto word = r.scalar<uint32_t>();
    const uint32_t ndim = word & 0xffu, code = (word >> 8) & 0xffu;
    if ((word >> 16) != 0 || code > static_cast<uint32_t>(ScwType::b8)) {
      throw std::runtime_error(path + ": " + name + " has an unknown dtype code " +
                               std::to_string(word >> 8));
    }
    const auto dtype = static_cast<ScwType>(code);
    const size_t elem = scw_size(dtype);
    if (ndim > 16) {
      throw std::runtime_error(path + ": " + name + " has ndim " + std::to_string(ndim));
    }
    std::vector<int64_t> dims(ndim);
    uint64_t numel = 1;
    for (auto& d : dims) {
      d = r.scalar<int64_t>();
      if (d < 0) throw std::runtime_error(path + ": " + name + " has a negative dimension");
      numel *= static_cast<uint64_t>(d);
      if (numel * elem > r.left()) throw std::runtime_error(path + ": truncated data for " + name);
    }
    auto [tensor, dst] = alloc(name, dims, dtype);
    r.bytes(dst, numel * elem);
    out.emplace_back(std::move(name), std::move(tensor));
  }
  if (r.left() != 0) throw std::runtime_error(path + ": trailing bytes after the last tensor");
  return out;
}

struct ScwView {  // one tensor to write: contiguous, of `dtype`
  std::string name;
  std::vector<int64_t> dims;
  const void* data;
  size_t numel;
  ScwType dtype = ScwType::f32;
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
    const auto word =
        static_cast<uint32_t>(t.dims.size()) | (static_cast<uint32_t>(t.dtype) << 8);
    put(&word, 4);
    for (const int64_t d : t.dims) put(&d, 8);
    put(t.data, t.numel * scw_size(t.dtype));
  }
  if (!out) throw std::runtime_error("write failed: " + path);
}

}  // namespace stackcost
