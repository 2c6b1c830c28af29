// What stackcost_cudnn needs around the CUDA libraries: status checks that throw one line,
// device memory that counts every byte the program allocates, RAII descriptors, and the
// names of cuDNN's enums for the answer. Host-only C++: the program has no kernels of its own.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "common/protocol.hpp"

#include <cstdint>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace stackcost::cudnn {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(e) + " (" +
                             cudaGetErrorString(e) + ")");
  }
}

inline void check(cudnnStatus_t s, const char* what) {
  if (s != CUDNN_STATUS_SUCCESS) {
    throw std::runtime_error(std::string(what) + ": " + cudnnGetErrorString(s));
  }
}

inline void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string(what) + ": " + cublasGetStatusString(s));
  }
}

#define SC_CHECK(expr) ::stackcost::cudnn::check((expr), #expr)

// Refuse, in one line, where there is no device to run on: the first CUDA call a machine
// without a driver or GPU answers, before any file is read or library handle created.
inline int require_device() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string("no CUDA device: cudaGetDeviceCount returned ") +
                             cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
  }
  if (count < 1) throw std::runtime_error("no CUDA device: cudaGetDeviceCount found 0 devices");
  return count;
}

// Every cudaMalloc of the program goes through here, so its own accounting of device
// memory (weights, activations, workspace, input, output) is exact: live bytes by kind, and
// the peak of their sum. Frees everything at exit.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory() {
    for (const auto& [p, block] : blocks_) cudaFree(p);
  }

  float* floats(size_t count, const std::string& kind) {
    return static_cast<float*>(bytes(count * sizeof(float), kind));
  }

  void* bytes(size_t n, const std::string& kind) {
    if (n == 0) return nullptr;
    void* p = nullptr;
    SC_CHECK(cudaMalloc(&p, n));
    // Zeroed once, so no buffer ever holds NaN garbage a scaled-by-zero input could read.
    SC_CHECK(cudaMemset(p, 0, n));
    blocks_[p] = {n, kind};
    live_[kind] += n;
    total_ += n;
    peak_ = std::max(peak_, total_);
    return p;
  }

  void release(void* p) {
    if (p == nullptr) return;
    const auto it = blocks_.find(p);
    if (it == blocks_.end()) throw std::runtime_error("DeviceMemory::release: unknown pointer");
    live_[it->second.kind] -= it->second.n;
    total_ -= it->second.n;
    blocks_.erase(it);
    SC_CHECK(cudaFree(p));
  }

  size_t total() const { return total_; }
  size_t peak() const { return peak_; }
  const std::map<std::string, size_t>& by_kind() const { return live_; }

 private:
  struct Block {
    size_t n;
    std::string kind;
  };
  std::map<void*, Block> blocks_;
  std::map<std::string, size_t> live_;
  size_t total_ = 0, peak_ = 0;
};

// The library handles on one stream, destroyed on every way out. The stream is blocking:
// it waits for the legacy default stream, where DeviceMemory's cudaMemset zeroes each new
// buffer. cuBLAS's workspace comes from `mem`, so the program's accounting holds it too
// (32 MiB: cuBLAS's recommendation for Hopper); declare `mem` first, so every buffer
// outlives the libraries' last use of it.
class Handles {
 public:
  Handles(DeviceMemory& mem, cublasMath_t blas_math) : Handles() {  // delegating: a throw destroys
    SC_CHECK(cudaStreamCreate(&stream));
    SC_CHECK(cudnnCreate(&dnn));
    SC_CHECK(cudnnSetStream(dnn, stream));
    SC_CHECK(cublasCreate(&blas));
    SC_CHECK(cublasSetStream(blas, stream));  // before cublasSetWorkspace: it resets the workspace
    SC_CHECK(cublasSetMathMode(blas, blas_math));
    const size_t workspace = size_t{32} << 20;
    SC_CHECK(cublasSetWorkspace(blas, mem.bytes(workspace, "cublas_workspace"), workspace));
  }
  Handles(const Handles&) = delete;
  Handles& operator=(const Handles&) = delete;
  ~Handles() {
    if (blas) cublasDestroy(blas);
    if (dnn) cudnnDestroy(dnn);
    if (stream) cudaStreamDestroy(stream);
  }

  cudaStream_t stream = nullptr;
  cudnnHandle_t dnn = nullptr;
  cublasHandle_t blas = nullptr;

