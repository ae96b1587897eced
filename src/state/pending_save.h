#pragma once
// Private to src/state: a save split in two, for AsyncSaver. begin() (collective, on the
// training thread) copies what this rank must write to CPU memory and opens the checkpoint's
// temporary directory; write_files() (no collective, any thread) writes this rank's files;
// commit() (rank 0, no collective, once every rank's write_files() has returned) writes
// index.json and the extra files and moves the directory into place.

#include <torch/nn/module.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "fsdpp/state/state_dict.h"

namespace fsdpp::state::detail {

class PendingSave {
 public:
  // Collective over `group`, like save_state_dict. FULL gathers every unit and keeps the full
  // tensors (parameters and optimizer state) on rank 0; SHARDED and LOCAL copy each rank's
  // own pieces.
  static std::unique_ptr<PendingSave> begin(const std::filesystem::path& dir, torch::nn::Module& root,
                                            torch::optim::Optimizer* optimizer,
                                            const std::shared_ptr<dist::ProcessGroup>& group,
                                            const SaveOptions& options);
  // Without commit(): rank 0 deletes the temporary directory.
  ~PendingSave();
  PendingSave(const PendingSave&) = delete;
  PendingSave& operator=(const PendingSave&) = delete;

  // Writes this rank's files into the temporary directory (fsynced at commit). Returns this
  // rank's report (what it wrote, with checksums) for rank 0's commit().
  std::string write_files();
  // Rank 0: every rank's report in rank order.
  void commit(const std::vector<std::string>& reports);

  const std::filesystem::path& dir() const;
  // The temporary directory, unique to this save.
  const std::string& tmp() const;
  int rank() const;
  int world_size() const;

  struct Impl;

 private:
  PendingSave();
  std::unique_ptr<Impl> impl_;
};

}  // namespace fsdpp::state::detail
