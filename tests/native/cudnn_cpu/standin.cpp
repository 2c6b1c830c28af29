// A CPU stand-in for the parts of the CUDA runtime, cuDNN 9 (legacy API) and cuBLAS that
// stackcost_cudnn calls, so its wiring can run where there is no GPU: the same sources,
// linked against this file instead of the libraries (tests/native/test_cudnn_cpu.py).
//
// "Device" memory is host memory; a stream runs everything at once. Every function follows
// the libraries' documented semantics as this project reads them (alpha/beta blending, NCHW
// packed tensors, column-major GEMM, cuDNN's batch-norm statistics): it checks the program's
// calls, pointers, shapes, blending and order, not cuDNN's own numerics or its behaviour
// where the documentation is silent. The heuristics offer one algorithm per direction.
// The optimizer step runs optimizer_math.hpp's per-element code, as the kernels do.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "cudnn/optimizer.hpp"
#include "cudnn/optimizer_math.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <vector>

struct cudnnContext {};
struct cublasContext {};
struct CUstream_st {};
struct CUevent_st {
  std::chrono::steady_clock::time_point t;
};
struct cudnnTensorStruct {
  int n = 0, c = 0, h = 0, w = 0;
};
struct cudnnFilterStruct {
  int k = 0, c = 0, h = 0, w = 0;
};
struct cudnnConvolutionStruct {
  int pad_h = 0, pad_w = 0, u = 1, v = 1;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};
struct cudnnPoolingStruct {
  cudnnPoolingMode_t mode = CUDNN_POOLING_MAX;
  int kh = 1, kw = 1, ph = 0, pw = 0, sh = 1, sw = 1;
};
struct cudnnActivationStruct {
  cudnnActivationMode_t mode = CUDNN_ACTIVATION_RELU;
};
struct cudnnOpTensorStruct {
  cudnnOpTensorOp_t op = CUDNN_OP_TENSOR_ADD;
};

namespace {

std::map<void*, size_t> g_blocks;
size_t g_used = 0;
constexpr size_t kTotal = size_t{16} << 30;

float rd(const void* p, size_t i) { return static_cast<const float*>(p)[i]; }
float& at(void* p, size_t i) { return static_cast<float*>(p)[i]; }
float f(const void* scalar) { return *static_cast<const float*>(scalar); }
size_t numel(const cudnnTensorStruct* d) { return static_cast<size_t>(d->n) * d->c * d->h * d->w; }
size_t idx(const cudnnTensorStruct* d, int n, int c, int h, int w) {
  return ((static_cast<size_t>(n) * d->c + c) * d->h + h) * d->w + w;
}
// Where B (dims each equal to C's or 1) is read for C's element (n, c, h, w).
size_t bidx(const cudnnTensorStruct* b, int n, int c, int h, int w) {
  return idx(b, b->n == 1 ? 0 : n, b->c == 1 ? 0 : c, b->h == 1 ? 0 : h, b->w == 1 ? 0 : w);
}
bool broadcasts(const cudnnTensorStruct* b, const cudnnTensorStruct* c) {
  return (b->n == c->n || b->n == 1) && (b->c == c->c || b->c == 1) && (b->h == c->h || b->h == 1) &&
         (b->w == c->w || b->w == 1);
}
bool same(const cudnnTensorStruct* a, const cudnnTensorStruct* b) {
  return a->n == b->n && a->c == b->c && a->h == b->h && a->w == b->w;
}
// y = alpha * v + beta * y, not reading y where beta is 0 (as the libraries promise).
void blend(void* y, size_t i, float alpha, double v, float beta) {
  const float out = alpha * static_cast<float>(v);
  at(y, i) = beta == 0.f ? out : out + beta * at(y, i);
}

template <typename Fn>
void each(const cudnnTensorStruct* d, Fn fn) {
  for (int n = 0; n < d->n; ++n)
    for (int c = 0; c < d->c; ++c)
      for (int h = 0; h < d->h; ++h)
        for (int w = 0; w < d->w; ++w) fn(n, c, h, w);
}

// The convolution's sum for output (n, k, oh, ow), or its transposes, as loops over taps.
template <typename Fn>
void taps(const cudnnTensorStruct* x, const cudnnFilterStruct* f, const cudnnConvolutionStruct* cd, int oh,
          int ow, Fn fn) {
  for (int c = 0; c < f->c; ++c)
    for (int r = 0; r < f->h; ++r)
      for (int s = 0; s < f->w; ++s) {
        const int ih = oh * cd->u - cd->pad_h + r, iw = ow * cd->v - cd->pad_w + s;
        if (ih < 0 || iw < 0 || ih >= x->h || iw >= x->w) continue;
        fn(c, r, s, ih, iw);
      }
}
size_t fidx(const cudnnFilterStruct* f, int k, int c, int r, int s) {
  return ((static_cast<size_t>(k) * f->c + c) * f->h + r) * f->w + s;
}

}  // namespace

