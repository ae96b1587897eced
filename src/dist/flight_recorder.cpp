#include "flight_recorder.h"

#include <cstdlib>
#include <mutex>

namespace fsdpp::dist::detail {

void configure_flight_recorder() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const char* name : {"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"}) {
      if (const char* v = std::getenv(name); v != nullptr && *v != '\0') return;  // the user's choice
    }
    ::setenv("TORCH_FR_BUFFER_SIZE", "0", /*overwrite=*/0);
  });
}

}  // namespace fsdpp::dist::detail
