#pragma once
// metrics.jsonl, written so that what is on disk is always whole JSON lines, and a line that
// could not be written stops the run instead of vanishing. A buffered ofstream loses both: a full
// disk cuts a line in half with no error anyone checks, and a deleted output directory takes
// every later line with it while the run reports success.

#include <sys/types.h>

#include <filesystem>
#include <string>

#include "fsdpp/common/unique_fd.h"

namespace fsdpp::observe {

// XXH3-64 (16 hex digits) of metrics.jsonl's bytes: a checkpoint records it (trainer_state.json)
// and a resume compares it with the lines it keeps, to know they are its run's. "" when the file
// is not a regular file.
std::string metrics_digest(const std::filesystem::path& path);
std::string metrics_text_digest(const std::string& text);

class MetricsLog {
 public:
  // Opens `path`, emptied first unless `append`. Throws Error naming the path and the reason.
  MetricsLog(std::filesystem::path path, bool append);

  // Appends `line` and a newline with one write. When that fails (disk full, file too large,
  // I/O error) the file is cut back to its last whole line, and when the file is no longer
  // reachable under its path (deleted, or its directory removed) or holds other bytes than this
  // run wrote (truncated or appended to by another process) nothing is written; each throws
  // Error naming the file and the reason.
  void append(const std::string& line);

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  UniqueFd fd_;
  off_t size_ = 0;  // the bytes the file holds after this run's last write
};

}  // namespace fsdpp::observe
