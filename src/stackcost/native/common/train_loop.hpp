// The training loop's arguments, rules and answer that every program's `train` shares
// (native/README.md "Training"): the keys it reads, the learning-rate schedule, the
// divergence and max_steps stops as the Python worker applies them, and the answer's
// epochs, losses and timings. A program keeps its own network, loss and clock edges.
#pragma once

#include "common/protocol.hpp"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace stackcost {

inline int64_t ns_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count();
}

// A number as JSON (as Python reads it: NaN and infinities included), in the fewest digits
// that read back as exactly `v` (a float loss arrives in Python as that float's value).
inline std::string json_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  char buf[64];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

inline std::string fmt3(double v) {  // Python's "{:.3g}", as the worker's divergence message
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// The keys of `train` every program reads, checked; a program reads its own (device=) itself.
struct TrainConfig {
  int threads = 0;
  Family family;
  int64_t classes = 0, channels = 0, resolution = 0, batch = 0, epochs = 0;
  bool conv_bias = false;
  std::string optimizer, schedule;  // sgd|adam, constant|cosine
  double lr = 0, momentum = 0;
  int64_t max_steps = 0;  // 0: every epoch
  double divergence_factor = 1000;
  std::string final_weights;  // "": none written
  std::string dropout;        // on|off (mnist-cnn; off makes dropout the identity)
  uint32_t seed = 0;          // the dropout masks' RNG

  // The rate of 0-based global step `step` of `total_steps`: constant, or cosine annealed
  // per step (CosineAnnealingLR).
  double lr_at(int64_t step, int64_t total_steps) const {
    constexpr double kPi = 3.14159265358979323846;
    return schedule == "cosine" ? lr * (1 + std::cos(kPi * static_cast<double>(step) /
                                                     static_cast<double>(total_steps))) / 2
                                : lr;
  }
};

inline TrainConfig parse_train_config(const Args& args, const std::string& program) {
  TrainConfig c;
  c.threads = static_cast<int>(std::stoll(arg(args, "threads")));
  c.family = parse_family(args, program);
  c.classes = std::stoll(arg(args, "num_classes"));
  c.channels = std::stoll(arg(args, "in_channels"));
  c.conv_bias = std::stoll(arg(args, "conv_bias")) != 0;
  c.resolution = std::stoll(arg(args, "resolution"));
  c.batch = std::stoll(arg(args, "batch"));
  c.epochs = std::stoll(arg(args, "epochs"));
  c.optimizer = arg(args, "optimizer");
  c.lr = std::stod(arg(args, "lr"));
  c.momentum = std::stod(arg(args, "momentum"));
  c.schedule = arg(args, "schedule");
  c.max_steps = std::stoll(arg_or(args, "max_steps", "0"));
  c.divergence_factor = std::stod(arg_or(args, "divergence_factor", "1000"));
  c.final_weights = arg_or(args, "final_weights", "");
  c.dropout = arg_or(args, "dropout", "on");
  c.seed = static_cast<uint32_t>(std::stoul(arg_or(args, "seed", "0")));

  if (c.optimizer != "sgd" && c.optimizer != "adam") {
    throw std::runtime_error("optimizer must be sgd|adam, not " + c.optimizer);
  }
  if (c.schedule != "constant" && c.schedule != "cosine") {
    throw std::runtime_error("unknown schedule " + c.schedule + " (constant or cosine)");
  }
  if (c.dropout != "on" && c.dropout != "off") throw std::runtime_error("dropout must be on or off");
  if (c.epochs < 1 || c.batch < 1 || c.classes < 1) {
    throw std::runtime_error("epochs, batch and num_classes must be positive");
  }
  return c;
}

// A batch's cross-entropy summed over its rows, and how many rows the network got right.
struct BatchLoss {
  double loss_sum = 0;
  int64_t correct = 0;
};

// The class a row of `classes` scores predicts: the first maximum, as torch's argmax.
inline int64_t predicted_class(const float* row, int64_t classes) {
  int64_t arg = 0;
  for (int64_t c = 1; c < classes; ++c) arg = row[c] > row[arg] ? c : arg;
  return arg;
}

// One epoch of the answer. `copied`: the program copies each batch to a device, and the
// epoch answers that copy's time (within loader_ns) and size; others answer without them.
struct EpochRecord {
  int64_t epoch = 0;
  bool complete = false;
  int64_t steps = 0, train_samples = 0, train_correct = 0;
  double train_loss_sum = 0;
  int64_t train_ns = 0, loader_ns = 0, step_ns = 0;
  bool copied = false;
  int64_t copy_ns = 0, copy_bytes_per_batch = 0;
  int64_t eval_samples = 0, eval_correct = 0, eval_ns = 0;
  double eval_loss_sum = 0;
};

inline std::string epoch_json(const EpochRecord& e) {
  std::ostringstream js;
  js << "{\"epoch\":" << e.epoch << ",\"complete\":" << (e.complete ? "true" : "false")
     << ",\"steps\":" << e.steps << ",\"train_samples\":" << e.train_samples
     << ",\"train_loss_sum\":" << json_number(e.train_loss_sum)
     << ",\"train_correct\":" << e.train_correct << ",\"train_ns\":" << e.train_ns
     << ",\"loader_ns\":" << e.loader_ns << ",\"step_ns\":" << e.step_ns;
  if (e.copied) {
    js << ",\"copy_ns\":" << e.copy_ns << ",\"copy_bytes_per_batch\":" << e.copy_bytes_per_batch;
  }
  js << ",\"eval_samples\":" << e.eval_samples << ",\"eval_correct\":" << e.eval_correct
     << ",\"eval_loss_sum\":" << json_number(e.eval_loss_sum) << ",\"eval_ns\":" << e.eval_ns << "}";
  return js.str();
}

// What the loop has done so far, and when it stops: the Python worker's rules. The first
// step is cold (it builds the network); a loss that is not finite, or above
// divergence_factor x the reference (the first step's loss during epoch 1, then epoch 1's
// mean loss), stops training as diverged, and a diverged epoch is not evaluated; max_steps
// stops after that many steps, the epoch it stops in still evaluated.
class TrainLog {
 public:
  explicit TrainLog(const TrainConfig& config)
      : divergence_factor_(config.divergence_factor), max_steps_(config.max_steps) {}

  // After step `i` (0-based within `rec`'s epoch) of `step_ns` on a batch of `batch` rows:
  // true to go on.
  bool step_done(EpochRecord& rec, int64_t i, int64_t step_ns, const BatchLoss& l, int64_t batch) {
    if (cold_ns_ < 0) {
      cold_ns_ = step_ns;
    } else {
      samples_ns_.push_back(step_ns);
    }
    rec.step_ns += step_ns;
    const auto loss = static_cast<float>(l.loss_sum / static_cast<double>(batch));
    losses_.push_back(loss);
    rec.steps += 1;
    rec.train_samples += batch;
    rec.train_correct += l.correct;
    rec.train_loss_sum += loss;
    ++step_;
    if (std::isnan(reference_)) reference_ = loss;
    if (!std::isfinite(loss)) {
      diverged_ = "loss " + json_number(loss) + " at epoch " + std::to_string(rec.epoch) +
                  " step " + std::to_string(i + 1);
    } else if (loss > divergence_factor_ * reference_) {
      diverged_ = "loss " + fmt3(loss) + " > " + fmt3(divergence_factor_) + " x " +
                  fmt3(reference_) + " at epoch " + std::to_string(rec.epoch) + " step " +
                  std::to_string(i + 1);
    }
    return diverged_.empty() && !steps_spent();
  }

  // After an epoch's steps, begun at `start`: true to evaluate it, false (the epoch
  // recorded) when training diverged.
  bool epoch_trained(EpochRecord& rec, Clock::time_point start, int64_t steps_per_epoch) {
    rec.train_ns = ns_between(start, Clock::now());
    rec.complete = diverged_.empty() && rec.steps == steps_per_epoch;
    if (!diverged_.empty()) {
      epochs_.push_back(rec);
      return false;
    }
    if (rec.epoch == 1) reference_ = rec.train_loss_sum / static_cast<double>(rec.steps);
    return true;
  }

  // After the epoch's evaluation of `samples` test rows, begun at `start`: true for the
  // next epoch.
  bool epoch_evaluated(EpochRecord& rec, Clock::time_point start, int64_t samples) {
    rec.eval_samples = samples;
    rec.eval_ns = ns_between(start, Clock::now());
    epochs_.push_back(rec);
    return !steps_spent();
  }

  int64_t step() const { return step_; }  // steps done: the next one's 0-based index

  // The answer up to its details: cold_ns, samples_ns, losses, diverged, epochs and the
  // process's memory; the program goes on with `,"details":{...}}`.
  void write_answer_head(std::ostream& js, int64_t baseline_rss) const {
    js << "{\"cold_ns\":" << cold_ns_ << ",\"samples_ns\":[";
    for (size_t i = 0; i < samples_ns_.size(); ++i) js << (i ? "," : "") << samples_ns_[i];
    js << "],\"losses\":[";
    for (size_t i = 0; i < losses_.size(); ++i) js << (i ? "," : "") << json_number(losses_[i]);
    js << "],\"diverged\":" << json_string(diverged_) << ",\"epochs\":[";
    for (size_t i = 0; i < epochs_.size(); ++i) js << (i ? "," : "") << epoch_json(epochs_[i]);
    js << "],\"peak_rss_bytes\":" << vm_bytes("VmHWM:") << ",\"baseline_rss_bytes\":" << baseline_rss;
  }

 private:
  bool steps_spent() const { return max_steps_ > 0 && step_ >= max_steps_; }

  double divergence_factor_;
  int64_t max_steps_;
  int64_t cold_ns_ = -1;
  std::vector<int64_t> samples_ns_;
  std::vector<float> losses_;
  std::vector<EpochRecord> epochs_;
  std::string diverged_;
  double reference_ = NAN;
  int64_t step_ = 0;  // global
};

}  // namespace stackcost
