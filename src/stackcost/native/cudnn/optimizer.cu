// The optimizer kernels of optimizer.hpp: grid-stride loops, one thread per element.
// Rounding is spelled out with the _rn intrinsics where torch rounds between two ops, so
// nvcc's default FMA contraction cannot merge them; where torch computes a + alpha * b in
// one expression, fmaf is used (what its compiled CUDA kernels contract to). The order is
// torch's multi-tensor (foreach) path, its default for CUDA parameters.
#include "optimizer.hpp"

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
    float step = g[i];
    if (mode == 1) {  // the first step: buf = clone(grad)
      buf[i] = step;
    } else if (mode == 2) {  // buf.mul_(momentum).add_(grad): two roundings
      step = __fadd_rn(__fmul_rn(buf[i], momentum), step);
      buf[i] = step;
    }
    p[i] = fmaf(-lr, step, p[i]);  // p.add_(buf, alpha=-lr)
  }
}

__global__ void adam_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                            float* __restrict__ v, size_t n, float step_size, float bias2_sqrt) {
  // Python floats (double) cast to float where they meet a float tensor, as in torch.
  const float w1 = static_cast<float>(1.0 - 0.9), b2 = static_cast<float>(0.999);
  const float w2 = static_cast<float>(1.0 - 0.999), eps = static_cast<float>(1e-8);
  const size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float gi = g[i];
    const float mi = fmaf(w1, __fsub_rn(gi, m[i]), m[i]);  // lerp_, weight < 0.5: m + w * (g - m)
    // _foreach_mul_(exp_avg_sq, beta2), then _foreach_addcmul_: a + value * (g * g).
    const float vi = fmaf(w2, __fmul_rn(gi, gi), __fmul_rn(v[i], b2));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bias2_sqrt), eps);
    m[i] = mi;
    v[i] = vi;
    p[i] = fmaf(-step_size, __fdiv_rn(mi, denom), p[i]);  // addcdiv_(exp_avg, denom, -step_size)
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
