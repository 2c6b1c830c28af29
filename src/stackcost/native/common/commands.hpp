// The command line of the programs built on host tensors (stackcost_onednn, stackcost_cudnn):
// `echo IN OUT` (an SCW1 file read and written back: the tests' check of the reader),
// `run key=value ...` and `train key=value ...`. Errors are thrown to the program's main,
// which writes its one `error: ...` line (oneDNN's errors add their status there).
#pragma once

#include "common/host_tensors.hpp"
#include "common/protocol.hpp"

#include <functional>
#include <iostream>
#include <string>
#include <vector>

namespace stackcost {

using Command = std::function<int(const Args&)>;

// The exit status: the command's, or 2 with the usage line for words it does not know.
inline int dispatch(int argc, char** argv, const std::string& program, const Command& run,
                    const Command& train) {
  const std::vector<std::string> words(argv + 1, argv + argc);
  if (words.size() == 3 && words[0] == "echo") {
    write_host_tensors(words[2], read_host_tensors(words[1], program));
    return 0;
  }
  if (!words.empty() && words[0] == "run") return run(parse_args(words));
  if (!words.empty() && words[0] == "train") return train(parse_args(words));
  std::cerr << "usage: " << program << " echo IN OUT | run key=value ... | train key=value ...\n";
  return 2;
}

}  // namespace stackcost
