// The zoo's networks for training, from cuDNN 9's legacy API and cuBLAS (fp32, NCHW): a
// forward pass in train mode (BatchNorm with batch statistics) or eval mode (BatchNorm with
// the running statistics, no dropout), and its backward pass. Not yet run on a GPU.
//
// Every tensor is dense NCHW float, torch's layout, so parameters, gradients and optimizer
// state need no reorders and final_weights is a plain copy back. Each layer enqueues its
// forward calls now and leaves a closure that enqueues its backward calls; finish() runs
// the closures in reverse, so the backward list is the forward list reversed and every
// gradient is complete before its producer reads it. Where two paths meet (a block's input
// feeds its first conv and its shortcut) the first backward call writes the gradient with
// beta = 0 and later ones accumulate with beta = 1 (cuDNN's and cuBLAS's own blending).
#pragma once

#include "common/protocol.hpp"
#include "cuda_util.hpp"
#include "host_tensors.hpp"

#include <functional>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace stackcost::cudnn {

// The device, its library handles and the one convolution workspace every call shares
// (they run one after another on one stream). The handles belong to the caller.
struct Context {
  DeviceMemory& mem;
  cudnnHandle_t dnn = nullptr;
  cublasHandle_t blas = nullptr;
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;

  void reserve_workspace(size_t bytes);  // grows it (after a device synchronization)
  void upload(float* dst, const float* src, size_t count);  // on the stream, waited for
};

// A trainable tensor on the device: value, gradient and the optimizer's buffers, all NCHW.
struct Param {
  std::string name;
  size_t count = 0;
  float* value = nullptr;
  float* grad = nullptr;  // overwritten by every backward pass (beta = 0)
  float* buf = nullptr;   // SGD momentum or Adam's exp_avg, allocated on the first step
  float* buf2 = nullptr;  // Adam's exp_avg_sq, allocated on its first step
  bool has_buf = false;   // torch: buf = grad on the first step
};

// A BatchNorm's buffers. cudnnBatchNormalizationForwardTraining updates the running
// statistics itself (factor 0.1 = torch's momentum, the variance unbiased) and saves the
// batch mean and inverse standard deviation for the backward pass.
struct BnStats {
  std::string prefix;
  int channels = 0;
  float* running_mean = nullptr;
  float* running_var = nullptr;
  float* save_mean = nullptr;
  float* save_inv_var = nullptr;
  float num_batches_tracked = 0;  // on the host: torch counts forwards in train mode
};

// Every tensor of the state_dict, in the order the model takes them (torch's order).
class State {
 public:
  State(Context& ctx, Weights& weights) : ctx_(ctx), weights_(weights) {}

  Param& create(const std::string& name, const std::vector<int64_t>& dims);
  BnStats& create_bn(const std::string& prefix, int channels);

  // torch.optim.SGD / Adam (optimizer.hpp), enqueued on the stream, one launch per tensor.
  void sgd(float lr, float momentum);
  void adam(double lr);
  HostTensors export_plain() const;  // the state_dict, copied back (synchronously)
  size_t param_count() const { return params_.size(); }

 private:
  struct Entry {
    std::string name;
    std::vector<int64_t> dims;
    const float* device;  // null for num_batches_tracked, which `bn` holds on the host
    const BnStats* bn;
  };
  float* load(const std::string& name, const std::vector<int64_t>& dims);

  Context& ctx_;
  Weights& weights_;
  int64_t adam_steps_ = 0;
  std::vector<std::unique_ptr<Param>> params_;
  std::vector<std::unique_ptr<BnStats>> bns_;
  std::vector<Entry> entries_;
};

struct Act {  // an activation on the device, dense NCHW float
  int id = -1;
  float* data = nullptr;
  int n = 0, c = 0, h = 0, w = 0;
  bool needs_grad = true;  // false for the input batch
  size_t numel() const { return static_cast<size_t>(n) * c * h * w; }
};

