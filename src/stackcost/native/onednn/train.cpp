// `stackcost_onednn train key=value ...` (native/README.md "Training"): the whole loop in
// the program. Keys: weights, train_data, test_data, family (+ block, depths), arch, num_classes, in_channels,
// conv_bias, resolution, threads, batch, epochs, optimizer (sgd|adam), lr, momentum,
// schedule (constant|cosine), max_steps, divergence_factor, and optional final_weights=PATH,
// dropout=on|off (mnist-cnn; off makes dropout the identity), seed (the dropout RNG, 0).
//
// A step: gather the batch (loader), then forward in train mode, BN running stats, mean
// cross-entropy and its gradient (a plain loop in double), backward, SGD or Adam. The
// first step also builds the network (primitive creation, weights reordered into the
// layouts the primitives chose): that is cold_ns. Evaluation runs an eval-mode network
// (BN forward_inference with the running statistics) of the same batch size, built at the
// first evaluation; a partial last batch is padded with zeros and its padding ignored.
#include "train.hpp"

#include "common/train_networks.hpp"
#include "onednn_util.hpp"
#include "train_net.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace stackcost::onednn {
namespace {

std::string opt(const Args& args, const std::string& key, const std::string& fallback) {
  const auto it = args.find(key);
  return it == args.end() ? fallback : it->second;
}

int64_t ns_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count();
}

constexpr double kPi = 3.14159265358979323846;

// A number as JSON (as Python reads it: NaN and infinities included), in the fewest digits
// that read back as exactly `v` (a float loss arrives in Python as that float's value).
std::string num(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  char buf[64];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string fmt3(double v) {  // Python's "{:.3g}"
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// A class index stored as float: an integer in [0, bound), else an error naming it.
int64_t index_in(float v, int64_t bound, const std::string& what, size_t at) {
  if (!(v >= 0.f && v < static_cast<float>(bound)) || v != std::floor(v)) {
    std::ostringstream msg;
    msg << what << " " << v << " at position " << at << " outside [0, " << bound << ")";
    throw std::runtime_error(msg.str());
  }
  return static_cast<int64_t>(v);
}

struct Split {
  HostTensor images;
  std::vector<int64_t> labels;
  std::vector<int64_t> order;  // train only: [epochs, N], row-major
  int64_t n = 0;
};

Split read_split(const std::string& path, const std::string& label, int64_t channels,
                 int64_t resolution, int64_t classes, int64_t epochs) {
  Weights file(read_tensors(path), label);
  Split s;
  HostTensor images = file.take_any("images");
  if (images.dims.size() != 4 || images.dims[1] != channels || images.dims[2] != resolution ||
      images.dims[3] != resolution) {
    throw std::runtime_error(label + " images are " + dims_str(images.dims) + ", expected [N, " +
                             std::to_string(channels) + ", " + std::to_string(resolution) + ", " +
                             std::to_string(resolution) + "]");
  }
  s.n = images.dims[0];
  s.images = std::move(images);
  const HostTensor labels = file.take("labels", {s.n});
  for (size_t i = 0; i < labels.data.size(); ++i) {
    s.labels.push_back(index_in(labels.data[i], classes, label + " label", i));
  }
  if (epochs > 0) {
    const HostTensor order = file.take("order", {epochs, s.n});
    for (size_t i = 0; i < order.data.size(); ++i) {
      s.order.push_back(index_in(order.data[i], s.n, label + " order index", i));
    }
  }
  file.check_all_used();
  return s;
}

// Mean (train) or summed (eval) cross-entropy of rows of logits; `grad` (when given) gets
// d(mean loss)/d(logits) = (softmax - onehot) / rows. Correct: argmax (first max) == label.
struct LossOut {
  double loss_sum = 0;
  int64_t correct = 0;
};

LossOut cross_entropy(const float* z, float* grad, const int64_t* labels, int64_t rows,
                      int64_t classes) {
  LossOut out;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = z + r * classes;
    int64_t arg = 0;
    for (int64_t c = 1; c < classes; ++c) arg = row[c] > row[arg] ? c : arg;
    out.correct += arg == labels[r] ? 1 : 0;
    double sum = 0;
    for (int64_t c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(row[c]) - row[arg]);
    const double lse = row[arg] + std::log(sum);
    out.loss_sum += lse - row[labels[r]];
    if (grad != nullptr) {
      for (int64_t c = 0; c < classes; ++c) {
        const double p = std::exp(static_cast<double>(row[c]) - lse);
        grad[r * classes + c] = static_cast<float>((p - (c == labels[r] ? 1.0 : 0.0)) / rows);
      }
    }
  }
  return out;
}

struct EpochRec {
  int64_t epoch = 0;
  bool complete = false;
  int64_t steps = 0, train_samples = 0, train_correct = 0;
  double train_loss_sum = 0;
  int64_t train_ns = 0, loader_ns = 0, step_ns = 0;
  int64_t eval_samples = 0, eval_correct = 0, eval_ns = 0;
  double eval_loss_sum = 0;
};

std::string epoch_json(const EpochRec& e) {
  std::ostringstream js;
  js << "{\"epoch\":" << e.epoch << ",\"complete\":" << (e.complete ? "true" : "false")
     << ",\"steps\":" << e.steps << ",\"train_samples\":" << e.train_samples
     << ",\"train_loss_sum\":" << num(e.train_loss_sum) << ",\"train_correct\":" << e.train_correct
     << ",\"train_ns\":" << e.train_ns << ",\"loader_ns\":" << e.loader_ns
     << ",\"step_ns\":" << e.step_ns << ",\"eval_samples\":" << e.eval_samples
     << ",\"eval_correct\":" << e.eval_correct << ",\"eval_loss_sum\":" << num(e.eval_loss_sum)
     << ",\"eval_ns\":" << e.eval_ns << "}";
  return js.str();
}

}  // namespace

