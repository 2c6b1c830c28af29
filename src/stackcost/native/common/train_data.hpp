// The training and test sets as `train` reads them (native/README.md "Training"): SCW1
// `images` [N, C, H, W], `labels` [N] and, for training, `order` [epochs, N] (each epoch's
// shuffle, the Python worker's torch.randperm), class indices and positions stored as
// float; and the batches a program's loop takes from them on the host.
#pragma once

#include "common/host_tensors.hpp"
#include "common/protocol.hpp"
#include "common/train_loop.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace stackcost {

// A class index stored as float: an integer in [0, bound), else an error naming it.
inline int64_t index_in(float v, int64_t bound, const std::string& what, size_t at) {
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

// `tensors`: the file `label` names (train_data, test_data); epochs = 0 reads no order.
inline Split read_split(HostTensors tensors, const std::string& label, int64_t channels,
                        int64_t resolution, int64_t classes, int64_t epochs) {
  Weights file(std::move(tensors), label);
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

// What `train` reads besides the weights: the sets train_data= and test_data= name,
// through the program's SCW1 reader `read` (path -> HostTensors), checked against the
// config, and the loop's sizes.
struct TrainSets {
  Split train, test;
  int64_t steps_per_epoch = 0;  // N // batch: the last partial batch is dropped, as in Python
  int64_t total_steps = 0;      // the cosine schedule's T
  int64_t chw = 0;              // floats per image
};

template <typename Read>
TrainSets read_train_sets(const Args& args, const TrainConfig& cfg, Read read) {
  TrainSets s;
  s.train = read_split(read(arg(args, "train_data")), "train_data", cfg.channels, cfg.resolution,
                       cfg.classes, cfg.epochs);
  s.test = read_split(read(arg(args, "test_data")), "test_data", cfg.channels, cfg.resolution,
                      cfg.classes, 0);
  if (cfg.batch > s.train.n) {
    throw std::runtime_error("batch " + std::to_string(cfg.batch) + " exceeds the " +
                             std::to_string(s.train.n) + " training samples");
  }
  s.steps_per_epoch = s.train.n / cfg.batch;
  s.total_steps = cfg.epochs * s.steps_per_epoch;
  s.chw = cfg.channels * cfg.resolution * cfg.resolution;
  return s;
}

// Training batch `i` of `epoch` (1-based): the rows its shuffle names, images (`chw` floats
// each) into `input` and labels into `labels`.
inline void gather_batch(const Split& s, int64_t epoch, int64_t i, int64_t batch, int64_t chw,
                         float* input, int64_t* labels) {
  const int64_t* order = s.order.data() + (epoch - 1) * s.n;
  for (int64_t r = 0; r < batch; ++r) {
    const int64_t idx = order[i * batch + r];
    std::memcpy(input + r * chw, s.images.data.data() + idx * chw,
                static_cast<size_t>(chw) * sizeof(float));
    labels[r] = s.labels[static_cast<size_t>(idx)];
  }
}

// Test rows [start, start + rows) in order into `input`, the rest of the batch zeros: a
// partial last batch is padded, and the program ignores the padding rows' outputs.
inline void fill_eval_batch(const Split& s, int64_t start, int64_t rows, int64_t chw,
                            std::vector<float>& input) {
  std::memcpy(input.data(), s.images.data.data() + start * chw,
              static_cast<size_t>(rows * chw) * sizeof(float));
  std::fill(input.begin() + rows * chw, input.end(), 0.f);
}

}  // namespace stackcost
