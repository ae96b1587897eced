#pragma once
// Model and optimizer state of a fully_shard'ed model, saved to and loaded from a checkpoint
// directory, on any number of ranks.
//
//   fsdpp::state::SaveOptions so;                       // SHARDED by default
//   fsdpp::state::save_state_dict("ckpt/step-100", *model, &opt, world->group(), so);
//   ...
//   fsdpp::state::load_state_dict("ckpt/step-100", *model, &opt, world->group());
//
// Three layouts (docs/state-dicts.md has the files and the index in full):
//   SHARDED  every rank writes the rows it owns (unpadded) to shard-<rank>.safetensors; rank 0
//            writes index.json (which rows of which tensor are where, with XXH3 checksums) and
//            buffers.safetensors. Loads on any world size: each rank reads just its rows.
//   FULL     gathered unit by unit (one unit's full tensors at a time) and written by rank 0
//            as model.safetensors (parameters and buffers under their unsharded names, which
//            Hugging Face's safetensors reads) and optim.safetensors. Loads on any world size,
//            and a directory holding only a model.safetensors (no index.json) loads too.
//   LOCAL    every rank's raw padded shards, as they are in memory; loads only on the world
//            size (and sharding) it was saved with.
//
// Both functions are collective over `group` (the world's group: every rank that holds part
// of the model; nullptr for a single process) and agree on failure: when one rank fails, every
// rank throws fsdpp::CheckpointError with the first failing rank's message. The directory
// must be on a file system that every rank sees. Saving is atomic (AtomicDir): readers see the
// old directory or the new one, whole. Loading checks everything (names, shapes, checksums of
// every piece a rank reads) before it changes anything, so a failed load leaves the model and
// the optimizer as they were.
//
// Optimizers: those of fsdpp/optim/optimizer_state.h (torch::optim::AdamW, Adam, SGD, RMSprop
// and Adagrad), each with the state tensors listed there and its step. The optimizer must have
// been made on the model's parameters after fully_shard (it then sees the shards). Its options
// (lr, betas, ...) are not saved: they come from the training configuration. Loading creates
// optimizer state where it is absent.
//
// The parameters are read through fsdp's public view (fsdpp/fsdp/sharded_param.h): a parameter
// split along dim 0 over one mesh dim, as fully_shard splits it, is what the format holds.

#include <torch/nn/module.h>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace torch::optim {
class Optimizer;
}

namespace fsdpp::dist {
class ProcessGroup;
}

namespace fsdpp::state {

enum class StateDictType { FULL, SHARDED, LOCAL };
const char* to_string(StateDictType type);

struct SaveOptions {
  StateDictType type = StateDictType::SHARDED;
  // Buffers for which this returns true are not saved (derived ones, such as RoPE tables).
  std::function<bool(const std::string&)> skip_buffer;
  // Small files (name -> contents) that rank 0 writes into the directory before it is
  // committed, so they appear with it or not at all (fsdpp-train's trainer_state.json).
  std::map<std::string, std::string> extra_files;
  // Called before each checkpoint data file (safetensors) a rank writes, with that rank and the
  // file's path, on the thread that writes it (AsyncSaver's writer thread for an asynchronous
  // save); the buffers' file of a SHARDED or LOCAL save is not announced. An exception it throws
  // fails the save as a failed write would: a CheckpointError with its message on every rank.
  // The reliability tests slow or fail writes with it (tests/support/fault_injection.h).
  std::function<void(int rank, const std::string& file)> before_write;
};

struct LoadOptions {
  // Buffers for which this returns true may be missing from the checkpoint (they keep their
  // values); every other buffer of the model must be there.
  std::function<bool(const std::string&)> skip_buffer;
};

// Collective over `group`. `root` is the module given last to fully_shard; `optimizer` may be
// null (then no optimizer state is written).
void save_state_dict(const std::filesystem::path& dir, torch::nn::Module& root,
                     torch::optim::Optimizer* optimizer,
                     const std::shared_ptr<dist::ProcessGroup>& group,
                     const SaveOptions& options = {});

// Collective over `group`. Reads index.json to tell the layout. Errors (CheckpointError, each
// naming what it is about): a parameter or buffer the model has and the checkpoint lacks, one
// the checkpoint has and the model lacks, a shape mismatch, rows missing from the pieces, a
// checksum mismatch (naming file and tensor), a LOCAL checkpoint on another world size or
// sharding, optimizer state for another kind of optimizer. Tensors are converted to the
// parameter's dtype. `optimizer` may be null (optimizer state in the checkpoint is ignored).
void load_state_dict(const std::filesystem::path& dir, torch::nn::Module& root,
                     torch::optim::Optimizer* optimizer,
                     const std::shared_ptr<dist::ProcessGroup>& group,
                     const LoadOptions& options = {});

// A model held in parts across the ranks of `group`: `parts` are this rank's (pipeline stages,
// each the module given last to fully_shard, registering the whole model's parameter names;
// docs/pipeline.md#checkpoints). Ranks may hold different parameters; together they must hold
// the whole model. The checkpoint is the whole model's, as one model would save it: every tensor
// is written once (by the ranks of the part that holds it; FULL: rank 0 writes them all, those
// it does not hold sent by their first holder), and it loads into any layout. A load reads
// only the rows each rank's parts need, and checks names against what all ranks hold together.
// The single-root functions above are these with one part.
void save_state_dict(const std::filesystem::path& dir, const std::vector<torch::nn::Module*>& parts,
                     torch::optim::Optimizer* optimizer,
                     const std::shared_ptr<dist::ProcessGroup>& group,
                     const SaveOptions& options = {});
void load_state_dict(const std::filesystem::path& dir, const std::vector<torch::nn::Module*>& parts,
                     torch::optim::Optimizer* optimizer,
                     const std::shared_ptr<dist::ProcessGroup>& group,
                     const LoadOptions& options = {});

}  // namespace fsdpp::state
