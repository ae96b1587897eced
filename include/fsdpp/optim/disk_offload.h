#pragma once
// Disk offload of optimizer state (ZeRO-Infinity's NVMe offload, for when host memory is the
// limit): the optimizer's per-parameter state (Adam's exp_avg / exp_avg_sq, SGD's momentum
// buffer, ...) lives in a memory-mapped file, and a step updates one parameter at a time, so
// only that parameter's state is in memory while it is updated.
//
//   torch::optim::AdamW opt(model->parameters(), ...);   // after fully_shard: the local shards
//   fsdpp::DiskOffloadOptions o;
//   o.dir = "/nvme/optim";
//   o.rank = world->rank();
//   fsdpp::DiskOffloadedOptimizer offloaded(opt, o);
//   ... loss.backward();
//   offloaded.step();                       // instead of opt.step()
//   offloaded.zero_grad();
//   fsdpp::state::save_state_dict(dir, *model, &offloaded.optimizer(), group);   // unchanged
//
// The results are bit for bit those of opt.step(): LibTorch's optimizers skip parameters
// without a gradient, so step() hides every gradient but one and calls opt.step() once per
// parameter; each parameter's update (and its `step` counter) is the one a full step makes.
// After a parameter's update its state pages leave the process (madvise MADV_DONTNEED on a
// shared file mapping: the data stays in the file and the page cache, and the kernel may
// write it back and evict it like any file data); `drop_page_cache` evicts it at once.
//
// State that LibTorch or a checkpoint load puts in ordinary memory is moved into the file by
// the next step() (or by offload_state()); a tensor counts as being in the file only when its
// storage is one of this wrapper's mappings, so a replaced tensor is always noticed.

#include <torch/optim/optimizer.h>

#include <cstdint>
#include <filesystem>
#include <memory>

#include "fsdpp/common/error.h"
#include "fsdpp/optim/optimizer_state.h"

namespace fsdpp {

// The state file cannot be made, grown or used (the message names the path).
class OffloadError : public Error {
 public:
  using Error::Error;
};

struct DiskOffloadOptions {
  // Where the state file goes; made (with parents) if missing. Every wrapper makes its own file,
  // fsdpp-optim-rank<rank>-XXXXXX, so ranks and runs may share the directory.
  std::filesystem::path dir;
  int rank = 0;  // only in the file's name
  // By default the file is unlinked as soon as it is open, so that nothing is left behind,
  // even by a killed process (the space is freed when the last mapping goes). True keeps it.
  bool keep_file = false;
  // After each parameter's update, write its state back and drop it from the page cache, so
  // that between its updates it takes no host memory at all, page cache included (it is read
  // from the disk every step). Off: the kernel keeps it cached while memory allows.
  bool drop_page_cache = false;
};

class DiskOffloadedOptimizer {
 public:
  // Supports the optimizers of optim::optimizer_kind (torch::optim::AdamW, Adam, SGD, RMSprop
  // and Adagrad) with CPU parameters; throws OffloadError for others, or when the directory
  // cannot hold the file. Does not own `optimizer`, which must outlive this wrapper.
  DiskOffloadedOptimizer(torch::optim::Optimizer& optimizer, DiskOffloadOptions options);
  // The same, owning the optimizer.
  DiskOffloadedOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer,
                         DiskOffloadOptions options);
  // The optimizer's state stays valid: its mappings keep the file alive until it drops them.
  ~DiskOffloadedOptimizer();
  DiskOffloadedOptimizer(const DiskOffloadedOptimizer&) = delete;
  DiskOffloadedOptimizer& operator=(const DiskOffloadedOptimizer&) = delete;

  // optimizer().step(closure), one parameter at a time, with the state in the file. The
  // closure, if any, runs once first (as LibTorch's optimizers run it); returns its loss.
  at::Tensor step(torch::optim::Optimizer::LossClosure closure = nullptr);
  void zero_grad(bool set_to_none = true);

  // The wrapped optimizer: for learning-rate changes, param_groups(), and state dicts.
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  const torch::optim::Optimizer& optimizer() const { return *optimizer_; }

  // Moves every state tensor that is not in the file (after load_state_dict, say) into it and
  // drops all state pages from the process. step() does this per parameter; calling it right
  // after a load frees the loaded state's memory before the first step.
  void offload_state();
  // Drops every state page from the process (after something read the whole state, such as
  // save_state_dict); the data stays in the file.
  void release();

  // Bytes of state in the file (each tensor's size rounded up to whole pages).
  int64_t mapped_bytes() const;
  // Of those, the bytes mapped into this process now (counted in its RSS), from
  // /proc/self/pagemap.
  int64_t resident_bytes() const;
  // Of those, the bytes in the kernel's page cache now (mincore), resident in the process or
  // not.
  int64_t cached_bytes() const;
  // Bytes of state held in ordinary memory, not in the file (what offload_state() would move).
  int64_t unmapped_bytes() const;

  // The state file (already unlinked unless keep_file).
  const std::filesystem::path& file() const;

  struct Arena;  // the file and its free regions, shared with the mappings' deleters

 private:
  void init(DiskOffloadOptions options);

  std::shared_ptr<torch::optim::Optimizer> owned_;
  torch::optim::Optimizer* optimizer_ = nullptr;
  std::shared_ptr<Arena> arena_;
  optim::OptimizerKind kind_ = optim::OptimizerKind::ADAMW;
};

}  // namespace fsdpp
