#include "fsdpp/common/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

#include "fsdpp/common/error.h"

namespace fsdpp {
namespace fs = std::filesystem;

namespace {

fs::path directory_of(const fs::path& p) {
  fs::path parent = p.parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

// "<name>.tmp-<pid>-<16 hex digits>", the pattern state::cleanup_stale_tmp() removes. A
// random_device per call: writers on several hosts (shared file system) and forked children
// must never draw the same name, which a generator seeded once and copied by fork() would.
fs::path unique_tmp_name(const fs::path& path) {
  std::random_device rd;
  const uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return directory_of(path) / fmt::format("{}.tmp-{}-{:016x}", path.filename().string(),
                                          static_cast<long>(::getpid()), r);
}

int fsync_retrying(int fd) {
  int rc;
  do rc = ::fsync(fd);
  while (rc != 0 && errno == EINTR);
  return rc;
}

}  // namespace

void fsync_path(const fs::path& path, std::string_view component) {
  // O_RDONLY works for directories too; fsync on a read-only descriptor flushes the inode.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    FSDPP_THROW(Error, "[{}] cannot open '{}' to fsync it: {}", component, path.string(),
                std::strerror(errno));
  }
  if (fsync_retrying(fd.get()) != 0) {
    FSDPP_THROW(Error, "[{}] fsync of '{}' failed: {}", component, path.string(),
                std::strerror(errno));
  }
}

void commit_file_atomically(UniqueFd fd, const fs::path& tmp, const fs::path& path,
                            std::string_view component) {
  if (fsync_retrying(fd.get()) != 0) {
    FSDPP_THROW(Error, "[{}] fsync of '{}' failed: {}", component, tmp.string(),
                std::strerror(errno));
  }
  // close() reports write errors some file systems (NFS) only find at that point.
  if (::close(fd.release()) != 0) {
    FSDPP_THROW(Error, "[{}] closing '{}' failed: {}", component, tmp.string(),
                std::strerror(errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    FSDPP_THROW(Error, "[{}] cannot rename '{}' to '{}': {}", component, tmp.string(),
                path.string(), std::strerror(errno));
  }
  // The rename is only durable once the directory entry is.
  fsync_path(directory_of(path), component);
}

AtomicFile::AtomicFile(fs::path path, std::string component)
    : path_(std::move(path)), tmp_path_(unique_tmp_name(path_)), component_(std::move(component)) {
  fd_.reset(::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd_) {
    FSDPP_THROW(Error, "[{}] cannot create '{}' (to write '{}'): {}", component_,
                tmp_path_.string(), path_.string(), std::strerror(errno));
  }
}

AtomicFile::~AtomicFile() {
  if (committed_) return;
  fd_.reset();
  ::unlink(tmp_path_.c_str());
}

void AtomicFile::pwrite(const void* data, std::size_t n, std::uint64_t offset) {
  FSDPP_CHECK(!committed_, "[{}] '{}': write after commit()", component_, path_.string());
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd_.get(), p, n, static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      FSDPP_THROW(Error, "[{}] cannot write '{}' ({} bytes at offset {}): {}", component_,
                  tmp_path_.string(), n, offset, w < 0 ? std::strerror(errno) : "no progress");
    }
    p += w;
    n -= static_cast<std::size_t>(w);
    offset += static_cast<std::uint64_t>(w);
  }
}

void AtomicFile::write(const void* data, std::size_t n) {
  pwrite(data, n, end_);
  end_ += n;
}

void AtomicFile::commit() {
  FSDPP_CHECK(!committed_, "[{}] '{}' is already committed", component_, path_.string());
  UniqueFd fd = std::move(fd_);
  commit_file_atomically(std::move(fd), tmp_path_, path_, component_);
  committed_ = true;
}

void write_file_atomically(const fs::path& path, std::string_view bytes, std::string component) {
  AtomicFile file(path, std::move(component));
  file.write(bytes);
  file.commit();
}

}  // namespace fsdpp
