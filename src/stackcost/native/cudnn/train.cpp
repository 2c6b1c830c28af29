// `stackcost_cudnn train key=value ...` (native/README.md "Training"): the whole loop in the
// program, on CUDA device 0, fp32. Keys: those of stackcost_onednn's train (weights,
// train_data, test_data, family (+ block, depths), arch, num_classes, in_channels, conv_bias,
// resolution, threads, batch, epochs, optimizer (sgd|adam), lr, momentum, schedule
// (constant|cosine), max_steps, divergence_factor, optional final_weights=PATH, dropout=on|off,
// seed) plus device=cuda. Same answer. Written and compiled without a GPU: not yet run on one.
//
// A step: gather the batch on the host and copy it to the device (loader), then new dropout
// masks, forward in train mode (BatchNorm with batch statistics, running statistics updated
// by cuDNN in the same call), log_softmax on the device copied back, mean cross-entropy and
// its gradient in a plain loop (double) on the host, the gradient copied to the device,
// backward, SGD or Adam (optimizer.cu), and a stream synchronization before the clock is
// read. The first step also builds the network (descriptors, every buffer, each
// convolution's algorithms chosen and launched once): that is cold_ns. Evaluation runs the
// same network in eval mode (BatchNorm with the running statistics, no dropout) on the
// test set in batches of `batch`, a partial last batch padded with zeros and its padding
// ignored (rows are independent in eval mode).
//
// Agreement with eager (the train table's `loss Δ eager`, report/frames/train.py): step 1
// within 1e-4 relative, steps 2-3 within 5e-2. Step 1 is one forward of the same weights on
// the same batch: only fp32 rounding differs (cuDNN's algorithms sum in their own order; FMA
// math, no TF32 anywhere), ~1e-6. Later steps add updates from gradients that differ by
// more: backward-filter/data algorithms with atomics (ALGO_0, ALGO_3: non-deterministic
// order), max pooling's choice between tied maxima, and a ReLU input within rounding of
// zero landing on the other side (native/README.md, oneDNN training) each move a gradient
// element by far more than rounding, and 5e-2 is the tolerance every level gets for that.
// Models with dropout are not compared (each framework draws its own masks); `dropout=off`
// compares them step by step against an eager model with p = 0.
#include "train.hpp"

#include "common/train_data.hpp"
#include "common/train_loop.hpp"
#include "common/train_networks.hpp"
#include "cuda_util.hpp"
#include "host_tensors.hpp"
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

namespace stackcost::cudnn {
namespace {

// Mean (train) or summed (eval) cross-entropy from rows of log-probabilities (cuDNN's
// log_softmax of the logits); `grad` (when given) gets d(mean loss)/d(logits) =
// (softmax - onehot) / rows, softmax = exp(log-probabilities), in double. Correct: argmax
// (first max) == label, the logits' argmax.
BatchLoss cross_entropy(const float* logp, float* grad, const int64_t* labels, int64_t rows,
                         int64_t classes) {
  BatchLoss out;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logp + r * classes;
    const int64_t arg = predicted_class(row, classes);
    out.correct += arg == labels[r] ? 1 : 0;
    out.loss_sum -= static_cast<double>(row[labels[r]]);
    if (grad != nullptr) {
      for (int64_t c = 0; c < classes; ++c) {
        const double p = std::exp(static_cast<double>(row[c]));
        grad[r * classes + c] = static_cast<float>((p - (c == labels[r] ? 1.0 : 0.0)) / rows);
      }
    }
  }
  return out;
}

}  // namespace

