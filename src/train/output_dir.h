#pragma once
// training.output_dir: checked before anything is written, and held by one job at a time.
//
// Two jobs writing one output directory interleave metrics, overwrite each other's config.yaml
// and checkpoints, and both report success. The lock is flock() on <output_dir>/.fsdpp.lock,
// which the kernel drops when its process exits however it exits, so a crashed or killed job
// never leaves the directory locked. The file also records who holds it, for the message that
// refuses the second job. training.overwrite_output_dir replaces a finished run (as Hugging
// Face's does), never a live one: a held lock is refused whatever it says.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "fsdpp/common/unique_fd.h"

namespace fsdpp::train::detail {

class OutputDirLock {
 public:
  // Creates `dir` if needed and locks it. Throws ConfigError naming the directory when it cannot
  // be made or written (a file in its place, read-only, a name too long), and naming the holder
  // when another live job holds it (`overwrite`, training.overwrite_output_dir, only changes
  // what the message suggests: a live job's files are never shared).
  OutputDirLock(const std::filesystem::path& dir, bool overwrite);

  // Remembers `file` as this run's (config.yaml once written): verify() stops the run when
  // someone else replaces or changes it.
  void watch(const std::filesystem::path& file);

  // Throws Error naming the file when the lock file is no longer the one this run locked
  // (removed, or replaced: another job may have taken the directory) or a watched file was
  // replaced or changed by someone else. The run calls it whenever it writes its metrics.
  void verify() const;

 private:
  struct Watched {
    std::filesystem::path path;
    uint64_t dev = 0, ino = 0;
    int64_t size = 0, mtime_ns = 0;
  };
  std::filesystem::path dir_;
  UniqueFd fd_;
  std::vector<Watched> watched_;
};

// What an earlier run left in an output_dir: its checkpoint-<step> directories (complete or
// not) and the lines of its metrics.jsonl. A new run there would overwrite the checkpoints of the
// same steps, empty metrics.jsonl, and leave later checkpoints that a `latest` resume would take
// for its own; Hugging Face's scripts refuse such a directory unless told to overwrite it or to
// resume from it, and so does fsdpp-train (prepare_output_dir).
struct EarlierRun {
  std::vector<std::filesystem::path> checkpoints;
  int64_t metrics_lines = 0;

  bool empty() const { return checkpoints.empty() && metrics_lines == 0; }
  // "checkpoint-5, checkpoint-10 and metrics.jsonl (10 lines)".
  std::string describe() const;
};
EarlierRun find_earlier_run(const std::filesystem::path& dir);
// Deletes the earlier run's checkpoints and its metrics.jsonl, sample.txt and run.svg
// (training.overwrite_output_dir=true); the cache, config.yaml and the lock stay.
void remove_earlier_run(const std::filesystem::path& dir, const EarlierRun& run);

}  // namespace fsdpp::train::detail