int train(const Args& args) {
  const int threads = static_cast<int>(std::stoll(arg(args, "threads")));
  const int omp_threads = set_threads(threads);
  const int64_t baseline_rss = vm_bytes("VmRSS:");

  const Family family = parse_family(args, "onednn");
  const std::string& arch = family.arch;
  const int64_t classes = std::stoll(arg(args, "num_classes"));
  const int64_t channels = std::stoll(arg(args, "in_channels"));
  const bool conv_bias = std::stoll(arg(args, "conv_bias")) != 0;
  const int64_t resolution = std::stoll(arg(args, "resolution"));
  const int64_t batch = std::stoll(arg(args, "batch"));
  const int64_t epochs = std::stoll(arg(args, "epochs"));
  const std::string optimizer = arg(args, "optimizer");
  const double lr = std::stod(arg(args, "lr"));
  const double momentum = std::stod(arg(args, "momentum"));
  const std::string schedule = arg(args, "schedule");
  const int64_t max_steps = std::stoll(opt(args, "max_steps", "0"));
  const double divergence_factor = std::stod(opt(args, "divergence_factor", "1000"));
  const std::string final_weights = opt(args, "final_weights", "");
  const std::string dropout = opt(args, "dropout", "on");
  const auto seed = static_cast<uint32_t>(std::stoul(opt(args, "seed", "0")));

  const bool resnet = family.resnet();
  if (optimizer != "sgd" && optimizer != "adam") {
    throw std::runtime_error("optimizer must be sgd|adam, not " + optimizer);
  }
  if (schedule != "constant" && schedule != "cosine") {
    throw std::runtime_error("unknown schedule " + schedule + " (constant or cosine)");
  }
  if (dropout != "on" && dropout != "off") throw std::runtime_error("dropout must be on or off");
  if (epochs < 1 || batch < 1 || classes < 1) {
    throw std::runtime_error("epochs, batch and num_classes must be positive");
  }

  Weights weights(read_tensors(arg(args, "weights")));
  const Split train_set =
      read_split(arg(args, "train_data"), "train_data", channels, resolution, classes, epochs);
  const Split test_set =
      read_split(arg(args, "test_data"), "test_data", channels, resolution, classes, 0);
  if (batch > train_set.n) {
    throw std::runtime_error("batch " + std::to_string(batch) + " exceeds the " +
                             std::to_string(train_set.n) + " training samples");
  }
  const int64_t steps_per_epoch = train_set.n / batch;
  const int64_t total_steps = epochs * steps_per_epoch;
  const int64_t chw = channels * resolution * resolution;
  const memory::dims in_dims{batch, channels, resolution, resolution};
  const float dropout_p = dropout == "on" ? 0.5f : 0.f;

  Context ctx;
  State state(ctx, weights);
  std::vector<float> input(static_cast<size_t>(batch * chw)), eval_input(input.size(), 0.f);
  std::vector<int64_t> labels(static_cast<size_t>(batch));
  std::unique_ptr<Net> net, eval_net;
  const auto build = [&](Net& n, float* data) {
    const Act x = n.input(in_dims, data);
    if (resnet) {
      build_train_resnet(n, x, family, classes, conv_bias);
    } else {
      build_train_mnist(n, x, classes, conv_bias, dropout_p);
    }
  };
  std::mt19937 rng(seed);

  int64_t cold_ns = -1;
  std::vector<int64_t> samples_ns;
  std::vector<float> losses;
  std::vector<EpochRec> records;
  std::string diverged;
  double reference = NAN;
  int64_t step = 0;  // global, 0-based
  for (int64_t epoch = 1; epoch <= epochs; ++epoch) {
    EpochRec rec;
    rec.epoch = epoch;
    const int64_t* order = train_set.order.data() + (epoch - 1) * train_set.n;
    const auto t_epoch = Clock::now();
    for (int64_t i = 0; i < steps_per_epoch; ++i) {
      const auto t0 = Clock::now();
      for (int64_t r = 0; r < batch; ++r) {
        const int64_t idx = order[i * batch + r];
        std::memcpy(input.data() + r * chw, train_set.images.data.data() + idx * chw,
                    static_cast<size_t>(chw) * sizeof(float));
        labels[static_cast<size_t>(r)] = train_set.labels[static_cast<size_t>(idx)];
      }
      const auto t1 = Clock::now();
      if (!net) {  // the cold step: primitives and layouts are made here
        net = std::make_unique<Net>(Mode::train, ctx, state);
        build(*net, input.data());
        weights.check_all_used();
      }
      const double lr_t = schedule == "cosine"
                              ? lr * (1 + std::cos(kPi * static_cast<double>(step) /
                                                   static_cast<double>(total_steps))) / 2
                              : lr;
      net->fill_masks(rng);
      net->forward();
      net->update_running_stats();
      const LossOut l = cross_entropy(net->logits(), net->logits_grad(), labels.data(), batch, classes);
      net->backward();
      if (optimizer == "adam") {
        state.adam(lr_t);
      } else {
        state.sgd(static_cast<float>(lr_t), static_cast<float>(momentum));
      }
      const auto t2 = Clock::now();

      const int64_t step_ns = ns_between(t1, t2);
      if (cold_ns < 0) {
        cold_ns = step_ns;
      } else {
        samples_ns.push_back(step_ns);
      }
      rec.loader_ns += ns_between(t0, t1);
      rec.step_ns += step_ns;
      const auto loss = static_cast<float>(l.loss_sum / static_cast<double>(batch));
      losses.push_back(loss);
      rec.steps += 1;
      rec.train_samples += batch;
      rec.train_correct += l.correct;
      rec.train_loss_sum += loss;
      ++step;
      if (std::isnan(reference)) reference = loss;
      if (!std::isfinite(loss)) {
        diverged = "loss " + num(loss) + " at epoch " + std::to_string(epoch) + " step " +
                   std::to_string(i + 1);
      } else if (loss > divergence_factor * reference) {
        diverged = "loss " + fmt3(loss) + " > " + fmt3(divergence_factor) + " x " +
                   fmt3(reference) + " at epoch " + std::to_string(epoch) + " step " +
                   std::to_string(i + 1);
      }
      if (!diverged.empty() || (max_steps > 0 && step >= max_steps)) break;
    }
    rec.train_ns = ns_between(t_epoch, Clock::now());
    rec.complete = diverged.empty() && rec.steps == steps_per_epoch;
    if (!diverged.empty()) {  // as the Python worker: a diverged epoch is not evaluated
      records.push_back(rec);
      break;
    }
    if (epoch == 1) reference = rec.train_loss_sum / static_cast<double>(rec.steps);

    const auto t_eval = Clock::now();
    if (test_set.n > 0 && !eval_net) {
      eval_net = std::make_unique<Net>(Mode::eval, ctx, state);
      build(*eval_net, eval_input.data());
    }
    for (int64_t start = 0; start < test_set.n; start += batch) {
      const int64_t rows = std::min(batch, test_set.n - start);
      std::memcpy(eval_input.data(), test_set.images.data.data() + start * chw,
                  static_cast<size_t>(rows * chw) * sizeof(float));
      std::fill(eval_input.begin() + rows * chw, eval_input.end(), 0.f);  // padding rows
      eval_net->forward();
      const LossOut l = cross_entropy(eval_net->logits(), nullptr,
                                      test_set.labels.data() + start, rows, classes);
      rec.eval_loss_sum += l.loss_sum;
      rec.eval_correct += l.correct;
    }
    rec.eval_samples = test_set.n;
    rec.eval_ns = ns_between(t_eval, Clock::now());
    records.push_back(rec);
    if (max_steps > 0 && step >= max_steps) break;
  }

  if (!final_weights.empty()) write_host_tensors(final_weights, state.export_plain());

  std::ostringstream js;
  js << "{\"cold_ns\":" << cold_ns << ",\"samples_ns\":[";
  for (size_t i = 0; i < samples_ns.size(); ++i) js << (i ? "," : "") << samples_ns[i];
  js << "],\"losses\":[";
  for (size_t i = 0; i < losses.size(); ++i) js << (i ? "," : "") << num(losses[i]);
  js << "],\"diverged\":" << json_string(diverged) << ",\"epochs\":[";
  for (size_t i = 0; i < records.size(); ++i) js << (i ? "," : "") << epoch_json(records[i]);
  js << "],\"peak_rss_bytes\":" << vm_bytes("VmHWM:") << ",\"baseline_rss_bytes\":" << baseline_rss;
  const auto* version = dnnl::version();
  js << ",\"details\":{\"arch\":" << json_string(arch)
     << ",\"onednn\":" << json_string(version_string())
     << ",\"onednn_cpu_runtime\":" << json_string(runtime_name(version->cpu_runtime))
     << ",\"omp_threads\":" << omp_threads << ",\"optimizer\":" << json_string(optimizer)
     << ",\"schedule\":" << json_string(schedule) << ",\"lr\":" << num(lr)
     << ",\"momentum\":" << num(momentum)
     << ",\"dropout\":" << json_string(resnet ? "none in the model" : dropout)
     << ",\"seed\":" << seed << ",\"steps_per_epoch\":" << steps_per_epoch
     << ",\"parameters\":" << state.param_count();
  if (net) {
    js << ",\"primitives_per_step\":" << net->forward_primitives() + net->backward_primitives()
       << ",\"forward_primitives\":" << net->forward_primitives()
       << ",\"backward_primitives\":" << net->backward_primitives()
       << ",\"reorders_per_step\":" << net->reorders()
       << ",\"weight_reorders_per_step\":" << net->weight_reorders()
       << ",\"first_conv_src_format\":" << json_string(net->first_conv_src())
       << ",\"first_conv_weights_format\":" << json_string(net->first_conv_weights());
  }
  if (eval_net) js << ",\"eval_primitives\":" << eval_net->forward_primitives();
  js << ",\"conv_algorithm\":\"convolution_direct\""
     << ",\"weight_layout\":\"master weights, gradients and momentum in the forward primitive's "
        "layout; final_weights reordered to torch's\""
     << ",\"eval_bn\":\"batch_normalization forward_inference, use_global_stats (running "
        "statistics)\""
     << ",\"eval_partial_batch\":\"padded with zeros to the batch size\""
     << ",\"loss\":\"cross-entropy and its gradient in a plain loop, double\""
     << ",\"clock\":\"std::chrono::steady_clock\"}}";
  std::cout << js.str() << std::endl;
  return 0;
}

}  // namespace stackcost::onednn
