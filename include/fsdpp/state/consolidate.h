#pragma once
// Offline tools on a saved checkpoint directory (no process group, no model): what fsdpp-ckpt
// runs.

#include <filesystem>
#include <string>

namespace fsdpp::state {

// A readable summary: format, world size it was saved on, every tensor with shape, dtype and
// the files holding it, the optimizer, and trainer_state.json when present.
std::string describe_checkpoint(const std::filesystem::path& dir);

// Writes every model parameter and buffer at full size, with its model name, into one
// safetensors file (atomically), verifying each piece's checksum and that the pieces cover
// every row exactly once. Reads SHARDED and FULL checkpoints; LOCAL ones hold padded shards
// tied to their world size and are refused (load them on that world size and save SHARDED).
// Returns the number of tensors written.
int64_t consolidate_checkpoint(const std::filesystem::path& dir, const std::filesystem::path& out);

}  // namespace fsdpp::state
