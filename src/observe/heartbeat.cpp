#include "heartbeat.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fsdpp::observe::detail {

Heartbeat::Heartbeat() {
  const char* path = std::getenv("FSDPP_HEARTBEAT_FILE");
  if (path == nullptr || *path == '\0') return;
  fd_.reset(::open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
  if (!fd_) {
    std::fprintf(stderr, "[train] warning: cannot write FSDPP_HEARTBEAT_FILE '%s': %s\n", path,
                 std::strerror(errno));
  }
}

void Heartbeat::beat(const std::string& what) {
  if (!fd_) return;
  // One pwrite: it updates the file's mtime, which is what the launcher reads.
  const std::string line = what + "\n";
  if (::pwrite(fd_.get(), line.data(), line.size(), 0) == static_cast<ssize_t>(line.size())) {
    [[maybe_unused]] const int rc = ::ftruncate(fd_.get(), static_cast<off_t>(line.size()));
  }
}

}  // namespace fsdpp::observe::detail
