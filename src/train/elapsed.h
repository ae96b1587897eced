#pragma once
// Milliseconds since a point of the steady clock: the trainer's timings (checkpoint saves).
#include <chrono>

namespace fsdpp::train::detail {

using Clock = std::chrono::steady_clock;

inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace fsdpp::train::detail
