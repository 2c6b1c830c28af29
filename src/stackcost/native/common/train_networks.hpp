// The families the zoo names (stackcost/zoo/resnet.py, mnist_cnn.py) as every program's
// training network builds them: torch's modules in torch's order and names, BatchNorm
// explicit (trained, not folded) and mnist-cnn's dropout. One definition, so the programs
// train the same networks; each supplies its own Net (onednn/train_net.hpp,
// cudnn/train_net.hpp) with conv, batch_norm, relu, max_pool, global_avg_pool, add, linear,
// dropout and finish. Sizes go in as int64_t; a Net taking int narrows them (all far below
// 2^31).
#pragma once

#include "common/protocol.hpp"
#include "common/resnet_blocks.hpp"

#include <cstdint>
#include <string>

namespace stackcost {

template <typename Net, typename Act>
void build_train_resnet(Net& net, Act x, const Family& family, int64_t classes, bool conv_bias) {
  x = net.relu(net.batch_norm("bn1", net.conv("conv1", x, kResNetStem, 7, 2, 3, conv_bias)));
  x = net.max_pool(x, 3, 2, 1);
  for (const ResBlock& b : resnet_blocks(family)) {
    const std::string& p = b.prefix;
    Act y;
    if (family.bottleneck()) {  // v1.5: the stride on the 3x3
      y = net.relu(net.batch_norm(p + "bn1", net.conv(p + "conv1", x, b.width, 1, 1, 0, conv_bias)));
      y = net.relu(net.batch_norm(p + "bn2", net.conv(p + "conv2", y, b.width, 3, b.stride, 1, conv_bias)));
      y = net.batch_norm(p + "bn3", net.conv(p + "conv3", y, b.cout, 1, 1, 0, conv_bias));
    } else {
      y = net.relu(net.batch_norm(p + "bn1", net.conv(p + "conv1", x, b.width, 3, b.stride, 1, conv_bias)));
      y = net.batch_norm(p + "bn2", net.conv(p + "conv2", y, b.cout, 3, 1, 1, conv_bias));
    }
    const Act identity =
        b.project ? net.batch_norm(p + "downsample.1",
                                   net.conv(p + "downsample.0", x, b.cout, 1, b.stride, 0, conv_bias))
                  : x;
    x = net.relu(net.add(y, identity));
  }
  net.finish(net.linear("fc", net.global_avg_pool(x), classes));
}

// torch: relu(max_pool2d(conv1(x), 2)); relu(max_pool2d(conv2_drop(conv2(x)), 2)); flatten;
// fc1_drop(relu(fc1(x))); fc2 -> log_softmax. The loss takes fc2's output: cross-entropy of
// log_softmax(z) equals cross-entropy of z (log_softmax is idempotent).
template <typename Net, typename Act>
void build_train_mnist(Net& net, Act x, int64_t classes, bool conv_bias, float dropout_p) {
  x = net.relu(net.max_pool(net.conv("conv1", x, 10, 5, 1, 0, conv_bias), 2, 2, 0));
  x = net.conv("conv2", x, 20, 5, 1, 0, conv_bias);
  x = net.relu(net.max_pool(net.dropout(x, dropout_p, true), 2, 2, 0));
  x = net.dropout(net.relu(net.linear("fc1", x, 50)), dropout_p, false);
  net.finish(net.linear("fc2", x, classes));
}

}  // namespace stackcost
