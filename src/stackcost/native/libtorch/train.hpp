// `stackcost_libtorch train key=value ...`: the whole training loop in the program, no
// Python between steps (native/README.md "Training" is the contract). Everything that
// must match the eager level exactly (initial weights, float images, each epoch's order)
// comes from Python's files; the loop mirrors stackcost.train.worker step for step.
#pragma once

#include <torch/torch.h>

#include "common/protocol.hpp"
#include "model.hpp"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace stackcost::lt {

// ---- keys -----------------------------------------------------------------------------

struct TrainConfig {
  int64_t batch, epochs, max_steps;
  std::string optimizer, schedule;
  double lr, momentum, divergence_factor;
  bool dropout;
};

inline std::string one_of(const Args& args, const std::string& key, const std::string& fallback,
                          std::initializer_list<const char*> choices) {
  const auto value = arg_or(args, key, fallback);
  std::string known;
  for (const char* c : choices) {
    if (value == c) return value;
    known += known.empty() ? c : std::string("|") + c;
  }
  throw std::runtime_error(key + " must be " + known + ", not " + value);
}

inline TrainConfig parse_train_config(const Args& args) {
  TrainConfig c{number_arg<int64_t>(args, "batch"),
                number_arg<int64_t>(args, "epochs"),
                args.count("max_steps") ? number_arg<int64_t>(args, "max_steps") : 0,
                one_of(args, "optimizer", "sgd", {"sgd", "adam"}),
                one_of(args, "schedule", "constant", {"constant", "cosine"}),
                number_arg<double>(args, "lr"),
                args.count("momentum") ? number_arg<double>(args, "momentum") : 0.0,
                args.count("divergence_factor") ? number_arg<double>(args, "divergence_factor")
                                                : 1e3,
                one_of(args, "dropout", "on", {"on", "off"}) == "on"};
  if (c.batch < 1) throw std::runtime_error("batch must be at least 1");
  if (c.epochs < 1) throw std::runtime_error("epochs must be at least 1");
  if (c.max_steps < 0) throw std::runtime_error("max_steps must be 0 (all) or more");
  if (!std::isfinite(c.lr) || c.lr < 0) throw std::runtime_error("lr must be finite and >= 0");
  return c;
}

// ---- data -----------------------------------------------------------------------------

struct Split {
  torch::Tensor images;  // [N, C, H, W] float32, host memory
  torch::Tensor labels;  // [N] int64
  int64_t size() const { return labels.size(0); }
};

// A data file's tensors by name: exactly `names`, as for weights (a file written for
// another layout must not half-work).
inline std::map<std::string, torch::Tensor> read_exactly(const Args& args, const std::string& key,
                                                         std::initializer_list<const char*> names) {
  std::map<std::string, torch::Tensor> in;
  for (auto& [name, tensor] : read_tensors(arg(args, key))) in[name] = tensor;
  std::map<std::string, torch::Tensor> out;
  for (const char* name : names) {
    const auto it = in.find(name);
    if (it == in.end()) throw std::runtime_error(key + " has no tensor " + name);
    out[name] = it->second;
    in.erase(it);
  }
  if (!in.empty()) throw std::runtime_error(key + " has an unexpected tensor " + in.begin()->first);
  return out;
}

inline std::string shape_text(torch::IntArrayRef sizes) {
  std::ostringstream s;
  s << sizes;
  return s.str();
}

// Indices stored as float (SCW1 has one dtype), as int64 once each is checked to be an
// integer in [0, limit): index_select would otherwise fail with a multi-line ATen error
// and cross_entropy could read out of bounds.
inline torch::Tensor checked_indices(const torch::Tensor& t, int64_t limit, const std::string& what,
                                     const std::string& noun) {
  // NaN fails `t == round(t)`, so it is caught here too.
  const auto invalid = (t < 0).logical_or(t >= limit).logical_or(t != t.round());
  const auto where = invalid.nonzero();
  if (where.size(0) > 0) {
    std::ostringstream msg;
    msg << what;
    std::vector<at::indexing::TensorIndex> at;
    for (int64_t d = 0; d < where.size(1); ++d) {
      const auto i = where[0][d].item<int64_t>();
      msg << "[" << i << "]";
      at.emplace_back(i);
    }
    msg << " = " << t.index(at).item<float>() << " is not " << noun << " in [0, " << limit << ")";
    throw std::runtime_error(msg.str());
  }
  return t.to(torch::kLong);
}

struct DataShape {
  int64_t channels, resolution, classes;
};

