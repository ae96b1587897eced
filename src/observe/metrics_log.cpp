#include "fsdpp/observe/metrics_log.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "fsdpp/common/error.h"

namespace fsdpp::observe {

std::string metrics_text_digest(const std::string& text) {
  return fmt::format("{:016x}", XXH3_64bits(text.data(), text.size()));
}

std::string metrics_digest(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return "";  // a device's reads may never end
  std::ifstream in(path, std::ios::binary);
  if (!in.good()) return "";
  std::ostringstream text;
  text << in.rdbuf();
  return metrics_text_digest(text.str());
}

MetricsLog::MetricsLog(std::filesystem::path path, bool append) : path_(std::move(path)) {
  const int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (append ? 0 : O_TRUNC);
  fd_.reset(::open(path_.c_str(), flags, 0644));
  FSDPP_CHECK(fd_, "[train] cannot open '{}' for the metrics: {}", path_.string(),
              std::strerror(errno));
  struct stat st {};
  FSDPP_CHECK(::fstat(fd_.get(), &st) == 0, "[train] cannot stat '{}': {}", path_.string(),
              std::strerror(errno));
  size_ = st.st_size;
}

void MetricsLog::append(const std::string& line) {
  // The path must still lead to this file: a removed output directory leaves writes that
  // succeed into a file nobody can read.
  struct stat open_st {}, path_st {};
  FSDPP_CHECK(::fstat(fd_.get(), &open_st) == 0, "[train] cannot stat '{}': {}", path_.string(),
              std::strerror(errno));
  const bool reachable = ::stat(path_.c_str(), &path_st) == 0 && path_st.st_ino == open_st.st_ino &&
                         path_st.st_dev == open_st.st_dev;
  FSDPP_CHECK(reachable && open_st.st_nlink > 0,
              "[train] '{}' was deleted or replaced while the run wrote it (was "
              "training.output_dir removed?); stopping rather than losing the metrics",
              path_.string());
  // Only this run writes the file: another size means someone else truncated it (a second job
  // that opened it to start afresh) or appended to it, and the lines are no longer this run's.
  FSDPP_CHECK(open_st.st_size == size_,
              "[train] '{}' was changed by someone else while the run wrote it: it holds {} bytes "
              "where this run wrote {} (truncated or appended to by another job in "
              "training.output_dir?); stopping rather than mixing two runs' metrics",
              path_.string(), static_cast<int64_t>(open_st.st_size), static_cast<int64_t>(size_));
  const std::string text = line + "\n";
  const off_t before = open_st.st_size;
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd_.get(), text.data() + done, text.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    const int err = n < 0 ? errno : ENOSPC;
    // Whole lines or nothing: a reader (or a resume's truncate_metrics) must be able to parse
    // every line that is there.
    if (done > 0 && ::ftruncate(fd_.get(), before) != 0) {
      FSDPP_THROW(Error,
                  "[train] cannot write '{}': {}; and cutting its half-written last line failed "
                  "too: {}",
                  path_.string(), std::strerror(err), std::strerror(errno));
    }
    FSDPP_THROW(Error, "[train] cannot write '{}': {} (the lines before this one are intact)",
                path_.string(), std::strerror(err));
  }
  size_ = before + static_cast<off_t>(text.size());
}

}  // namespace fsdpp::observe
