// One element of the optimizer step (optimizer.hpp), for the CUDA kernels of optimizer.cu
// and for any host code that must compute the same thing (a CPU stand-in of the libraries
// used to test the program's wiring): the rounding is spelled out, so both agree bit for
// bit. Where torch rounds between two ops the _rn intrinsics keep nvcc's FMA contraction
// from merging them; where torch computes a + alpha * b in one expression, fma is used
// (what its compiled CUDA kernels contract to). The order is torch's multi-tensor (foreach)
// path, its default for CUDA parameters.
#pragma once

#include <cmath>

#ifdef __CUDACC__
#define SC_HD __host__ __device__ __forceinline__
#else
#define SC_HD inline
#endif

namespace stackcost::cudnn::opt {

#ifdef __CUDA_ARCH__
SC_HD float mul(float a, float b) { return __fmul_rn(a, b); }
SC_HD float add(float a, float b) { return __fadd_rn(a, b); }
SC_HD float sub(float a, float b) { return __fsub_rn(a, b); }
SC_HD float div(float a, float b) { return __fdiv_rn(a, b); }
SC_HD float sqrt_(float a) { return __fsqrt_rn(a); }
SC_HD float fma_(float a, float b, float c) { return fmaf(a, b, c); }
#else  // host: one rounding per operation (x86-64 contracts nothing without -mfma)
SC_HD float mul(float a, float b) { return a * b; }
SC_HD float add(float a, float b) { return a + b; }
SC_HD float sub(float a, float b) { return a - b; }
SC_HD float div(float a, float b) { return a / b; }
SC_HD float sqrt_(float a) { return std::sqrt(a); }
SC_HD float fma_(float a, float b, float c) { return std::fma(a, b, c); }
#endif

// torch.optim.SGD: mode 0 (no momentum) p += -lr * g; mode 1 (first step) buf = g, then
// p += -lr * buf; mode 2: buf = round(buf * momentum) + g, then p += -lr * buf.
SC_HD void sgd(float& p, float g, float& buf, float lr, float momentum, int mode) {
  float step = g;
  if (mode == 1) {
    buf = step;
  } else if (mode == 2) {
    step = add(mul(buf, momentum), step);
    buf = step;
  }
  p = fma_(-lr, step, p);  // p.add_(buf, alpha=-lr)
}

// torch.optim.Adam's defaults, Python floats (double) cast to float where they meet a
// float tensor, as in torch.
SC_HD void adam(float& p, float g, float& m, float& v, float step_size, float bias2_sqrt) {
  const float w1 = static_cast<float>(1.0 - 0.9), b2 = static_cast<float>(0.999);
  const float w2 = static_cast<float>(1.0 - 0.999), eps = static_cast<float>(1e-8);
  m = fma_(w1, sub(g, m), m);             // exp_avg.lerp_(grad, 1 - beta1): weight < 0.5
  v = fma_(w2, mul(g, g), mul(v, b2));    // _foreach_mul_(beta2), _foreach_addcmul_(g, g, 1 - beta2)
  const float denom = add(div(sqrt_(v), bias2_sqrt), eps);
  p = fma_(-step_size, div(m, denom), p);  // addcdiv_(exp_avg, denom, -step_size)
}

}  // namespace stackcost::cudnn::opt
