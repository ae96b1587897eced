#pragma once
// Offline tools on a saved checkpoint directory (no process group, no model): what fsdpp-ckpt
// runs.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace fsdpp::state {

// A readable summary: format, world size it was saved on, every tensor with shape, dtype and
// the files holding it, the optimizer, and trainer_state.json when present. With `verify`, it
// first checks every piece (parameters, optimizer state, buffers) against its checksum and its
// row coverage, as verify_checkpoint, and says so in the summary.
std::string describe_checkpoint(const std::filesystem::path& dir, bool verify = true);

// Reads every piece of every tensor the index lists (parameters, optimizer state, buffers),
// checks its checksum, its shape and that the pieces of each tensor cover every row exactly
// once. Throws CheckpointError naming the file and the tensor of the first problem; returns the
// number of pieces verified. A LOCAL checkpoint's pieces are checked one by one (they hold
// padded shards, not rows of the tensor).
int64_t verify_checkpoint(const std::filesystem::path& dir);

// Writes every model parameter and buffer at full size, with its model name, into one
// safetensors file (atomically), verifying each piece's checksum and that the pieces cover
// every row exactly once. Reads SHARDED and FULL checkpoints; LOCAL ones hold padded shards
// tied to their world size and are refused (load them on that world size and save SHARDED).
// An existing `out` is refused unless `overwrite`; an `out` inside `dir` always is
// (check_output_path). Returns the number of tensors written.
int64_t consolidate_checkpoint(const std::filesystem::path& dir, const std::filesystem::path& out,
                               bool overwrite = false);

// The same tensors as consolidate_checkpoint, in memory (parameters in index order, then
// buffers), for converters such as the Hugging Face export. A directory with a bare
// model.safetensors and no index.json is read as it is.
std::vector<std::pair<std::string, at::Tensor>> read_full_model(const std::filesystem::path& dir);

// Writes a FULL checkpoint (model.safetensors, index.json with checksums, no optimizer state)
// from unsharded tensors, atomically (AtomicDir), plus `extra_files` (name -> contents). It
// loads with load_state_dict on any number of ranks. Names that are model buffers must be listed
// in `buffer_names` (they go to the index's "buffers" section).
void write_full_checkpoint(const std::filesystem::path& dir,
                           const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                           const std::vector<std::string>& buffer_names = {},
                           const std::map<std::string, std::string>& extra_files = {});

struct ReshardResult {
  int64_t tensors = 0;  // parameters and optimizer states rewritten
  int64_t files = 0;    // shard files written
};

// Rewrites a SHARDED (or FULL) checkpoint into the SHARDED layout of `world_size` ranks under
// FULL_SHARD: shard-<k>.safetensors holds rows [k*c, min(dim0, (k+1)*c)) of every parameter and
// optimizer state, c = ceil(dim0 / world_size), so that each rank of such a job reads only its
// own file. Buffers go to buffers.safetensors; other files (trainer_state.json, ...) are copied.
// Every piece read is checksum-verified; the output is written atomically with new checksums,
// one tensor at full size in memory at a time. Errors (CheckpointError): world_size outside
// [1, kMaxReshardWorldSize], `in` not an fsdpp checkpoint, a LOCAL checkpoint, `out` existing
// (unless `overwrite`: then it is replaced atomically), `out` inside `in` or the reverse
// (always; check_output_path).
ReshardResult reshard_checkpoint(const std::filesystem::path& in, const std::filesystem::path& out,
                                 int64_t world_size, bool overwrite = false);

// The largest world size reshard_checkpoint writes for. A fixed cap rather than the rows of
// the largest tensor: ranks beyond those rows are legal (they hold no rows, as FSDP pads), but
// nothing trains on more ranks than this, and every rank costs a file slot per tensor.
inline constexpr int64_t kMaxReshardWorldSize = 65536;

}  // namespace fsdpp::state