inline Split load_split(const std::string& key, const std::map<std::string, torch::Tensor>& file,
                        const DataShape& shape) {
  const auto& images = file.at("images");
  const auto& labels = file.at("labels");
  const auto r = shape.resolution;
  if (images.dim() != 4 || images.size(1) != shape.channels || images.size(2) != r ||
      images.size(3) != r) {
    throw std::runtime_error(key + " images has shape " + shape_text(images.sizes()) +
                             ", expected [N, " + std::to_string(shape.channels) + ", " +
                             std::to_string(r) + ", " + std::to_string(r) + "]");
  }
  if (labels.dim() != 1 || labels.size(0) != images.size(0)) {
    throw std::runtime_error(key + " labels has shape " + shape_text(labels.sizes()) +
                             ", expected [" + std::to_string(images.size(0)) + "]");
  }
  return {images, checked_indices(labels, shape.classes, key + " labels", "a class index")};
}

inline torch::Tensor load_orders(const torch::Tensor& order, int64_t epochs, int64_t n) {
  if (order.dim() != 2 || order.size(0) != epochs || order.size(1) != n) {
    throw std::runtime_error("train_data order has shape " + shape_text(order.sizes()) +
                             ", expected [" + std::to_string(epochs) + ", " + std::to_string(n) +
                             "] (epochs, training samples)");
  }
  return checked_indices(order, n, "train_data order", "a sample index");
}

// ---- the loop -------------------------------------------------------------------------

struct EpochRecord {
  int64_t epoch = 0;
  bool complete = false;  // ran all its steps (not diverged, not cut by max_steps)
  int64_t steps = 0, train_samples = 0, train_correct = 0;
  double train_loss_sum = 0;
  int64_t train_ns = 0, loader_ns = 0, step_ns = 0;
  int64_t eval_samples = 0, eval_correct = 0;
  double eval_loss_sum = 0;
  int64_t eval_ns = 0;
};

inline int64_t ns_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count();
}

inline std::unique_ptr<torch::optim::Optimizer> make_optimizer(
    const TrainConfig& cfg, const std::vector<torch::Tensor>& params) {
  if (cfg.optimizer == "adam") {  // torch's defaults: betas (0.9, 0.999), eps 1e-8
    return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(cfg.lr));
  }
  // No dampening, no weight decay, no Nesterov: buf = grad, then momentum * buf + grad.
  return std::make_unique<torch::optim::SGD>(
      params, torch::optim::SGDOptions(cfg.lr).momentum(cfg.momentum));
}

class Trainer {
 public:
  Trainer(const Net& net, const TrainConfig& cfg, torch::Device device, int64_t steps_per_epoch)
      : net_(net),
        cfg_(cfg),
        device_(device),
        steps_per_epoch_(steps_per_epoch),
        total_steps_(cfg.epochs * steps_per_epoch),
        optimizer_(make_optimizer(cfg, net.module->parameters())) {}

  // One epoch's steps in `order`; false when the run stops here (diverged or max_steps).
  bool train_epoch(const Split& data, const torch::Tensor& order, EpochRecord& rec) {
    const int64_t b = cfg_.batch;
    const auto start = Clock::now();
    for (int64_t i = 0; i < steps_per_epoch_; ++i) {
      set_lr(lr_at(step_));
      const auto t0 = Clock::now();
      const auto idx = order.slice(0, i * b, (i + 1) * b);
      // Gathered in host memory as the Python loader does, then copied: both are loader wait.
      const auto x = data.images.index_select(0, idx).to(device_);
      const auto y = data.labels.index_select(0, idx).to(device_);
      synchronize(device_);
      const auto t1 = Clock::now();
      optimizer_->zero_grad();  // set_to_none, as the Python step
      const auto logits = net_.forward(x);
      const auto loss = torch::nn::functional::cross_entropy(logits, y);
      loss.backward();
      optimizer_->step();
      synchronize(device_);
      const auto t2 = Clock::now();

      // Read back only after the clock: .item() would otherwise wait inside the step.
      const int64_t step_ns = ns_between(t1, t2);
      rec.loader_ns += ns_between(t0, t1);
      rec.step_ns += step_ns;
      if (cold_ns < 0) {
        cold_ns = step_ns;  // allocations and primitive creation: its own number
      } else {
        samples_ns.push_back(step_ns);
      }
      const float value = loss.item<float>();
      {
        torch::NoGradGuard no_grad;
        rec.train_correct += logits.argmax(1).eq(y).sum().item<int64_t>();
      }
      losses.push_back(value);
      rec.train_loss_sum += value;
      rec.train_samples += b;
      ++rec.steps;
      ++step_;
      if (!reference_) reference_ = value;
      diverged = divergence(value, rec.epoch, i + 1);
      if (!diverged.empty() || out_of_steps()) break;
    }
    rec.train_ns = ns_between(start, Clock::now());
    rec.complete = diverged.empty() && rec.steps == steps_per_epoch_;
    if (rec.epoch == 1 && diverged.empty()) reference_ = rec.train_loss_sum / rec.steps;
    return diverged.empty() && !out_of_steps();
  }

