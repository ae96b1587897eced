#include "pipe.h"

#include <fcntl.h>
#include <poll.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "fsdpp/launch/launcher.h"

namespace fsdpp::launch {

Pipe make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw LaunchError(fmt::format("[fsdpp-run] cannot create a pipe: {}", std::strerror(errno)));
  }
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

bool write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n > 0) {
      data += n;
      size -= static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // Our stdout may be a non-blocking fd inherited from the caller. Waiting here is the
      // backpressure that makes workers block on their own pipes instead of our memory growing.
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 1000);
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace fsdpp::launch
