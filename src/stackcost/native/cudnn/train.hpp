// `stackcost_cudnn train key=value ...`: the training loop of native/README.md "Training",
// on the network of train_net.hpp. Not yet run on a GPU.
#pragma once

#include "common/protocol.hpp"

namespace stackcost::cudnn {

// Runs every epoch and prints the one-line JSON answer; throws on bad input, and first of
// all (before reading any file) where there is no CUDA device.
int train(const Args& args);

}  // namespace stackcost::cudnn