int train(const Args& args) {
  require_device();  // before anything else: one clear line on a machine without a GPU
  const auto device = arg_or(args, "device", "cuda");
  if (device != "cuda") throw std::runtime_error("stackcost_cudnn trains on device=cuda only, not " + device);
  const TrainConfig cfg = parse_train_config(args, "cudnn");
  const int threads = cfg.threads;  // recorded: one host thread
  const Family& family = cfg.family;
  const std::string& arch = family.arch;
  const int64_t classes = cfg.classes, channels = cfg.channels, resolution = cfg.resolution;
  const int64_t batch = cfg.batch, epochs = cfg.epochs;
  const bool resnet = family.resnet();

  const DeviceStart dev = start_device();

  DeviceMemory mem;
  // fp32 training: the prescribed precision in every phase, no TF32.
  const Handles h(mem, CUBLAS_PEDANTIC_MATH);
  const int64_t used_handles = device_used_bytes();
  const int64_t baseline_rss = vm_bytes("VmRSS:");

  Weights weights(read_tensors(arg(args, "weights")));
  const TrainSets sets = read_train_sets(args, cfg, read_tensors);
  const Split &train_set = sets.train, &test_set = sets.test;
  const int64_t steps_per_epoch = sets.steps_per_epoch, chw = sets.chw;
  const float dropout_p = cfg.dropout == "on" ? 0.5f : 0.f;

  Context ctx{mem, h.dnn, h.blas, h.stream};
  State state(ctx, weights);
  std::vector<float> input(static_cast<size_t>(batch * chw), 0.f), eval_input(input.size(), 0.f);
  std::vector<int64_t> labels(static_cast<size_t>(batch));
  std::vector<float> grad(static_cast<size_t>(batch * classes), 0.f);
  std::unique_ptr<Net> net;
  const auto build = [&] {
    net = std::make_unique<Net>(ctx, state);
    const Act x = net->input(static_cast<int>(batch), static_cast<int>(channels), static_cast<int>(resolution),
                             static_cast<int>(resolution));
    if (resnet) {
      build_train_resnet(*net, x, family, classes, cfg.conv_bias);
    } else {
      build_train_mnist(*net, x, classes, cfg.conv_bias, dropout_p);
    }
    weights.check_all_used();
    SC_CHECK(cudaDeviceSynchronize());
  };
  std::mt19937 rng(cfg.seed);

  int64_t used_built = -1;
  TrainLog log(cfg);
  for (int64_t epoch = 1; epoch <= epochs; ++epoch) {
    EpochRecord rec;
    rec.epoch = epoch;
    rec.copied = true;
    rec.copy_bytes_per_batch = static_cast<int64_t>(input.size() * sizeof(float));  // images; labels stay on the host
    const auto t_epoch = Clock::now();
    for (int64_t i = 0; i < steps_per_epoch; ++i) {
      const auto t0 = Clock::now();
      gather_batch(train_set, epoch, i, batch, chw, input.data(), labels.data());
      const auto t1 = Clock::now();
      int64_t build_ns = 0;
      if (!net) {  // the cold step: descriptors, buffers and algorithms are made here
        build();
        build_ns = ns_between(t1, Clock::now());
        used_built = device_used_bytes();
      }
      const auto t2 = Clock::now();
      ctx.upload(net->input_data(), input.data(), input.size());  // the loader's copy, waited for
      const auto t3 = Clock::now();
      const double lr_t = cfg.lr_at(log.step(), sets.total_steps);
      net->fill_masks(rng);
      net->forward(true);
      const BatchLoss l = cross_entropy(net->log_probs().data(), grad.data(), labels.data(), batch, classes);
      net->backward(grad);
      if (cfg.optimizer == "adam") {
        state.adam(lr_t);
      } else {
        state.sgd(static_cast<float>(lr_t), static_cast<float>(cfg.momentum));
      }
      SC_CHECK(cudaStreamSynchronize(h.stream));  // the step is done when the device is
      const auto t4 = Clock::now();

      rec.loader_ns += ns_between(t0, t1) + ns_between(t2, t3);
      rec.copy_ns += ns_between(t2, t3);
      if (!log.step_done(rec, i, build_ns + ns_between(t3, t4), l, batch)) break;
    }
    if (!log.epoch_trained(rec, t_epoch, steps_per_epoch)) break;

    const auto t_eval = Clock::now();
    for (int64_t start = 0; start < test_set.n; start += batch) {
      const int64_t rows = std::min(batch, test_set.n - start);
      fill_eval_batch(test_set, start, rows, chw, eval_input);
      ctx.upload(net->input_data(), eval_input.data(), eval_input.size());
      net->forward(false);
      const BatchLoss l = cross_entropy(net->log_probs().data(), nullptr, test_set.labels.data() + start, rows,
                                      classes);
      rec.eval_loss_sum += l.loss_sum;
      rec.eval_correct += l.correct;
    }
    if (!log.epoch_evaluated(rec, t_eval, test_set.n)) break;
  }
  const int64_t used_after = device_used_bytes();

  if (!cfg.final_weights.empty()) write_host_tensors(cfg.final_weights, state.export_plain());

  std::ostringstream by_kind;
  for (const auto& [kind, bytes] : mem.by_kind()) {
    by_kind << (by_kind.tellp() > 0 ? "," : "") << json_string(kind) << ":" << bytes;
  }
  std::ostringstream js;
  log.write_answer_head(js, baseline_rss);
  js << ",\"details\":{\"arch\":" << json_string(arch) << "," << device_json(dev)
     << ",\"math\":\"fp32\",\"conv_math_type\":" << json_string(math_name(CUDNN_FMA_MATH))
     << ",\"cublas_math\":" << json_string(cublas_math_name(CUBLAS_PEDANTIC_MATH))
     << ",\"layout\":\"NCHW\",\"algo_choice\":\"heuristic\""
     << ",\"algo_heuristic\":\"cudnnGetConvolution{Forward,BackwardFilter,BackwardData}Algorithm_v7, "
        "first FMA entry that runs\""
     << ",\"bn_folded\":false,\"bn_mode\":\"CUDNN_BATCHNORM_SPATIAL\""
     << ",\"bn_train\":\"cudnnBatchNormalizationForwardTraining (batch statistics; running statistics "
        "updated in the call, factor 0.1) and cudnnBatchNormalizationBackward\""
     << ",\"eval_bn\":\"cudnnBatchNormalizationForwardInference (running statistics)\""
     << ",\"max_pool_mode\":\"CUDNN_POOLING_MAX_DETERMINISTIC\""
     << ",\"optimizer\":" << json_string(cfg.optimizer) << ",\"optimizer_impl\":"
     << json_string(std::string("own CUDA kernel (optimizer.cu), torch's foreach order, one launch per tensor"))
     << ",\"schedule\":" << json_string(cfg.schedule) << ",\"lr\":" << json_number(cfg.lr)
     << ",\"momentum\":" << json_number(cfg.momentum)
     << ",\"dropout\":" << json_string(resnet ? "none in the model" : cfg.dropout)
     << ",\"seed\":" << cfg.seed << ",\"steps_per_epoch\":" << steps_per_epoch
     << ",\"parameters\":" << state.param_count();
  if (net) {
    js << ",\"forward_launches\":" << net->forward_launches() << ",\"backward_launches\":" << net->backward_launches()
       << ",\"convs\":" << net->convs_json();
  }
  js << ",\"conv_workspace_bytes\":" << ctx.workspace_bytes << ",\"device_alloc_peak_bytes\":" << mem.peak()
     << ",\"device_alloc_bytes\":{" << by_kind.str() << "}"
     << ",\"device_total_bytes\":" << dev.total_bytes
     << ",\"device_used_context_bytes\":" << dev.used_context_bytes
     << ",\"device_used_handles_bytes\":" << used_handles << ",\"device_used_built_bytes\":" << used_built
     << ",\"device_used_after_bytes\":" << used_after
     << ",\"device_used_method\":\"cudaMemGetInfo (total - free, whole device): after the context, after the "
        "library handles, after building the network, after the last epoch\""
     << ",\"loader\":\"gather on the host, then a pageable host-to-device copy, waited for\""
     << ",\"eval_partial_batch\":\"padded with zeros to the batch size\""
     << ",\"loss\":\"cudnnSoftmaxForward (LOG) on the device, copied back; cross-entropy and its gradient in a "
        "plain loop (double), the gradient copied to the device\""
     << ",\"sync\":\"cudaStreamSynchronize at the end of every step, before the clock is read\""
     << ",\"host_threads\":1,\"threads_requested\":" << threads
     << ",\"clock\":\"std::chrono::steady_clock\"}}";
  std::cout << js.str() << std::endl;
  return 0;
}

}  // namespace stackcost::cudnn
