// `stackcost_onednn train key=value ...`: the training loop of native/README.md "Training",
// on the network of train_net.hpp.
#pragma once

#include "common/protocol.hpp"

namespace stackcost::onednn {

// Runs every epoch and prints the one-line JSON answer; throws on bad input.
int train(const Args& args);

}  // namespace stackcost::onednn
