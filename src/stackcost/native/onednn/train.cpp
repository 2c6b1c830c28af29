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

#include "common/train_data.hpp"
#include "common/train_loop.hpp"
#include "common/train_networks.hpp"
#include "onednn_util.hpp"
#include "train_net.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace stackcost::onednn {
namespace {

// Mean (train) or summed (eval) cross-entropy of rows of logits; `grad` (when given) gets
// d(mean loss)/d(logits) = (softmax - onehot) / rows. Correct: argmax (first max) == label.
BatchLoss cross_entropy(const float* z, float* grad, const int64_t* labels, int64_t rows,
                         int64_t classes) {
  BatchLoss out;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = z + r * classes;
    const int64_t arg = predicted_class(row, classes);
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

}  // namespace

int train(const Args& args) {
  const int threads = static_cast<int>(std::stoll(arg(args, "threads")));
  const int omp_threads = set_threads(threads);
  const int64_t baseline_rss = vm_bytes("VmRSS:");

  const TrainConfig cfg = parse_train_config(args, "onednn");
  const Family& family = cfg.family;
  const std::string& arch = family.arch;
  const int64_t classes = cfg.classes, channels = cfg.channels, resolution = cfg.resolution;
  const int64_t batch = cfg.batch, epochs = cfg.epochs;
  const bool resnet = family.resnet();

  Weights weights(read_tensors(arg(args, "weights")));
  const TrainSets sets = read_train_sets(args, cfg, read_tensors);
  const Split &train_set = sets.train, &test_set = sets.test;
  const int64_t steps_per_epoch = sets.steps_per_epoch, chw = sets.chw;
  const memory::dims in_dims{batch, channels, resolution, resolution};
  const float dropout_p = cfg.dropout == "on" ? 0.5f : 0.f;

  Context ctx;
  State state(ctx, weights);
  std::vector<float> input(static_cast<size_t>(batch * chw)), eval_input(input.size(), 0.f);
  std::vector<int64_t> labels(static_cast<size_t>(batch));
  std::unique_ptr<Net> net, eval_net;
  const auto build = [&](Net& n, float* data) {
    const Act x = n.input(in_dims, data);
    if (resnet) {
      build_train_resnet(n, x, family, classes, cfg.conv_bias);
    } else {
      build_train_mnist(n, x, classes, cfg.conv_bias, dropout_p);
    }
  };
  std::mt19937 rng(cfg.seed);

  TrainLog log(cfg);
  for (int64_t epoch = 1; epoch <= epochs; ++epoch) {
    EpochRecord rec;
    rec.epoch = epoch;
    const auto t_epoch = Clock::now();
    for (int64_t i = 0; i < steps_per_epoch; ++i) {
      const auto t0 = Clock::now();
      gather_batch(train_set, epoch, i, batch, chw, input.data(), labels.data());
      const auto t1 = Clock::now();
      if (!net) {  // the cold step: primitives and layouts are made here
        net = std::make_unique<Net>(Mode::train, ctx, state);
        build(*net, input.data());
        weights.check_all_used();
      }
      const double lr_t = cfg.lr_at(log.step(), sets.total_steps);
      net->fill_masks(rng);
      net->forward();
      net->update_running_stats();
      const BatchLoss l = cross_entropy(net->logits(), net->logits_grad(), labels.data(), batch, classes);
      net->backward();
      if (cfg.optimizer == "adam") {
        state.adam(lr_t);
      } else {
        state.sgd(static_cast<float>(lr_t), static_cast<float>(cfg.momentum));
      }
      const auto t2 = Clock::now();

      rec.loader_ns += ns_between(t0, t1);
      if (!log.step_done(rec, i, ns_between(t1, t2), l, batch)) break;
    }
    if (!log.epoch_trained(rec, t_epoch, steps_per_epoch)) break;

    const auto t_eval = Clock::now();
    if (test_set.n > 0 && !eval_net) {
      eval_net = std::make_unique<Net>(Mode::eval, ctx, state);
      build(*eval_net, eval_input.data());
    }
    for (int64_t start = 0; start < test_set.n; start += batch) {
      const int64_t rows = std::min(batch, test_set.n - start);
      fill_eval_batch(test_set, start, rows, chw, eval_input);
      eval_net->forward();
      const BatchLoss l = cross_entropy(eval_net->logits(), nullptr,
                                      test_set.labels.data() + start, rows, classes);
      rec.eval_loss_sum += l.loss_sum;
      rec.eval_correct += l.correct;
    }
    if (!log.epoch_evaluated(rec, t_eval, test_set.n)) break;
  }

  if (!cfg.final_weights.empty()) write_host_tensors(cfg.final_weights, state.export_plain());

  std::ostringstream js;
  log.write_answer_head(js, baseline_rss);
  const auto* version = dnnl::version();
  js << ",\"details\":{\"arch\":" << json_string(arch)
     << ",\"onednn\":" << json_string(version_string())
     << ",\"onednn_cpu_runtime\":" << json_string(runtime_name(version->cpu_runtime))
     << ",\"omp_threads\":" << omp_threads << ",\"optimizer\":" << json_string(cfg.optimizer)
     << ",\"schedule\":" << json_string(cfg.schedule) << ",\"lr\":" << json_number(cfg.lr)
     << ",\"momentum\":" << json_number(cfg.momentum)
     << ",\"dropout\":" << json_string(resnet ? "none in the model" : cfg.dropout)
     << ",\"seed\":" << cfg.seed << ",\"steps_per_epoch\":" << steps_per_epoch
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
