// The optimizer step on the device (optimizer.cu): torch.optim.SGD and Adam, element-wise,
// one launch per parameter on the given stream. The only kernels of stackcost_cudnn that
// are its own: cuDNN and cuBLAS have no fused optimizer update in their legacy APIs.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace stackcost::cudnn {

// torch.optim.SGD (no weight decay, no dampening, not nesterov), foreach path's order:
//   momentum == 0:  p = p + (-lr) * g
//   first step:     buf = g;                        p = p + (-lr) * buf
//   later steps:    buf = round(buf * momentum) + g; p = p + (-lr) * buf
void sgd_update(float* p, const float* g, float* buf, size_t n, float lr, float momentum,
                bool first, cudaStream_t stream);

// torch.optim.Adam's defaults (betas 0.9/0.999, eps 1e-8, no weight decay, not amsgrad):
//   m = m + (1 - beta1) * (g - m)            exp_avg.lerp_(grad, 1 - beta1)
//   v = v * beta2 + (1 - beta2) * g * g      exp_avg_sq.mul_(beta2).addcmul_(g, g, 1 - beta2)
//   p = p + (-step_size) * (m / (sqrt(v) / bias2_sqrt + eps))
// step_size = lr / (1 - beta1^t) and bias2_sqrt = sqrt(1 - beta2^t) computed by the caller
// in double and passed as float, as torch passes Python floats to its kernels.
void adam_update(float* p, const float* g, float* m, float* v, size_t n, float step_size,
                 float bias2_sqrt, cudaStream_t stream);

}  // namespace stackcost::cudnn
