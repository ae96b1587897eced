#pragma once
// training.output_dir: checked before anything is written, and held by one job at a time.
//
// Two jobs writing one output directory interleave metrics, overwrite each other's config.yaml
// and checkpoints, and both report success. The lock is flock() on <output_dir>/.fsdpp.lock,
// which the kernel drops when its process exits however it exits, so a crashed or killed job
// never leaves the directory locked. The file also records who holds it, for the message that
// refuses the second job.

#include <filesystem>
#include <string>

#include "fsdpp/common/unique_fd.h"

namespace fsdpp::train::detail {

class OutputDirLock {
 public:
  // Creates `dir` if needed and locks it. Throws ConfigError naming the directory when it cannot
  // be made or written (a file in its place, read-only, a name too long), and naming the holder
  // when another live job holds it, unless `overwrite` (training.overwrite_output_dir): then
  // `warning` says whose directory is being taken over and the lock is not held.
  OutputDirLock(const std::filesystem::path& dir, bool overwrite, std::string* warning);

  bool held() const { return static_cast<bool>(fd_); }

 private:
  UniqueFd fd_;
};

}  // namespace fsdpp::train::detail
