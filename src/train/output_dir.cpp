#include "output_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <string_view>
#include <chrono>
#include <cstring>
#include <ctime>

#include "fsdpp/common/error.h"
#include "fsdpp/state/atomic_dir.h"

namespace fs = std::filesystem;

namespace fsdpp::train::detail {
namespace {

std::string holder_of(int fd) {
  char buf[512] = {};
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  std::string s = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s.empty() ? "a process that has not written its name yet" : s;
}

std::string host_name() {
  char h[256] = {};
  return ::gethostname(h, sizeof(h) - 1) == 0 ? std::string(h) : std::string("?");
}

}  // namespace

OutputDirLock::OutputDirLock(const fs::path& dir, bool overwrite) : dir_(dir) {
  std::error_code ec;
  FSDPP_CHECK_AS(ConfigError, !fs::exists(dir, ec) || fs::is_directory(dir, ec),
                 "[train] training.output_dir='{}' exists and is not a directory; expected a "
                 "directory (created if missing)",
                 dir.string());
  fs::create_directories(dir, ec);
  FSDPP_CHECK_AS(ConfigError, !ec, "[train] training.output_dir='{}' cannot be created: {}",
                 dir.string(), ec.message());
  const fs::path lock_path = dir / ".fsdpp.lock";
  // A lock file removed (or replaced) between our open and our flock leaves us holding a lock
  // nobody else sees: lock, then check that the path still leads to the file locked.
  for (int attempt = 0;; ++attempt) {
    UniqueFd fd(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    FSDPP_CHECK_AS(ConfigError, fd, "[train] training.output_dir='{}' is not writable: {}",
                   dir.string(), std::strerror(errno));
    FSDPP_CHECK_AS(ConfigError, ::access(dir.c_str(), W_OK) == 0,
                   "[train] training.output_dir='{}' is not writable: {}", dir.string(),
                   std::strerror(errno));
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      FSDPP_CHECK_AS(ConfigError, err == EWOULDBLOCK,
                     "[train] cannot lock training.output_dir='{}' ({}): {}", dir.string(),
                     lock_path.string(), std::strerror(err));
      // Hugging Face's overwrite_output_dir replaces a finished run; a live job's files are not
      // this run's to write into: its metrics would be cut and mixed, its config.yaml replaced
      // and its checkpoints interleaved with ours, while both jobs report success.
      FSDPP_THROW(ConfigError,
                  "[train] training.output_dir='{}' is in use by another job ({}); {}wait for it "
                  "to end or choose another output_dir",
                  dir.string(), holder_of(fd.get()),
                  overwrite ? "training.overwrite_output_dir=true replaces a finished run, never "
                              "a live one: "
                            : "");
    }
    struct stat fd_st {}, path_st {};
    if (::fstat(fd.get(), &fd_st) == 0 && ::stat(lock_path.c_str(), &path_st) == 0 &&
        fd_st.st_ino == path_st.st_ino && fd_st.st_dev == path_st.st_dev) {
      fd_ = std::move(fd);
      break;
    }
    FSDPP_CHECK_AS(ConfigError, attempt < 10,
                   "[train] cannot lock training.output_dir='{}': its lock file {} keeps being "
                   "removed or replaced by someone else",
                   dir.string(), lock_path.string());
  }
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char when[64] = {};
  std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  const std::string me = fmt::format("pid {} on host {}, since {}\n", ::getpid(), host_name(), when);
  // Best effort: the lock is what counts, the text only names its holder.
  if (::ftruncate(fd_.get(), 0) == 0) {
    [[maybe_unused]] const ssize_t n = ::pwrite(fd_.get(), me.data(), me.size(), 0);
  }
}

void OutputDirLock::watch(const fs::path& file) {
  struct stat st {};
  FSDPP_CHECK(::stat(file.c_str(), &st) == 0, "[train] cannot stat '{}': {}", file.string(),
              std::strerror(errno));
  watched_.push_back({file, static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
                      static_cast<int64_t>(st.st_size),
                      static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec});
}

void OutputDirLock::verify() const {
  const fs::path lock_path = dir_ / ".fsdpp.lock";
  struct stat fd_st {}, path_st {};
  const bool same = ::fstat(fd_.get(), &fd_st) == 0 && ::stat(lock_path.c_str(), &path_st) == 0 &&
                    fd_st.st_ino == path_st.st_ino && fd_st.st_dev == path_st.st_dev;
  FSDPP_CHECK(same,
              "[train] '{}' was removed or replaced while this run held it: another job may be "
              "writing into training.output_dir='{}' (was the directory removed?); stopping rather "
              "than mixing two runs' files",
              lock_path.string(), dir_.string());
  for (const auto& w : watched_) {
    struct stat st {};
    const bool ok = ::stat(w.path.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_dev) == w.dev &&
                    static_cast<uint64_t>(st.st_ino) == w.ino && st.st_size == w.size &&
                    static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec == w.mtime_ns;
    FSDPP_CHECK(ok,
                "[train] '{}' was removed, replaced or changed while this run held "
                "training.output_dir='{}': another job is writing into it; stopping rather than "
                "mixing two runs' files",
                w.path.string(), dir_.string());
  }
}

EarlierRun find_earlier_run(const fs::path& dir) {
  EarlierRun run;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    constexpr std::string_view kPrefix = "checkpoint-";
    if (name.rfind(kPrefix, 0) == 0 && name.size() > kPrefix.size() &&
        name.find_first_not_of("0123456789", kPrefix.size()) == std::string::npos &&
        e.is_directory(ec)) {
      run.checkpoints.push_back(e.path());
    }
  }
  std::sort(run.checkpoints.begin(), run.checkpoints.end(), [](const fs::path& a, const fs::path& b) {
    const auto sa = a.filename().string(), sb = b.filename().string();
    return sa.size() != sb.size() ? sa.size() < sb.size() : sa < sb;  // checkpoint-5 before -10
  });
  // Only a regular file holds lines of a run: a device in its place (/dev/full, whose reads never
  // end) is for the metrics writer to refuse.
  if (!fs::is_regular_file(dir / "metrics.jsonl", ec)) return run;
  std::ifstream in(dir / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) run.metrics_lines += line.empty() ? 0 : 1;
  return run;
}

std::string EarlierRun::describe() const {
  std::vector<std::string> parts;
  for (const auto& c : checkpoints) parts.push_back(c.filename().string());
  if (parts.size() > 4) {
    const auto n = parts.size();
    parts = {parts[0], fmt::format("{} more", n - 2), parts[n - 1]};
  }
  if (metrics_lines > 0) {
    parts.push_back(fmt::format("metrics.jsonl ({} line{})", metrics_lines,
                                metrics_lines == 1 ? "" : "s"));
  }
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    out += (i == 0 ? "" : i + 1 == parts.size() ? " and " : ", ") + parts[i];
  }
  return out;
}

void remove_earlier_run(const fs::path& dir, const EarlierRun& run) {
  for (const auto& c : run.checkpoints) state::remove_tree(c);
  for (const char* name : {"metrics.jsonl", "sample.txt", "run.svg"}) {
    std::error_code ec;
    fs::remove(dir / name, ec);
    FSDPP_CHECK_AS(ConfigError, !ec, "[train] cannot remove '{}' (training.overwrite_output_dir): {}",
                   (dir / name).string(), ec.message());
  }
}

}  // namespace fsdpp::train::detail
