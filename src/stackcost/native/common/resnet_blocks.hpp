// The residual blocks of a torchvision-layout ResNet (stackcost/zoo/resnet.py), in order:
// the one walk over a family's depths that every program's network builds from, each a
// block its own way: oneDNN's inference network (BatchNorm folded, sum fused) and training
// network (BatchNorm explicit), cuDNN's inference network (BatchNorm folded, residual fused).
#pragma once

#include "common/protocol.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace stackcost {

constexpr int64_t kResNetStem = 64;  // conv1's output channels, the first stage's width

struct ResBlock {
  std::string prefix;  // its state_dict prefix: "layer2.0."
  int64_t width;       // the inner convolutions' channels: 64 << stage
  int64_t cout;        // its output channels: width, or 4 x width for a bottleneck
  int64_t stride;      // 2 on the first block of every stage but the first (v1.5: on the 3x3)
  bool project;        // the shortcut is a 1x1 conv + BN ("downsample"): the shape changes
};

inline std::vector<ResBlock> resnet_blocks(const Family& family) {
  std::vector<ResBlock> blocks;
  int64_t cin = kResNetStem;
  for (size_t i = 0; i < family.depths.size(); ++i) {
    const int64_t width = kResNetStem << i;
    for (int64_t j = 0; j < family.depths[i]; ++j) {
      const int64_t stride = (i > 0 && j == 0) ? 2 : 1;
      const int64_t cout = width * (family.bottleneck() ? 4 : 1);
      const std::string prefix = "layer" + std::to_string(i + 1) + "." + std::to_string(j) + ".";
      blocks.push_back({prefix, width, cout, stride, stride != 1 || cin != cout});
      cin = cout;
    }
  }
  return blocks;
}

}  // namespace stackcost
