// The zoo's networks for training, from oneDNN primitives (f32): a forward pass in train
// mode, its backward pass, and an eval-mode forward pass sharing the same parameters.
//
// Layout strategy: every parameter's master value, gradient and momentum buffer live in
// the layout its forward primitive chose (format_tag::any), so SGD is one plain loop over
// three buffers of the same layout. A backward primitive that wants another layout gets a
// reorder, added to the step and counted: weights into backward_data's layout, the
// gradient from backward_weights' layout. final_weights reorders back to torch's layout.
// Activations take the layout their producer chose; a consumer that wants another one
// gets a reorder (counted too).
#pragma once

#include "common/protocol.hpp"
#include "onednn_util.hpp"

#include <functional>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace stackcost::onednn {

struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

// A trainable tensor. `plain` is torch's layout of the same data (the fc weight [out, C*H*W]
// viewed as oihw when its input is 4-D), used to load it and to write it back.
struct Param {
  std::string name;
  memory::desc plain;
  memory value, grad, buf;  // all in value's layout; buf: SGD momentum, or Adam's exp_avg
  memory buf2;              // Adam's exp_avg_sq, allocated on its first step
  bool has_buf = false;     // torch: buf = grad on the first step
};

// A BatchNorm's buffers, plain 1-D; the batch statistics are the train-mode forward's output.
struct BnStats {
  std::string prefix;
  memory running_mean, running_var, num_batches_tracked;  // the last one holds 1 float
  memory batch_mean, batch_var;                           // biased, from forward_training
  int64_t count = 0;                                      // N*H*W of the training batch
};

// Every tensor of the state_dict, in the order the model took them (torch's order).
class State {
 public:
  State(Context& ctx, Weights& weights) : ctx_(ctx), weights_(weights) {}

  // Take `name` (torch shape `dims`) from the weights file, into `layout`.
  Param& create(const std::string& name, const std::vector<int64_t>& dims, const memory::desc& plain,
                const memory::desc& layout);
  Param& param(const std::string& name) const;
  BnStats& create_bn(const std::string& prefix, int64_t channels);
  BnStats& bn(const std::string& prefix) const;

  // torch.optim.SGD: buf = grad (first step) or momentum*buf + grad; p -= lr*buf.
  void sgd(float lr, float momentum);
  // torch.optim.Adam with its defaults (betas 0.9, 0.999, eps 1e-8, no weight decay), in
  // the order and precision of torch's single-tensor CPU path.
  void adam(double lr);
  // The state_dict in torch's names and layouts.
  HostTensors export_plain() const;
  size_t param_count() const { return params_.size(); }

 private:
  struct Entry {
    std::string name;
    std::vector<int64_t> dims;  // torch's shape
    memory mem;                 // where the current value lives
    memory::desc plain;
  };
  memory load(const std::string& name, const std::vector<int64_t>& dims, const memory::desc& plain,
              const memory::desc& layout);

  Context& ctx_;
  Weights& weights_;
  int64_t adam_steps_ = 0;
  std::vector<std::unique_ptr<Param>> params_;
  std::vector<std::unique_ptr<BnStats>> bns_;
  std::unordered_map<std::string, Param*> by_name_;
  std::unordered_map<std::string, BnStats*> bn_by_name_;
  std::vector<Entry> entries_;
};

struct Act {  // an activation: its memory (in the layout its producer chose), logical dims
  int id = -1;
  memory mem;
  memory::dims dims;
  bool needs_grad = true;  // false for the input batch
};

enum class Mode { train, eval };

class Net {
 public:
  // train: creates the parameters (taking them from the weights file); eval: uses them.
  Net(Mode mode, Context& ctx, State& state);

  Act input(const memory::dims& dims, float* data);
  Act conv(const std::string& name, const Act& x, int64_t cout, int64_t k, int64_t stride,
           int64_t pad, bool bias);
  Act batch_norm(const std::string& prefix, const Act& x);
  Act relu(const Act& x);
  Act max_pool(const Act& x, int64_t k, int64_t stride, int64_t pad);
  Act global_avg_pool(const Act& x);
  Act add(const Act& a, const Act& b);
  Act linear(const std::string& name, const Act& x, int64_t out);
  // Dropout (channel: Dropout2d, one draw per sample and channel) as binary_mul by a mask
  // of 0 or 1/(1-p); identity in eval mode or when p == 0.
  Act dropout(const Act& x, float p, bool channel);
  // The network's output: plain [N, classes]; in train mode, builds the backward pass.
  void finish(const Act& logits);

  void fill_masks(std::mt19937& rng);  // new dropout masks for the next forward
  void forward();
  void update_running_stats();  // torch's momentum 0.1, unbiased variance
  void backward();

  const float* logits() const { return static_cast<const float*>(logits_.get_data_handle()); }
  float* logits_grad() { return static_cast<float*>(logits_grad_.get_data_handle()); }

  size_t forward_primitives() const { return fwd_.size(); }
  size_t backward_primitives() const { return bwd_.size(); }
  size_t reorders() const;
  size_t weight_reorders() const { return weight_reorders_; }
  const std::string& first_conv_src() const { return first_conv_src_; }
  const std::string& first_conv_weights() const { return first_conv_weights_; }

 private:
  struct Op {
    dnnl::primitive prim;
    std::unordered_map<int, memory> args;
    bool reorder = false;
  };
  struct Mask {
    memory mem;
    float p;
  };
  struct Diff {
    memory mem;
    bool written = false;  // at build time: a later backward op accumulates into it
  };
  // Where a backward primitive writes x's gradient: x's own diff buffer when it is the
  // first writer and the layouts agree, else a temporary that finish_sink() adds in.
  struct Sink {
    Act x;
    memory mem;
    bool direct;
  };

  bool train() const { return mode_ == Mode::train; }
  template <typename MakePd>
  auto eval_pd(const std::string& name, const MakePd& make_pd, const memory::desc& any)
      -> decltype(make_pd(any));
  Act pool(const Act& x, dnnl::algorithm alg, const memory::dims& kernel,
           const memory::dims& strides, const memory::dims& pads, const memory::dims& odims);
  Act new_act(const memory::desc& md, const memory::dims& dims);
  void add_op(std::vector<Op>& ops, dnnl::primitive p, std::unordered_map<int, memory> args,
              bool reorder = false);
  memory to_layout(const memory& m, const memory::desc& md, std::vector<Op>& ops);
  memory weights_for(const Param& w, const memory::desc& md);
  memory grad_target(const Param& w, const memory::desc& md);
  void grad_finish(const Param& w, const memory& target);
  memory diff_of(const Act& y, const memory::desc& md);
  Sink sink(const Act& x, const memory::desc& md);
  void finish_sink(const Sink& s);
  void pass_diff(const Act& x, const memory& d, bool alias);

  Mode mode_;
  Context& ctx_;
  State& state_;
  std::vector<Op> fwd_, bwd_;
  std::vector<std::function<void()>> backward_builders_;  // run in reverse by finish()
  std::vector<Diff> diffs_;                               // by Act::id
  std::vector<Mask> masks_;
  std::vector<std::pair<memory, memory>> forward_copies_;  // (activation, its reorder)
  std::vector<BnStats*> bns_;
  memory logits_, logits_grad_;
  size_t weight_reorders_ = 0;
  std::string first_conv_src_, first_conv_weights_;
};

}  // namespace stackcost::onednn