// One algorithm choice: cuDNN's heuristic list (the _v7 query, no benchmarking), the first
// entry with status success, FMA math (no tensor-op entry: fp32 without TF32) and a call
// that accepts it (each is launched once at build, on the still-zero buffers).
struct AlgoChoice {
  std::string algo;
  size_t workspace_bytes = 0;
  int heuristic_rank = -1;
  int rejected = 0;
  bool deterministic = false;
};

struct ConvRecord {
  std::string name;
  AlgoChoice fwd, bwd_filter, bwd_data;
  bool has_bwd_data = false;  // none for the first conv: the input needs no gradient
};

class Net {
 public:
  Net(Context& ctx, State& state);
  ~Net();
  Net(const Net&) = delete;
  Net& operator=(const Net&) = delete;

  Act input(int n, int c, int h, int w);
  Act conv(const std::string& name, const Act& x, int cout, int k, int stride, int pad, bool bias);
  Act batch_norm(const std::string& prefix, const Act& x);
  Act relu(const Act& x);
  Act max_pool(const Act& x, int k, int stride, int pad);
  Act global_avg_pool(const Act& x);
  Act add(const Act& a, const Act& b);
  Act linear(const std::string& name, const Act& x, int out);
  // Dropout (channel: Dropout2d, one draw per sample and channel): multiply by a mask of 0
  // or 1/(1-p) drawn on the host; the identity (a copy) in eval mode, nothing when p == 0.
  Act dropout(const Act& x, float p, bool channel);
  // The network's output [N, classes]; builds the backward pass.
  void finish(const Act& logits);

  float* input_data() const { return input_.data; }
  size_t input_count() const { return input_.numel(); }
  void fill_masks(std::mt19937& rng);  // new dropout masks, uploaded for the next forward
  void forward(bool train);            // enqueued
  // log_softmax of the logits (cudnnSoftmaxForward, LOG), copied to the host: waits.
  const std::vector<float>& log_probs();
  // The loss's gradient [N, classes] uploaded, then the backward pass enqueued.
  void backward(const std::vector<float>& logits_grad);

  size_t forward_launches() const { return fwd_.size(); }
  size_t backward_launches() const { return bwd_.size(); }
  std::string convs_json() const;

 private:
  struct Conv;
  struct Mask {
    float* device;
    std::vector<float> host;
    float p;
  };

  Act new_act(int n, int c, int h, int w);
  cudnnTensorDescriptor_t desc(int n, int c, int h, int w);
  cudnnTensorDescriptor_t desc(const Act& a) { return desc(a.n, a.c, a.h, a.w); }
  Act pool(const Act& x, cudnnPoolingMode_t mode, int kh, int kw, int stride, int pad);
  const float* grad_of(const Act& y) const;
  std::pair<float*, const float*> sink(const Act& x);  // x's gradient buffer and the beta to write it
  void pass_diff(const Act& x, float* d, bool alias);
  void choose_forward(Conv& L);
  void choose_backward(Conv& L, const float* dy, float* dx, const float* beta_dx);

  Context& ctx_;
  State& state_;
  ActivationDesc relu_;
  OpTensorDesc add_, mul_;
  std::vector<std::function<void(bool train)>> fwd_;
  std::vector<std::function<void()>> bwd_;
  std::vector<std::function<void()>> builders_;  // run in reverse by finish()
  std::vector<float*> diff_;                     // by Act::id: its gradient's buffer
  std::vector<bool> written_;                    // at build time: a later writer accumulates
  std::vector<std::unique_ptr<TensorDesc>> descs_;
  std::vector<std::unique_ptr<PoolDesc>> pools_;
  std::vector<std::unique_ptr<Conv>> convs_;
  std::vector<Mask> masks_;
  std::vector<BnStats*> bns_;
  Act input_, logits_;
  float* log_probs_ = nullptr;
  float* logits_grad_ = nullptr;
  cudnnTensorDescriptor_t logits_desc_ = nullptr;
  std::vector<float> log_probs_host_;
};

}  // namespace stackcost::cudnn
