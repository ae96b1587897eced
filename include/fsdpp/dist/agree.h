#pragma once
// Agreement on failure for work that one rank (or each rank) does alone: when it throws on some
// rank, every rank throws, instead of the others hanging in their next collective or dying there
// with a page of c10d frames. The lowest failing rank rethrows its own exception; the others
// throw the same kind with one short line that points at it (AgreedMessage::kPointer, so a job's
// log tells the cause once), or with that rank's message itself (kShared, for callers whose
// every rank reports the error, such as a checkpoint load).
//
//   dist::agree_on_failure(*world.group(), "preparing the output directory", [&] {
//     if (world.rank() == 0) fs::create_directories(out_dir);  // no collective in here
//   });

#include <exception>
#include <string_view>

#include "fsdpp/dist/process_group.h"

namespace fsdpp::dist {

enum class AgreedMessage { kPointer, kShared };

// One all-gather of each rank's outcome over `group`: returns when no rank failed, else throws
// (`error` on the lowest failing rank, a pointer to it on the others). ConfigError and
// CheckpointError keep their kind on every rank (tools map kinds to exit codes); anything else
// becomes fsdpp::Error. kShared adds a broadcast of the failing rank's message, whose copies end
// with " (reported by rank R)".
void agree_outcome(ProcessGroup& group, std::string_view what, std::exception_ptr error,
                   AgreedMessage message = AgreedMessage::kPointer);

template <typename F>
void agree_on_failure(ProcessGroup& group, std::string_view what, F&& fn,
                      AgreedMessage message = AgreedMessage::kPointer) {
  std::exception_ptr error;
  try {
    fn();
  } catch (...) {
    error = std::current_exception();
  }
  agree_outcome(group, what, error, message);
}

}  // namespace fsdpp::dist
