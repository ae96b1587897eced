#include "fsdpp/state/atomic_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>  // renameat2
#include <cstring>
#include <random>
#include <system_error>

#include <fmt/format.h>

#include "fsdpp/common/error.h"

namespace fs = std::filesystem;

namespace fsdpp::state {
namespace {

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

std::string random_hex() {
  // random_device per call: writers on several hosts (shared file system) and forked children
  // must never draw the same name, which a seeded-once generator copied by fork() would.
  std::random_device rd;
  const uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return fmt::format("{:016x}", r);
}

fs::path parent_of(const fs::path& p) {
  fs::path parent = p.parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

// "<digits>-<hex digits>" exactly: the suffix unique_tmp_path() writes after ".tmp-"/".old-".
bool is_pid_random_suffix(std::string_view s) {
  const size_t dash = s.find('-');
  if (dash == 0 || dash == std::string_view::npos || dash + 1 == s.size()) return false;
  for (size_t i = 0; i < dash; ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  for (size_t i = dash + 1; i < s.size(); ++i) {
    const char c = s[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// For "X<marker><pid>-<hex>" returns X, else an empty string.
std::string strip_marker(const std::string& name, std::string_view marker) {
  const size_t at = name.rfind(marker);
  if (at == std::string::npos || at == 0) return {};
  if (!is_pid_random_suffix(std::string_view(name).substr(at + marker.size()))) return {};
  return name.substr(0, at);
}

void fsync_tree(const fs::path& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::file_status st = it->symlink_status(ec);
    if (ec) break;
    if (fs::is_directory(st)) {
      fsync_tree(it->path());
    } else if (fs::is_regular_file(st)) {
      fsync_path(it->path());
    }
  }
  if (ec) FSDPP_THROW(CheckpointError, "[state] cannot list '{}': {}", dir.string(), ec.message());
  fsync_path(dir);
}

void rename_or_throw(const fs::path& from, const fs::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    FSDPP_THROW(CheckpointError, "[state] cannot rename '{}' to '{}': {}", from.string(),
                to.string(), std::strerror(errno));
}

}  // namespace

void fsync_path(const fs::path& path) {
  // O_RDONLY works for directories too; fsync on a read-only descriptor flushes the inode.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    FSDPP_THROW(CheckpointError, "[state] cannot open '{}' to fsync it: {}", path.string(),
                std::strerror(errno));
  int rc;
  do rc = ::fsync(fd);
  while (rc != 0 && errno == EINTR);
  const int err = errno;
  ::close(fd);
  if (rc != 0)
    FSDPP_THROW(CheckpointError, "[state] fsync of '{}' failed: {}", path.string(),
                std::strerror(err));
}

std::size_t remove_tree(const fs::path& path) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(path, ec);
  if (ec || !fs::exists(st)) return 0;
  std::size_t removed = 0;
  if (fs::is_directory(st)) {
    // Collect first: removing entries while iterating leaves the iterator's position unspecified.
    std::vector<fs::path> children;
    for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec))
      children.push_back(it->path());
    if (ec)
      FSDPP_THROW(CheckpointError, "[state] cannot list '{}' to delete it: {}", path.string(),
                  ec.message());
    for (const fs::path& child : children) removed += remove_tree(child);
  }
  fs::remove(path, ec);
  if (ec)
    FSDPP_THROW(CheckpointError, "[state] cannot delete '{}': {}", path.string(), ec.message());
  return removed + 1;
}

fs::path unique_tmp_path(const fs::path& final_path) {
  fs::path name = final_path.filename();
  if (name.empty()) name = final_path.parent_path().filename();  // "dir/" spelled with a slash
  return parent_of(final_path) /
         fmt::format("{}.tmp-{}-{}", name.string(), static_cast<long>(::getpid()), random_hex());
}

AtomicDir::AtomicDir(fs::path final_path) : final_path_(std::move(final_path)) {
  if (final_path_.filename().empty()) final_path_ = final_path_.parent_path();
  std::error_code ec;
  fs::create_directories(parent_of(final_path_), ec);
  if (ec)
    FSDPP_THROW(CheckpointError, "[state] cannot create the parent directory of '{}': {}",
                final_path_.string(), ec.message());
  for (int attempt = 0;; ++attempt) {
    tmp_path_ = unique_tmp_path(final_path_);
    if (fs::create_directory(tmp_path_, ec)) break;
    if (ec || attempt >= 8)
      FSDPP_THROW(CheckpointError, "[state] cannot create the temporary directory '{}': {}",
                  tmp_path_.string(), ec ? ec.message() : std::string("it already exists"));
  }
}

AtomicDir::~AtomicDir() {
  if (committed_) return;
  try {
    remove_tree(tmp_path_);
  } catch (...) {
    // A destructor never throws; cleanup_stale_tmp() removes what is left.
  }
}

void AtomicDir::commit() {
  FSDPP_CHECK_AS(CheckpointError, !committed_, "[state] '{}' is already committed",
                 final_path_.string());
  // Everything must be on disk before the rename publishes it, or a power cut could leave a
  // published directory with empty files.
  fsync_tree(tmp_path_);
  const fs::path parent = parent_of(final_path_);

  std::error_code ec;
  const bool replacing = fs::exists(fs::symlink_status(final_path_, ec));
  if (!replacing) {
    rename_or_throw(tmp_path_, final_path_);
    committed_ = true;
    fsync_path(parent);
    return;
  }

  // Atomic swap: final_path now holds the new tree, tmp_path_ the old one.
  if (::renameat2(AT_FDCWD, tmp_path_.c_str(), AT_FDCWD, final_path_.c_str(), RENAME_EXCHANGE) ==
      0) {
    committed_ = true;
    fsync_path(parent);
    try {
      remove_tree(tmp_path_);
    } catch (const CheckpointError&) {
      // The new checkpoint is in place; the old copy is junk cleanup_stale_tmp() will remove.
    }
    return;
  }
  const int err = errno;
  if (err != EINVAL && err != ENOSYS && err != EOPNOTSUPP)
    FSDPP_THROW(CheckpointError, "[state] cannot exchange '{}' with '{}': {}", tmp_path_.string(),
                final_path_.string(), std::strerror(err));

  // No RENAME_EXCHANGE on this file system: two renames, with a window in which final_path is
  // missing and "<final>.old-*" is the good copy (cleanup_stale_tmp() puts it back).
  const fs::path old = parent / fmt::format("{}.old-{}-{}", final_path_.filename().string(),
                                            static_cast<long>(::getpid()), random_hex());
  rename_or_throw(final_path_, old);
  if (::rename(tmp_path_.c_str(), final_path_.c_str()) != 0) {
    const int rename_err = errno;
    ::rename(old.c_str(), final_path_.c_str());  // best effort: put the old one back
    FSDPP_THROW(CheckpointError, "[state] cannot rename '{}' to '{}': {}", tmp_path_.string(),
                final_path_.string(), std::strerror(rename_err));
  }
  committed_ = true;
  fsync_path(parent);
  try {
    remove_tree(old);
  } catch (const CheckpointError&) {
    // As above: the commit succeeded; the leftover is cleanup_stale_tmp()'s.
  }
}

std::size_t cleanup_stale_tmp(const fs::path& parent) {
  std::error_code ec;
  std::vector<fs::path> entries;
  for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec))
    entries.push_back(it->path());
  if (ec)
    FSDPP_THROW(CheckpointError, "[state] cannot list '{}' to clean it: {}", parent.string(),
                ec.message());
  std::size_t cleaned = 0;
  // Old copies first: restoring one must happen before anything else touches its name.
  for (const fs::path& p : entries) {
    const std::string base = strip_marker(p.filename().string(), ".old-");
    if (base.empty()) continue;
    const fs::path original = parent / base;
    if (fs::exists(fs::symlink_status(original, ec))) {
      remove_tree(p);
    } else {
      rename_or_throw(p, original);
      fsync_path(parent);
    }
    ++cleaned;
  }
  for (const fs::path& p : entries) {
    if (strip_marker(p.filename().string(), ".tmp-").empty()) continue;
    remove_tree(p);
    ++cleaned;
  }
  return cleaned;
}

}  // namespace fsdpp::state
