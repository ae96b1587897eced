// fsdpp-ckpt: look into and convert fsdpp checkpoints without starting a job.
//   fsdpp-ckpt inspect DIR
//   fsdpp-ckpt consolidate DIR OUT.safetensors   (every parameter and buffer at full size)
#include <cstdio>
#include <string>

#include "fsdpp/common/error.h"
#include "fsdpp/state/consolidate.h"

namespace {
int usage() {
  std::fprintf(stderr,
               "usage: fsdpp-ckpt inspect DIR\n"
               "       fsdpp-ckpt consolidate DIR OUT.safetensors\n"
               "DIR is a checkpoint saved by fsdpp (fsdpp::state::save_state_dict or fsdpp-train's\n"
               "checkpoint-<step>); consolidate writes one safetensors file that Python's\n"
               "safetensors and Hugging Face tools read.\n");
  return 2;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string cmd = argv[1];
  try {
    if (cmd == "inspect" && argc == 3) {
      std::fputs(fsdpp::state::describe_checkpoint(argv[2]).c_str(), stdout);
      return 0;
    }
    if (cmd == "consolidate" && argc == 4) {
      const auto n = fsdpp::state::consolidate_checkpoint(argv[2], argv[3]);
      std::printf("wrote %lld tensors to %s\n", static_cast<long long>(n), argv[3]);
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return usage();
}
