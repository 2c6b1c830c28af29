// The optimizer kernels of optimizer.hpp: grid-stride loops, one thread per element, each
// element's arithmetic from optimizer_math.hpp (torch's order and rounding).
#include "optimizer.hpp"
#include "optimizer_math.hpp"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace stackcost::cudnn {
namespace {

constexpr int kThreads = 256;

int blocks_for(size_t n) {
  const size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 4096 ? (b > 0 ? b : 1) : 4096);
}

void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string(what) + " launch: " + cudaGetErrorName(e) + " (" +
                             cudaGetErrorString(e) + ")");
  }
}

__global__ void sgd_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ buf,
                           size_t n, float lr, float momentum, int mode) {
  const size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float b = mode == 0 ? 0.f : buf[i];
    opt::sgd(p[i], g[i], b, lr, momentum, mode);
    if (mode != 0) buf[i] = b;
  }
}

__global__ void adam_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                            float* __restrict__ v, size_t n, float step_size, float bias2_sqrt) {
  const size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    opt::adam(p[i], g[i], m[i], v[i], step_size, bias2_sqrt);
  }
}

}  // namespace

void sgd_update(float* p, const float* g, float* buf, size_t n, float lr, float momentum,
                bool first, cudaStream_t stream) {
  if (n == 0) return;
  const int mode = momentum == 0.f ? 0 : (first ? 1 : 2);
  sgd_kernel<<<blocks_for(n), kThreads, 0, stream>>>(p, g, buf, n, lr, momentum, mode);
  check_launch("sgd_kernel");
}

void adam_update(float* p, const float* g, float* m, float* v, size_t n, float step_size,
                 float bias2_sqrt, cudaStream_t stream) {
  if (n == 0) return;
  adam_kernel<<<blocks_for(n), kThreads, 0, stream>>>(p, g, m, v, n, step_size, bias2_sqrt);
  check_launch("adam_kernel");
}

}  // namespace stackcost::cudnn
