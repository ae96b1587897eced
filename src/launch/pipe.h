#pragma once
// The launcher's pipes (two owned ends) and whole writes to a descriptor (UniqueFd itself is
// fsdpp/common/unique_fd.h).

#include <unistd.h>

#include <utility>

#include "fsdpp/common/unique_fd.h"

namespace fsdpp::launch {

using fsdpp::UniqueFd;

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
