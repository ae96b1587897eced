#pragma once
// An owned file descriptor, closed on destruction.

#include <unistd.h>

#include <utility>

namespace fsdpp::launch {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(std::exchange(other.fd_, -1));
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

struct Pipe {
  UniqueFd read;
  UniqueFd write;
};

// Both ends close-on-exec, so that no worker inherits another worker's pipes (its EOF would never
// come); dup2() onto a worker's stdout/stderr clears the flag where the worker needs the fd.
// Throws LaunchError.
Pipe make_pipe();

// Writes all of `size` bytes, retrying on EINTR and waiting on EAGAIN. Returns false if the fd
// refused them (e.g. EPIPE: nobody reads our stdout any more), which callers may ignore.
bool write_all(int fd, const char* data, size_t size);

}  // namespace fsdpp::launch