  // The test split in order, in batches of `batch` (the last partial one included), eval
  // mode: BN uses its running statistics, dropout is off.
  void evaluate(const Split& data, EpochRecord& rec) {
    const auto start = Clock::now();
    const int64_t n = data.size();
    net_.module->eval();
    {
      torch::NoGradGuard no_grad;
      const auto sum = torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum);
      for (int64_t lo = 0; lo < n; lo += cfg_.batch) {
        const int64_t hi = std::min(n, lo + cfg_.batch);
        const auto x = data.images.slice(0, lo, hi).to(device_);
        const auto y = data.labels.slice(0, lo, hi).to(device_);
        const auto logits = net_.forward(x);
        rec.eval_loss_sum += torch::nn::functional::cross_entropy(logits, y, sum).item<double>();
        rec.eval_correct += logits.argmax(1).eq(y).sum().item<int64_t>();
      }
    }
    net_.module->train();
    rec.eval_samples = n;
    rec.eval_ns = ns_between(start, Clock::now());
  }

  int64_t cold_ns = -1;
  std::vector<int64_t> samples_ns;
  std::vector<float> losses;
  std::string diverged;  // why the run stopped early, "" if it did not diverge

 private:
  // CosineAnnealingLR stepped once per step, in closed form (torch's recursive form
  // agrees to rounding).
  double lr_at(int64_t t) const {
    if (cfg_.schedule == "constant") return cfg_.lr;
    const double pi = std::acos(-1.0);
    const double total = static_cast<double>(std::max<int64_t>(total_steps_, 1));
    return cfg_.lr * (1 + std::cos(pi * static_cast<double>(t) / total)) / 2;
  }

  bool out_of_steps() const { return cfg_.max_steps > 0 && step_ >= cfg_.max_steps; }

  // OptimizerOptions::set_lr is virtual: no cast to SGDOptions/AdamOptions needed.
  void set_lr(double lr) {
    for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
  }

  // The Python worker's rule and wording: a non-finite loss, or one above factor x the
  // reference (the first step's loss during epoch 1, then epoch 1's mean).
  std::string divergence(double value, int64_t epoch, int64_t step) const {
    char text[160];
    if (!std::isfinite(value)) {
      std::snprintf(text, sizeof text, "loss %s at epoch %lld step %lld",
                    std::isnan(value) ? "nan" : (value > 0 ? "inf" : "-inf"),
                    static_cast<long long>(epoch), static_cast<long long>(step));
      return text;
    }
    if (value > cfg_.divergence_factor * *reference_) {
      std::snprintf(text, sizeof text, "loss %.3g > %g x %.3g at epoch %lld step %lld", value,
                    cfg_.divergence_factor, *reference_, static_cast<long long>(epoch),
                    static_cast<long long>(step));
      return text;
    }
    return "";
  }

  Net net_;
  TrainConfig cfg_;
  torch::Device device_;
  int64_t steps_per_epoch_, total_steps_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  int64_t step_ = 0;  // global, 0-based: the schedule's t
  std::optional<double> reference_;
};

// ---- the answer -----------------------------------------------------------------------

// One JSON object, fields in the order they are added.
class JsonObject {
 public:
  JsonObject& integer(const std::string& key, int64_t v) { return raw(key, std::to_string(v)); }
  JsonObject& boolean(const std::string& key, bool v) { return raw(key, v ? "true" : "false"); }
  JsonObject& text(const std::string& key, const std::string& v) { return raw(key, json_string(v)); }
  JsonObject& number(const std::string& key, double v) { return raw(key, json_number(v)); }
  JsonObject& raw(const std::string& key, const std::string& json) {
    body_ += (body_.empty() ? "" : ",") + json_string(key) + ":" + json;
    return *this;
  }
  std::string str() const { return "{" + body_ + "}"; }

  // 17 digits: a float32 loss read back by Python is the same double float(loss) gives.
  // Non-finite values as Python's json module spells them (it reads them back).
  static std::string json_number(double v) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
    std::ostringstream s;
    s.precision(17);
    s << v;
    return s.str();
  }

 private:
  std::string body_;
};