 private:
  Handles() = default;
};

// cudnnTensorDescriptor_t for a dense NCHW float tensor.
class TensorDesc {
 public:
  TensorDesc(int n, int c, int h, int w) {
    SC_CHECK(cudnnCreateTensorDescriptor(&d_));
    SC_CHECK(cudnnSetTensor4dDescriptor(d_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w));
  }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d_); }
  cudnnTensorDescriptor_t get() const { return d_; }

 private:
  cudnnTensorDescriptor_t d_ = nullptr;
};

class FilterDesc {
 public:
  FilterDesc(int k, int c, int h, int w) {
    SC_CHECK(cudnnCreateFilterDescriptor(&d_));
    SC_CHECK(cudnnSetFilter4dDescriptor(d_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, k, c, h, w));
  }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d_); }
  cudnnFilterDescriptor_t get() const { return d_; }

 private:
  cudnnFilterDescriptor_t d_ = nullptr;
};

class ConvDesc {
 public:
  ConvDesc(int pad, int stride, cudnnMathType_t math) {
    SC_CHECK(cudnnCreateConvolutionDescriptor(&d_));
    // Cross-correlation is what torch's Conv2d computes; float accumulation.
    SC_CHECK(cudnnSetConvolution2dDescriptor(d_, pad, pad, stride, stride, 1, 1,
                                             CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    SC_CHECK(cudnnSetConvolutionMathType(d_, math));
  }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d_); }
  cudnnConvolutionDescriptor_t get() const { return d_; }

 private:
  cudnnConvolutionDescriptor_t d_ = nullptr;
};

class PoolDesc {
 public:
  PoolDesc(cudnnPoolingMode_t mode, int kh, int kw, int pad, int stride) {
    SC_CHECK(cudnnCreatePoolingDescriptor(&d_));
    SC_CHECK(cudnnSetPooling2dDescriptor(d_, mode, CUDNN_PROPAGATE_NAN, kh, kw, pad, pad, stride,
                                         stride));
  }
  PoolDesc(const PoolDesc&) = delete;
  PoolDesc& operator=(const PoolDesc&) = delete;
  ~PoolDesc() { cudnnDestroyPoolingDescriptor(d_); }
  cudnnPoolingDescriptor_t get() const { return d_; }

 private:
  cudnnPoolingDescriptor_t d_ = nullptr;
};

class ActivationDesc {
 public:
  explicit ActivationDesc(cudnnActivationMode_t mode) {
    SC_CHECK(cudnnCreateActivationDescriptor(&d_));
    SC_CHECK(cudnnSetActivationDescriptor(d_, mode, CUDNN_PROPAGATE_NAN, 0.0));
  }
  ActivationDesc(const ActivationDesc&) = delete;
  ActivationDesc& operator=(const ActivationDesc&) = delete;
  ~ActivationDesc() { cudnnDestroyActivationDescriptor(d_); }
  cudnnActivationDescriptor_t get() const { return d_; }

 private:
  cudnnActivationDescriptor_t d_ = nullptr;
};

// C = op(A, B) + beta * C, element-wise; B may broadcast (a dimension of 1).
class OpTensorDesc {
 public:
  explicit OpTensorDesc(cudnnOpTensorOp_t op) {
    SC_CHECK(cudnnCreateOpTensorDescriptor(&d_));
    SC_CHECK(cudnnSetOpTensorDescriptor(d_, op, CUDNN_DATA_FLOAT, CUDNN_PROPAGATE_NAN));
  }
  OpTensorDesc(const OpTensorDesc&) = delete;
  OpTensorDesc& operator=(const OpTensorDesc&) = delete;
  ~OpTensorDesc() { cudnnDestroyOpTensorDescriptor(d_); }
  cudnnOpTensorDescriptor_t get() const { return d_; }

 private:
  cudnnOpTensorDescriptor_t d_ = nullptr;
};

// Device memory in use on the whole device (cudaMemGetInfo: total - free).
inline int64_t device_used_bytes(size_t* total = nullptr) {
  size_t free_b = 0, total_b = 0;
  SC_CHECK(cudaMemGetInfo(&free_b, &total_b));
  if (total) *total = total_b;
  return static_cast<int64_t>(total_b - free_b);
}

