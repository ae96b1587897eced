#pragma once
// The trainer's side of fsdpp-run --progress-timeout-s: after every step it writes one line
// ("step 42 of 1000") to FSDPP_HEARTBEAT_FILE, and the launcher fails a worker whose file grows
// stale. A stuck rank that is neither dead nor stopped (a deadlock outside fsdpp's collectives,
// a hung file system) is otherwise invisible to the launcher. Without the variable it does
// nothing.

#include <string>

#include "fsdpp/common/unique_fd.h"

namespace fsdpp::observe::detail {

class Heartbeat {
 public:
  Heartbeat();  // reads FSDPP_HEARTBEAT_FILE; a file that cannot be opened is a warning, not fatal
  void beat(const std::string& what);

 private:
  UniqueFd fd_;
};

}  // namespace fsdpp::observe::detail
