#pragma once
// metrics.jsonl, written so that what is on disk is always whole JSON lines, and a line that
// could not be written stops the run instead of vanishing. A buffered ofstream loses both: a full
// disk cuts a line in half with no error anyone checks, and a deleted output directory takes
// every later line with it while the run reports success.

#include <filesystem>
#include <string>

#include "fsdpp/common/unique_fd.h"

namespace fsdpp::train::detail {

class MetricsLog {
 public:
  // Opens `path`, emptied first unless `append`. Throws Error naming the path and the reason.
  MetricsLog(std::filesystem::path path, bool append);

  // Appends `line` and a newline with one write. When that fails (disk full, file too large,
  // I/O error) the file is cut back to its last whole line, and when the file is no longer
  // reachable under its path (deleted, or its directory removed) nothing is written; both throw
  // Error naming the file and the reason.
  void append(const std::string& line);

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  UniqueFd fd_;
};

}  // namespace fsdpp::train::detail