// CUDA device 0 as both commands start on it: its context made at once, so the device
// memory readings after it exclude the context, and what the answer names it by.
struct DeviceStart {
  size_t total_bytes = 0;
  int64_t used_context_bytes = 0;  // device_used_bytes right after the context
  cudaDeviceProp prop{};
  int runtime_version = 0, driver_version = 0;
};

inline DeviceStart start_device() {
  DeviceStart d;
  SC_CHECK(cudaSetDevice(0));
  SC_CHECK(cudaFree(nullptr));  // the context, now, so the readings below exclude it
  d.used_context_bytes = device_used_bytes(&d.total_bytes);
  SC_CHECK(cudaGetDeviceProperties(&d.prop, 0));
  SC_CHECK(cudaRuntimeGetVersion(&d.runtime_version));
  SC_CHECK(cudaDriverGetVersion(&d.driver_version));
  return d;
}

// ---- names, for the answer ---------------------------------------------------------------

inline std::string version3(int v) {  // cuDNN 9's encoding: major * 10000 + minor * 100 + patch
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

inline std::string cuda_version(int v) {  // CUDA's encoding: major * 1000 + minor * 10
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

inline std::string algo_name(cudnnConvolutionBwdDataAlgo_t a) {
  switch (a) {
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_0: return "ALGO_0";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_1: return "ALGO_1";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT: return "FFT";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING: return "FFT_TILING";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD: return "WINOGRAD";
    case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED: return "WINOGRAD_NONFUSED";
    default: return "algo " + std::to_string(static_cast<int>(a));
  }
}

inline std::string algo_name(cudnnConvolutionBwdFilterAlgo_t a) {
  switch (a) {
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0: return "ALGO_0";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1: return "ALGO_1";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT: return "FFT";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3: return "ALGO_3";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD: return "WINOGRAD";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED: return "WINOGRAD_NONFUSED";
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING: return "FFT_TILING";
    default: return "algo " + std::to_string(static_cast<int>(a));
  }
}

inline std::string algo_name(cudnnConvolutionFwdAlgo_t a) {
  switch (a) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return "IMPLICIT_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: return "IMPLICIT_PRECOMP_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return "GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return "DIRECT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return "FFT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return "FFT_TILING";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: return "WINOGRAD";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED: return "WINOGRAD_NONFUSED";
    default: return "algo " + std::to_string(static_cast<int>(a));
  }
}

inline std::string math_name(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH: return "CUDNN_DEFAULT_MATH";
    case CUDNN_TENSOR_OP_MATH: return "CUDNN_TENSOR_OP_MATH";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION";
    case CUDNN_FMA_MATH: return "CUDNN_FMA_MATH";
    default: return "math " + std::to_string(static_cast<int>(m));
  }
}

inline std::string cublas_math_name(cublasMath_t m) {
  switch (m) {
    case CUBLAS_DEFAULT_MATH: return "CUBLAS_DEFAULT_MATH";
    case CUBLAS_PEDANTIC_MATH: return "CUBLAS_PEDANTIC_MATH";
    case CUBLAS_TF32_TENSOR_OP_MATH: return "CUBLAS_TF32_TENSOR_OP_MATH";
    default: return "math " + std::to_string(static_cast<int>(m));
  }
}

// The answer's details from "device" to "cuda_driver": the GPU, and the versions of cuDNN
// (the library loaded and the header built against), cuBLAS and CUDA.
inline std::string device_json(const DeviceStart& d) {
  std::ostringstream js;
  js << "\"device\":\"cuda\""
     << ",\"device_name\":" << json_string(d.prop.name) << ",\"compute_capability\":\"" << d.prop.major
     << "." << d.prop.minor << "\""
     << ",\"cudnn\":\"" << version3(static_cast<int>(cudnnGetVersion())) << "\""
     << ",\"cudnn_header\":\"" << CUDNN_MAJOR << "." << CUDNN_MINOR << "." << CUDNN_PATCHLEVEL << "\""
     << ",\"cudnn_api\":\"legacy\",\"cublas\":\"" << CUBLAS_VER_MAJOR << "." << CUBLAS_VER_MINOR << "."
     << CUBLAS_VER_PATCH << "\",\"cuda_runtime\":\"" << cuda_version(d.runtime_version)
     << "\",\"cuda_driver\":\"" << cuda_version(d.driver_version) << "\"";
  return js.str();
}

}  // namespace stackcost::cudnn
