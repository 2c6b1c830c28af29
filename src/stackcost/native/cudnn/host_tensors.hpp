// stackcost_cudnn's SCW1 reader: the host tensors of common/host_tensors.hpp, which `run`
// (folded weights, the input) and `train` (the full state_dict, the training and test
// data) read before anything goes to the device.
#pragma once

#include "common/host_tensors.hpp"

#include <string>

namespace stackcost::cudnn {

inline HostTensors read_tensors(const std::string& path) {
  return read_host_tensors(path, "stackcost_cudnn");
}

}  // namespace stackcost::cudnn
