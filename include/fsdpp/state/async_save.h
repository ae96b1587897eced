#pragma once
// Saving a state dict while training goes on.
//
//   fsdpp::state::AsyncSaver saver(world->group(), world->store());
//   ...
//   saver.save("ckpt/step-100", *model, &opt, so);   // copies the state, returns; files follow
//   ... train ...
//   saver.save("ckpt/step-200", *model, &opt, so);   // waits for step-100 first
//   saver.wait();                                    // before exit: the last one is in place
//
// save() is collective over `group` and runs on the training thread: it waits for the save in
// flight, then takes a snapshot of what this rank must write (SHARDED and LOCAL: copies of its
// own pieces in CPU memory; FULL: rank 0 keeps the full gathered parameters and optimizer state
// in CPU memory, gathered unit by unit with the units' collectives) and starts a writer thread.
// The writer thread issues no collective: it writes this rank's files into the checkpoint's
// temporary directory and reports through the rendezvous store (its own client, a clone of
// `store`). Rank 0's writer waits until every rank has reported, writes index.json and the
// extra files, fsyncs and renames the directory into place (AtomicDir), and then runs
// `on_committed`; the other ranks' writers wait for rank 0's verdict. So the directory appears
// whole, with every rank's files, or not at all, exactly as with save_state_dict.
//
// Errors: a failed write (on any rank) is not thrown by the writer thread; the next save() or
// wait() throws fsdpp::CheckpointError on every rank, naming the checkpoint directory.
// Every wait on the store has a timeout (the store's own, World's FSDPP_TIMEOUT_S); a rank that
// never reports makes the save fail with an error naming it.

#include <torch/nn/module.h>

#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Store.hpp>  // the store AsyncSaver takes, copied by its users

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fsdpp/state/state_dict.h"


namespace fsdpp::state {

class AsyncSaver {
 public:
  // `group` as for save_state_dict (nullptr: a single process; `store` may then be null too).
  // `timeout`: how long a writer waits for the other ranks; 0: the store's timeout.
  AsyncSaver(std::shared_ptr<dist::ProcessGroup> group, c10::intrusive_ptr<c10d::Store> store,
             std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  // Joins a writer still running (it finishes its save or times out); never throws. Call wait()
  // first to learn whether that save succeeded.
  ~AsyncSaver();
  AsyncSaver(const AsyncSaver&) = delete;
  AsyncSaver& operator=(const AsyncSaver&) = delete;

  // Collective. wait()s for the save in flight, snapshots the state and starts writing it to
  // `dir`. `on_committed` runs on rank 0's writer thread right after the directory is in place
  // (fsdpp-train deletes checkpoints beyond save_total_limit there); it must not use `group`.
  void save(const std::filesystem::path& dir, torch::nn::Module& root,
            torch::optim::Optimizer* optimizer, const SaveOptions& options = {},
            std::function<void()> on_committed = {});
  // The same for a model held in parts across the ranks (state_dict.h: pipeline stages).
  void save(const std::filesystem::path& dir, const std::vector<torch::nn::Module*>& parts,
            torch::optim::Optimizer* optimizer, const SaveOptions& options = {},
            std::function<void()> on_committed = {});

  // Collective. Blocks until the save in flight (if any) is committed on every rank; throws
  // CheckpointError on every rank when it failed on any: "[state] asynchronous save of '<dir>'
  // failed: <the first error>".
  void wait();

  bool in_flight() const;
  // Of the last save(): how long it held the caller (the snapshot), and how long its writer
  // took (valid after wait()), in milliseconds.
  double last_snapshot_ms() const;
  double last_write_ms() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace fsdpp::state