// ---- CUDA runtime ---------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {  // none where the test says so
  *count = std::getenv("STACKCOST_STANDIN_NO_DEVICE") ? 0 : 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaMalloc(void** p, size_t n) {
  *p = std::malloc(n);
  if (*p == nullptr) return cudaErrorMemoryAllocation;
  std::memset(*p, 0x7f, n);  // garbage (large floats): what is read before written shows
  g_blocks[*p] = n;
  g_used += n;
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  if (p == nullptr) return cudaSuccess;
  const auto it = g_blocks.find(p);
  if (it == g_blocks.end()) return cudaErrorInvalidValue;
  g_used -= it->second;
  g_blocks.erase(it);
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int v, size_t n) {
  std::memset(p, v, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind) {
  std::memcpy(dst, src, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind, cudaStream_t) {
  std::memcpy(dst, src, n);
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* s) {
  *s = new CUstream_st;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
cudaError_t cudaMemGetInfo(size_t* free_b, size_t* total) {
  *total = kTotal;
  *free_b = kTotal - g_used;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int) {
  std::memset(prop, 0, sizeof *prop);
  std::strcpy(prop->name, "CPU stand-in (tests/native/cudnn_cpu)");
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}
const char* cudaGetErrorName(cudaError_t) { return "cudaErrorStandIn"; }
const char* cudaGetErrorString(cudaError_t) { return "the CPU stand-in's error"; }
cudaError_t cudaGetLastError() { return cudaSuccess; }
cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = new CUevent_st;
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  e->t = std::chrono::steady_clock::now();
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  *ms = std::chrono::duration<float, std::milli>(b->t - a->t).count();
  return cudaSuccess;
}

// ---- the optimizer (optimizer.hpp), element by element as the kernels ---------------------

namespace stackcost::cudnn {
void sgd_update(float* p, const float* g, float* buf, size_t n, float lr, float momentum, bool first,
                cudaStream_t) {
  const int mode = momentum == 0.f ? 0 : (first ? 1 : 2);
  for (size_t i = 0; i < n; ++i) {
    float b = mode == 0 ? 0.f : buf[i];
    opt::sgd(p[i], g[i], b, lr, momentum, mode);
    if (mode != 0) buf[i] = b;
  }
}
void adam_update(float* p, const float* g, float* m, float* v, size_t n, float step_size, float bias2_sqrt,
                 cudaStream_t) {
  for (size_t i = 0; i < n; ++i) opt::adam(p[i], g[i], m[i], v[i], step_size, bias2_sqrt);
}
}  // namespace stackcost::cudnn

// ---- cuBLAS -------------------------------------------------------------------------------

cublasStatus_t cublasCreate(cublasHandle_t* h) {
  *h = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetWorkspace(cublasHandle_t, void*, size_t) { return CUBLAS_STATUS_SUCCESS; }
const char* cublasGetStatusString(cublasStatus_t) { return "the CPU stand-in's cuBLAS error"; }

// Column-major C[m x n] = alpha op(A)[m x k] op(B)[k x n] + beta C.
cublasStatus_t cublasSgemm(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta,
                           float* C, int ldc) {
  const auto a = [&](int i, int l) { return ta == CUBLAS_OP_N ? A[i + l * lda] : A[l + i * lda]; };
  const auto b = [&](int l, int j) { return tb == CUBLAS_OP_N ? B[l + j * ldb] : B[j + l * ldb]; };
  if ((ta == CUBLAS_OP_N ? lda < m : lda < k) || (tb == CUBLAS_OP_N ? ldb < k : ldb < n) || ldc < m) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double s = 0;
      for (int l = 0; l < k; ++l) s += static_cast<double>(a(i, l)) * b(l, j);
      blend(C, static_cast<size_t>(i) + static_cast<size_t>(j) * ldc, *alpha, s, *beta);
    }
  return CUBLAS_STATUS_SUCCESS;
}

// ---- cuDNN: handles and descriptors -----------------------------------------------------

size_t cudnnGetVersion() { return CUDNN_VERSION; }
const char* cudnnGetErrorString(cudnnStatus_t) { return "the CPU stand-in's cuDNN error"; }
cudnnStatus_t cudnnCreate(cudnnHandle_t* h) {
  *h = new cudnnContext;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t h) {
  delete h;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetStream(cudnnHandle_t, cudaStream_t) { return CUDNN_STATUS_SUCCESS; }

#define SC_CREATE_DESTROY(Create, Destroy, T)       \
  cudnnStatus_t Create(T** d) {                     \
    *d = new T;                                     \
    return CUDNN_STATUS_SUCCESS;                    \
  }                                                 \
  cudnnStatus_t Destroy(T* d) {                     \
    delete d;                                       \
    return CUDNN_STATUS_SUCCESS;                    \
  }
SC_CREATE_DESTROY(cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor, cudnnTensorStruct)
SC_CREATE_DESTROY(cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor, cudnnFilterStruct)
SC_CREATE_DESTROY(cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor, cudnnConvolutionStruct)
SC_CREATE_DESTROY(cudnnCreatePoolingDescriptor, cudnnDestroyPoolingDescriptor, cudnnPoolingStruct)
SC_CREATE_DESTROY(cudnnCreateActivationDescriptor, cudnnDestroyActivationDescriptor, cudnnActivationStruct)
SC_CREATE_DESTROY(cudnnCreateOpTensorDescriptor, cudnnDestroyOpTensorDescriptor, cudnnOpTensorStruct)

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t format,
                                         cudnnDataType_t type, int n, int c, int h, int w) {
  if (format != CUDNN_TENSOR_NCHW || type != CUDNN_DATA_FLOAT || n < 1 || c < 1 || h < 1 || w < 1) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  *d = {n, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t type,
                                         cudnnTensorFormat_t format, int k, int c, int h, int w) {
  if (format != CUDNN_TENSOR_NCHW || type != CUDNN_DATA_FLOAT) return CUDNN_STATUS_BAD_PARAM;
  *d = {k, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h, int pad_w, int u, int v,
                                              int dh, int dw, cudnnConvolutionMode_t mode, cudnnDataType_t type) {
  if (dh != 1 || dw != 1 || mode != CUDNN_CROSS_CORRELATION || type != CUDNN_DATA_FLOAT) {
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  d->pad_h = pad_h, d->pad_w = pad_w, d->u = u, d->v = v;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t m) {
  d->math = m;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetPooling2dDescriptor(cudnnPoolingDescriptor_t d, cudnnPoolingMode_t mode,
                                          cudnnNanPropagation_t, int kh, int kw, int ph, int pw, int sh, int sw) {
  *d = {mode, kh, kw, ph, pw, sh, sw};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetActivationDescriptor(cudnnActivationDescriptor_t d, cudnnActivationMode_t mode,
                                           cudnnNanPropagation_t, double) {
  d->mode = mode;
  return mode == CUDNN_ACTIVATION_RELU || mode == CUDNN_ACTIVATION_IDENTITY ? CUDNN_STATUS_SUCCESS
                                                                            : CUDNN_STATUS_NOT_SUPPORTED;
}
cudnnStatus_t cudnnSetOpTensorDescriptor(cudnnOpTensorDescriptor_t d, cudnnOpTensorOp_t op, cudnnDataType_t,
                                         cudnnNanPropagation_t) {
  d->op = op;
  return op == CUDNN_OP_TENSOR_ADD || op == CUDNN_OP_TENSOR_MUL ? CUDNN_STATUS_SUCCESS
                                                                : CUDNN_STATUS_NOT_SUPPORTED;
}
cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t cd,
                                                    const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t f,
                                                    int* n, int* c, int* h, int* w) {
  if (x->c != f->c) return CUDNN_STATUS_BAD_PARAM;
  *n = x->n, *c = f->k;
  *h = (x->h + 2 * cd->pad_h - f->h) / cd->u + 1;
  *w = (x->w + 2 * cd->pad_w - f->w) / cd->v + 1;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetPooling2dForwardOutputDim(const cudnnPoolingDescriptor_t p, const cudnnTensorDescriptor_t x,
                                                int* n, int* c, int* h, int* w) {
  *n = x->n, *c = x->c;
  *h = (x->h + 2 * p->ph - p->kh) / p->sh + 1;
  *w = (x->w + 2 * p->pw - p->kw) / p->sw + 1;
  return CUDNN_STATUS_SUCCESS;
}

// ---- cuDNN: algorithm queries (one algorithm per direction, a small workspace) ------------

namespace {
constexpr size_t kWorkspace = 256;
template <typename Perf, typename Algo>
void offer(Perf* perf, int* returned, Algo algo) {
  *perf = Perf{};
  perf->algo = algo;
  perf->status = CUDNN_STATUS_SUCCESS;
  perf->memory = kWorkspace;
  perf->determinism = CUDNN_DETERMINISTIC;
  perf->mathType = CUDNN_FMA_MATH;
  *returned = 1;
}
bool workspace_ok(void* ws, size_t bytes) { return bytes >= kWorkspace && ws != nullptr; }
}  // namespace

cudnnStatus_t cudnnGetConvolutionForwardAlgorithmMaxCount(cudnnHandle_t, int* count) {
  *count = 3;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cudnnHandle_t, int* count) {
  *count = 3;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cudnnHandle_t, int* count) {
  *count = 3;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t, const cudnnTensorDescriptor_t,
                                                     const cudnnFilterDescriptor_t, const cudnnConvolutionDescriptor_t,
                                                     const cudnnTensorDescriptor_t, const int, int* returned,
                                                     cudnnConvolutionFwdAlgoPerf_t* perf) {
  offer(perf, returned, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t, const cudnnFilterDescriptor_t,
                                                          const cudnnTensorDescriptor_t,
                                                          const cudnnConvolutionDescriptor_t,
                                                          const cudnnTensorDescriptor_t, const int, int* returned,
                                                          cudnnConvolutionBwdDataAlgoPerf_t* perf) {
  offer(perf, returned, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t, const cudnnTensorDescriptor_t,
                                                            const cudnnTensorDescriptor_t,
                                                            const cudnnConvolutionDescriptor_t,
                                                            const cudnnFilterDescriptor_t, const int, int* returned,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
  offer(perf, returned, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t, const cudnnTensorDescriptor_t,
                                                      const cudnnFilterDescriptor_t, const cudnnConvolutionDescriptor_t,
                                                      const cudnnTensorDescriptor_t, cudnnConvolutionFwdAlgo_t,
                                                      size_t* bytes) {
  *bytes = kWorkspace;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t, const cudnnFilterDescriptor_t,
                                                           const cudnnTensorDescriptor_t,
                                                           const cudnnConvolutionDescriptor_t,
                                                           const cudnnTensorDescriptor_t, cudnnConvolutionBwdDataAlgo_t,
                                                           size_t* bytes) {
  *bytes = kWorkspace;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t, const cudnnTensorDescriptor_t,
                                                             const cudnnTensorDescriptor_t,
                                                             const cudnnConvolutionDescriptor_t,
                                                             const cudnnFilterDescriptor_t,
                                                             cudnnConvolutionBwdFilterAlgo_t, size_t* bytes) {
  *bytes = kWorkspace;
  return CUDNN_STATUS_SUCCESS;
}

// ---- cuDNN: compute ---------------------------------------------------------------------

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t, const void* alpha, const cudnnTensorDescriptor_t xd,
                                      const void* x, const cudnnFilterDescriptor_t fd, const void* w,
                                      const cudnnConvolutionDescriptor_t cd, cudnnConvolutionFwdAlgo_t, void* ws,
                                      size_t ws_bytes, const void* beta, const cudnnTensorDescriptor_t yd, void* y) {
  if (!workspace_ok(ws, ws_bytes) || xd->c != fd->c || yd->c != fd->k || cd->math != CUDNN_FMA_MATH) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  each(yd, [&](int n, int k, int oh, int ow) {
    double s = 0;
    taps(xd, fd, cd, oh, ow, [&](int c, int r, int q, int ih, int iw) {
      s += static_cast<double>(rd(x, idx(xd, n, c, ih, iw))) * rd(w, fidx(fd, k, c, r, q));
    });
    blend(y, idx(yd, n, k, oh, ow), f(alpha), s, f(beta));
  });
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t, const void* alpha, const cudnnFilterDescriptor_t fd,
                                           const void* w, const cudnnTensorDescriptor_t dyd, const void* dy,
                                           const cudnnConvolutionDescriptor_t cd, cudnnConvolutionBwdDataAlgo_t,
                                           void* ws, size_t ws_bytes, const void* beta,
                                           const cudnnTensorDescriptor_t dxd, void* dx) {
  if (!workspace_ok(ws, ws_bytes) || dxd->c != fd->c || dyd->c != fd->k) return CUDNN_STATUS_BAD_PARAM;
  std::vector<double> acc(numel(dxd), 0.0);
  each(dyd, [&](int n, int k, int oh, int ow) {
    const double g = rd(dy, idx(dyd, n, k, oh, ow));
    taps(dxd, fd, cd, oh, ow, [&](int c, int r, int q, int ih, int iw) {
      acc[idx(dxd, n, c, ih, iw)] += g * rd(w, fidx(fd, k, c, r, q));
    });
  });
  for (size_t i = 0; i < acc.size(); ++i) blend(dx, i, f(alpha), acc[i], f(beta));
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t, const void* alpha, const cudnnTensorDescriptor_t xd,
                                             const void* x, const cudnnTensorDescriptor_t dyd, const void* dy,
                                             const cudnnConvolutionDescriptor_t cd, cudnnConvolutionBwdFilterAlgo_t,
                                             void* ws, size_t ws_bytes, const void* beta,
                                             const cudnnFilterDescriptor_t fd, void* dw) {
  if (!workspace_ok(ws, ws_bytes) || xd->c != fd->c || dyd->c != fd->k) return CUDNN_STATUS_BAD_PARAM;
  std::vector<double> acc(static_cast<size_t>(fd->k) * fd->c * fd->h * fd->w, 0.0);
  each(dyd, [&](int n, int k, int oh, int ow) {
    const double g = rd(dy, idx(dyd, n, k, oh, ow));
    taps(xd, fd, cd, oh, ow, [&](int c, int r, int q, int ih, int iw) {
      acc[fidx(fd, k, c, r, q)] += g * rd(x, idx(xd, n, c, ih, iw));
    });
  });
  for (size_t i = 0; i < acc.size(); ++i) blend(dw, i, f(alpha), acc[i], f(beta));
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBackwardBias(cudnnHandle_t, const void* alpha, const cudnnTensorDescriptor_t dyd,
                                           const void* dy, const void* beta, const cudnnTensorDescriptor_t dbd,
                                           void* db) {
  if (dbd->n != 1 || dbd->c != dyd->c || dbd->h != 1 || dbd->w != 1) return CUDNN_STATUS_BAD_PARAM;
  std::vector<double> acc(static_cast<size_t>(dyd->c), 0.0);
  each(dyd, [&](int n, int c, int h, int w) { acc[static_cast<size_t>(c)] += rd(dy, idx(dyd, n, c, h, w)); });
  for (size_t i = 0; i < acc.size(); ++i) blend(db, i, f(alpha), acc[i], f(beta));
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBiasActivationForward(
    cudnnHandle_t h, const void* alpha1, const cudnnTensorDescriptor_t xd, const void* x,
    const cudnnFilterDescriptor_t fd, const void* w, const cudnnConvolutionDescriptor_t cd,
    cudnnConvolutionFwdAlgo_t algo, void* ws, size_t ws_bytes, const void* alpha2, const cudnnTensorDescriptor_t zd,
    const void* z, const cudnnTensorDescriptor_t bd, const void* bias, const cudnnActivationDescriptor_t ad,
    const cudnnTensorDescriptor_t yd, void* y) {
  if (!same(zd, yd) || !broadcasts(bd, yd)) return CUDNN_STATUS_BAD_PARAM;
  std::vector<float> conv(numel(yd));
  const float zero = 0.f;
  const cudnnStatus_t s =
      cudnnConvolutionForward(h, alpha1, xd, x, fd, w, cd, algo, ws, ws_bytes, &zero, yd, conv.data());
  if (s != CUDNN_STATUS_SUCCESS) return s;
  each(yd, [&](int n, int c, int hh, int ww) {
    const size_t i = idx(yd, n, c, hh, ww);
    float v = conv[i] + f(alpha2) * rd(z, i) + rd(bias, bidx(bd, n, c, hh, ww));
    if (ad->mode == CUDNN_ACTIVATION_RELU) v = std::max(v, 0.f);
    at(y, i) = v;
  });
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnAddTensor(cudnnHandle_t, const void* alpha, const cudnnTensorDescriptor_t ad, const void* A,
                             const void* beta, const cudnnTensorDescriptor_t cd, void* C) {
  if (!broadcasts(ad, cd)) return CUDNN_STATUS_BAD_PARAM;
  each(cd, [&](int n, int c, int h, int w) {
    blend(C, idx(cd, n, c, h, w), f(alpha), rd(A, bidx(ad, n, c, h, w)), f(beta));
  });
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnOpTensor(cudnnHandle_t, const cudnnOpTensorDescriptor_t op, const void* alpha1,
                            const cudnnTensorDescriptor_t ad, const void* A, const void* alpha2,
                            const cudnnTensorDescriptor_t bd, const void* B, const void* beta,
                            const cudnnTensorDescriptor_t cd, void* C) {
  if (!same(ad, cd) || !broadcasts(bd, cd)) return CUDNN_STATUS_BAD_PARAM;
  each(cd, [&](int n, int c, int h, int w) {
    const size_t i = idx(cd, n, c, h, w);
    const float a = f(alpha1) * rd(A, i), b = f(alpha2) * rd(B, bidx(bd, n, c, h, w));
    blend(C, i, 1.f, op->op == CUDNN_OP_TENSOR_ADD ? a + b : a * b, f(beta));
  });
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnActivationForward(cudnnHandle_t, cudnnActivationDescriptor_t ad, const void* alpha,
                                     const cudnnTensorDescriptor_t xd, const void* x, const void* beta,
                                     const cudnnTensorDescriptor_t yd, void* y) {
  if (!same(xd, yd)) return CUDNN_STATUS_BAD_PARAM;
  for (size_t i = 0; i < numel(xd); ++i) {
    const float v = rd(x, i);
    blend(y, i, f(alpha), ad->mode == CUDNN_ACTIVATION_RELU ? std::max(v, 0.f) : v, f(beta));
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnActivationBackward(cudnnHandle_t, cudnnActivationDescriptor_t ad, const void* alpha,
                                      const cudnnTensorDescriptor_t yd, const void* y,
                                      const cudnnTensorDescriptor_t dyd, const void* dy,
                                      const cudnnTensorDescriptor_t xd, const void* x, const void* beta,
                                      const cudnnTensorDescriptor_t dxd, void* dx) {
  if (!same(xd, yd) || !same(dyd, yd) || !same(dxd, xd) || ad->mode != CUDNN_ACTIVATION_RELU) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  for (size_t i = 0; i < numel(xd); ++i) {
    if ((rd(y, i) > 0.f) != (rd(x, i) > 0.f)) return CUDNN_STATUS_BAD_PARAM;  // y is not relu(x)
    blend(dx, i, f(alpha), rd(y, i) > 0.f ? rd(dy, i) : 0.f, f(beta));
  }
  return CUDNN_STATUS_SUCCESS;
}

namespace {
// The window of pooled output (oh, ow): its in-bounds input rows and columns.
struct Window {
  int h0, h1, w0, w1;
};
Window window(const cudnnPoolingStruct* p, const cudnnTensorStruct* xd, int oh, int ow) {
  const int h0 = oh * p->sh - p->ph, w0 = ow * p->sw - p->pw;
  return {std::max(h0, 0), std::min(h0 + p->kh, xd->h), std::max(w0, 0), std::min(w0 + p->kw, xd->w)};
}
bool is_max(cudnnPoolingMode_t m) { return m == CUDNN_POOLING_MAX || m == CUDNN_POOLING_MAX_DETERMINISTIC; }
}  // namespace

cudnnStatus_t cudnnPoolingForward(cudnnHandle_t, const cudnnPoolingDescriptor_t p, const void* alpha,
                                  const cudnnTensorDescriptor_t xd, const void* x, const void* beta,
                                  const cudnnTensorDescriptor_t yd, void* y) {
  if (!is_max(p->mode) && p->mode != CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING) return CUDNN_STATUS_NOT_SUPPORTED;
  each(yd, [&](int n, int c, int oh, int ow) {
    const Window wd = window(p, xd, oh, ow);
    double acc = is_max(p->mode) ? -std::numeric_limits<double>::infinity() : 0.0;
    for (int h = wd.h0; h < wd.h1; ++h)
      for (int w = wd.w0; w < wd.w1; ++w) {
        const double v = rd(x, idx(xd, n, c, h, w));
        acc = is_max(p->mode) ? std::max(acc, v) : acc + v;
      }
    if (!is_max(p->mode)) acc /= (wd.h1 - wd.h0) * (wd.w1 - wd.w0);
    blend(y, idx(yd, n, c, oh, ow), f(alpha), acc, f(beta));
  });
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnPoolingBackward(cudnnHandle_t, const cudnnPoolingDescriptor_t p, const void* alpha,
                                   const cudnnTensorDescriptor_t yd, const void* y,
                                   const cudnnTensorDescriptor_t dyd, const void* dy,
                                   const cudnnTensorDescriptor_t xd, const void* x, const void* beta,
                                   const cudnnTensorDescriptor_t dxd, void* dx) {
  if (!same(yd, dyd) || !same(xd, dxd)) return CUDNN_STATUS_BAD_PARAM;
  std::vector<double> acc(numel(xd), 0.0);
  each(yd, [&](int n, int c, int oh, int ow) {
    const Window wd = window(p, xd, oh, ow);
    const double g = rd(dy, idx(yd, n, c, oh, ow));
    if (is_max(p->mode)) {  // to the first element equal to the window's max, in scan order
      const float m = rd(y, idx(yd, n, c, oh, ow));
      for (int h = wd.h0; h < wd.h1; ++h)
        for (int w = wd.w0; w < wd.w1; ++w) {
          if (rd(x, idx(xd, n, c, h, w)) == m) {
            acc[idx(xd, n, c, h, w)] += g;
            return;
          }
        }
      return;
    }
    const double share = g / ((wd.h1 - wd.h0) * (wd.w1 - wd.w0));
    for (int h = wd.h0; h < wd.h1; ++h)
      for (int w = wd.w0; w < wd.w1; ++w) acc[idx(xd, n, c, h, w)] += share;
  });
  for (size_t i = 0; i < acc.size(); ++i) blend(dx, i, f(alpha), acc[i], f(beta));
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSoftmaxForward(cudnnHandle_t, cudnnSoftmaxAlgorithm_t algo, cudnnSoftmaxMode_t mode,
                                  const void* alpha, const cudnnTensorDescriptor_t xd, const void* x,
                                  const void* beta, const cudnnTensorDescriptor_t yd, void* y) {
  if (algo != CUDNN_SOFTMAX_LOG || mode != CUDNN_SOFTMAX_MODE_INSTANCE || !same(xd, yd)) {
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  const size_t row = numel(xd) / static_cast<size_t>(xd->n);
  for (int n = 0; n < xd->n; ++n) {
    const size_t base = static_cast<size_t>(n) * row;
    double mx = -std::numeric_limits<double>::infinity(), sum = 0;
    for (size_t i = 0; i < row; ++i) mx = std::max(mx, static_cast<double>(rd(x, base + i)));
    for (size_t i = 0; i < row; ++i) sum += std::exp(rd(x, base + i) - mx);
    for (size_t i = 0; i < row; ++i) blend(y, base + i, f(alpha), rd(x, base + i) - mx - std::log(sum), f(beta));
  }
  return CUDNN_STATUS_SUCCESS;
}

// ---- cuDNN: batch normalization (SPATIAL: per channel over N, H, W) ------------------------

namespace {
bool bn_desc_ok(const cudnnTensorStruct* bn, const cudnnTensorStruct* x) {
  return bn->n == 1 && bn->c == x->c && bn->h == 1 && bn->w == 1;
}
}  // namespace

cudnnStatus_t cudnnBatchNormalizationForwardTraining(
    cudnnHandle_t, cudnnBatchNormMode_t mode, const void* alpha, const void* beta, const cudnnTensorDescriptor_t xd,
    const void* x, const cudnnTensorDescriptor_t yd, void* y, const cudnnTensorDescriptor_t bnd, const void* scale,
    const void* bias, double factor, void* running_mean, void* running_var, double eps, void* save_mean,
    void* save_inv_var) {
  if (mode != CUDNN_BATCHNORM_SPATIAL || !same(xd, yd) || !bn_desc_ok(bnd, xd)) return CUDNN_STATUS_BAD_PARAM;
  const double m = static_cast<double>(xd->n) * xd->h * xd->w;
  for (int c = 0; c < xd->c; ++c) {
    double sum = 0, sq = 0;
    for (int n = 0; n < xd->n; ++n)
      for (int h = 0; h < xd->h; ++h)
        for (int w = 0; w < xd->w; ++w) sum += rd(x, idx(xd, n, c, h, w));
    const double mean = sum / m;
    for (int n = 0; n < xd->n; ++n)
      for (int h = 0; h < xd->h; ++h)
        for (int w = 0; w < xd->w; ++w) sq += std::pow(rd(x, idx(xd, n, c, h, w)) - mean, 2);
    const double var = sq / m, inv = 1.0 / std::sqrt(var + eps);
    for (int n = 0; n < xd->n; ++n)
      for (int h = 0; h < xd->h; ++h)
        for (int w = 0; w < xd->w; ++w) {
          const size_t i = idx(xd, n, c, h, w);
          blend(y, i, f(alpha), rd(scale, c) * (rd(x, i) - mean) * inv + rd(bias, c), f(beta));
        }
    // Running statistics: the unbiased variance, as torch keeps it.
    at(running_mean, c) = static_cast<float>((1 - factor) * rd(running_mean, c) + factor * mean);
    at(running_var, c) = static_cast<float>((1 - factor) * rd(running_var, c) + factor * var * m / (m - 1));
    if (save_mean) at(save_mean, c) = static_cast<float>(mean);
    if (save_inv_var) at(save_inv_var, c) = static_cast<float>(inv);
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBatchNormalizationForwardInference(cudnnHandle_t, cudnnBatchNormMode_t mode, const void* alpha,
                                                      const void* beta, const cudnnTensorDescriptor_t xd,
                                                      const void* x, const cudnnTensorDescriptor_t yd, void* y,
                                                      const cudnnTensorDescriptor_t bnd, const void* scale,
                                                      const void* bias, const void* mean, const void* var,
                                                      double eps) {
  if (mode != CUDNN_BATCHNORM_SPATIAL || !same(xd, yd) || !bn_desc_ok(bnd, xd)) return CUDNN_STATUS_BAD_PARAM;
  each(xd, [&](int n, int c, int h, int w) {
    const size_t i = idx(xd, n, c, h, w);
    const double inv = 1.0 / std::sqrt(static_cast<double>(rd(var, c)) + eps);
    blend(y, i, f(alpha), rd(scale, c) * (rd(x, i) - rd(mean, c)) * inv + rd(bias, c), f(beta));
  });
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBatchNormalizationBackward(cudnnHandle_t, cudnnBatchNormMode_t mode, const void* alpha_data,
                                              const void* beta_data, const void* alpha_param, const void* beta_param,
                                              const cudnnTensorDescriptor_t xd, const void* x,
                                              const cudnnTensorDescriptor_t dyd, const void* dy,
                                              const cudnnTensorDescriptor_t dxd, void* dx,
                                              const cudnnTensorDescriptor_t bnd, const void* scale, void* dscale,
                                              void* dbias, double, const void* save_mean, const void* save_inv_var) {
  if (mode != CUDNN_BATCHNORM_SPATIAL || !same(xd, dyd) || !same(xd, dxd) || !bn_desc_ok(bnd, xd) ||
      save_mean == nullptr || save_inv_var == nullptr) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  const double m = static_cast<double>(xd->n) * xd->h * xd->w;
  for (int c = 0; c < xd->c; ++c) {
    const double mean = rd(save_mean, c), inv = rd(save_inv_var, c);
    double sdy = 0, sdyx = 0;
    for (int n = 0; n < xd->n; ++n)
      for (int h = 0; h < xd->h; ++h)
        for (int w = 0; w < xd->w; ++w) {
          const size_t i = idx(xd, n, c, h, w);
          sdy += rd(dy, i);
          sdyx += rd(dy, i) * (rd(x, i) - mean) * inv;
        }
    for (int n = 0; n < xd->n; ++n)
      for (int h = 0; h < xd->h; ++h)
        for (int w = 0; w < xd->w; ++w) {
          const size_t i = idx(xd, n, c, h, w);
          const double xhat = (rd(x, i) - mean) * inv;
          blend(dx, i, f(alpha_data), rd(scale, c) * inv / m * (m * rd(dy, i) - sdy - xhat * sdyx), f(beta_data));
        }
    blend(dscale, static_cast<size_t>(c), f(alpha_param), sdyx, f(beta_param));
    blend(dbias, static_cast<size_t>(c), f(alpha_param), sdy, f(beta_param));
  }
  return CUDNN_STATUS_SUCCESS;
}