template <typename T, typename ToJson>
std::string json_array(const std::vector<T>& items, ToJson to_json) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? "," : "") + to_json(items[i]);
  return out + "]";
}

inline std::string epoch_json(const EpochRecord& e) {
  return JsonObject()
      .integer("epoch", e.epoch)
      .boolean("complete", e.complete)
      .integer("steps", e.steps)
      .integer("train_samples", e.train_samples)
      .number("train_loss_sum", e.train_loss_sum)
      .integer("train_correct", e.train_correct)
      .integer("train_ns", e.train_ns)
      .integer("loader_ns", e.loader_ns)
      .integer("step_ns", e.step_ns)
      .integer("eval_samples", e.eval_samples)
      .integer("eval_correct", e.eval_correct)
      .number("eval_loss_sum", e.eval_loss_sum)
      .integer("eval_ns", e.eval_ns)
      .str();
}

// ---- the command ----------------------------------------------------------------------

inline int train(const Args& args) {
  at::set_num_threads(static_cast<int>(number_arg<int64_t>(args, "threads")));
  const int64_t baseline_rss = vm_bytes("VmRSS:");  // libtorch loaded, no model yet
  const torch::Device device = device_arg(args);
  const TrainConfig cfg = parse_train_config(args);
  // Dropout masks come from torch's default generator: seeded, so a run is reproducible.
  const auto seed = static_cast<uint64_t>(std::stoull(arg_or(args, "seed", "0")));
  torch::manual_seed(seed);

  const Net net = make_net(args, cfg.dropout);
  load_state(*net.module, arg(args, "weights"));
  const DataShape shape{number_arg<int64_t>(args, "in_channels"),
                        number_arg<int64_t>(args, "resolution"),
                        number_arg<int64_t>(args, "num_classes")};
  const auto train_file = read_exactly(args, "train_data", {"images", "labels", "order"});
  const Split train_split = load_split("train_data", train_file, shape);
  const Split test_split =
      load_split("test_data", read_exactly(args, "test_data", {"images", "labels"}), shape);
  const auto orders = load_orders(train_file.at("order"), cfg.epochs, train_split.size());
  if (cfg.batch > train_split.size()) {
    throw std::runtime_error("batch " + std::to_string(cfg.batch) + " is larger than the " +
                             std::to_string(train_split.size()) + " training samples");
  }
  const int64_t steps_per_epoch = train_split.size() / cfg.batch;  // last partial batch dropped

  net.module->to(device);
  net.module->train();
  Trainer trainer(net, cfg, device, steps_per_epoch);
  std::vector<EpochRecord> records;
  for (int64_t epoch = 1; epoch <= cfg.epochs; ++epoch) {
    EpochRecord& rec = records.emplace_back();
    rec.epoch = epoch;
    const bool more = trainer.train_epoch(train_split, orders[epoch - 1], rec);
    if (trainer.diverged.empty()) trainer.evaluate(test_split, rec);  // as Python: not after
    if (!more) break;
  }

  const auto final_weights = arg_or(args, "final_weights", "");
  if (!final_weights.empty()) write_tensors(final_weights, state_dict(*net.module));

  const bool has_dropout = net.family == "mnist-cnn";
  const auto details = JsonObject()
                           .text("kind", "nn")
                           .text("arch", net.arch)
                           .text("libtorch", TORCH_VERSION)
                           .integer("torch_threads", at::get_num_threads())
                           .integer("torch_interop_threads", at::get_num_interop_threads())
                           .text("grad_mode", "autograd")
                           .text("device", device.str())
                           .text("optimizer", cfg.optimizer)
                           .text("lr_schedule", cfg.schedule)
                           .text("dropout", has_dropout ? (cfg.dropout ? "on" : "off") : "none")
                           .integer("seed", static_cast<int64_t>(seed))
                           .integer("steps_per_epoch", steps_per_epoch)
                           .text("loss", "torch::nn::functional::cross_entropy, mean")
                           .text("clock", "std::chrono::steady_clock");
  auto answer = JsonObject()
                    .integer("cold_ns", trainer.cold_ns)
                    .raw("samples_ns", json_array(trainer.samples_ns,
                                                  [](int64_t v) { return std::to_string(v); }))
                    .raw("losses", json_array(trainer.losses, JsonObject::json_number))
                    .text("diverged", trainer.diverged)
                    .raw("epochs", json_array(records, epoch_json))
                    .integer("peak_rss_bytes", vm_bytes("VmHWM:"))
                    .integer("baseline_rss_bytes", baseline_rss)
                    .raw("details", details.str());
  std::cout << answer.str() << std::endl;
  return 0;
}

}  // namespace stackcost::lt
