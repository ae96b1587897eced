#include "faults.h"

#include <signal.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "fsdpp/common/error.h"

namespace fsdpp::train::detail {
namespace {

std::optional<int64_t> parse_whole(std::string_view s) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

}  // namespace

int restart_count_from_env() {
  for (const char* var : {"FSDPP_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"}) {
    const char* text = std::getenv(var);
    if (text == nullptr || *text == '\0') continue;
    const auto v = parse_whole(text);
    FSDPP_CHECK_AS(ConfigError, v && *v >= 0 && *v <= 1'000'000,
                   "[train] {}='{}': expected a whole number >= 0 (the launcher's restart count)",
                   var, text);
    return static_cast<int>(*v);
  }
  return 0;
}

FaultPlan FaultPlan::from_env(int rank, int restart_count) {
  FaultPlan plan;
  if (const char* text = std::getenv("FSDPP_FAULT_KILL"); text && *text) {
    const std::string_view s(text);
    const auto colon = s.find(':');
    const auto r = colon == std::string_view::npos ? std::nullopt : parse_whole(s.substr(0, colon));
    const auto step = colon == std::string_view::npos ? std::nullopt : parse_whole(s.substr(colon + 1));
    FSDPP_CHECK_AS(ConfigError, r && step && *r >= 0 && *step >= 1,
                   "[train] FSDPP_FAULT_KILL='{}': expected RANK:STEP such as 1:5 (rank >= 0, "
                   "step >= 1)",
                   text);
    if (*r == rank && restart_count == 0) plan.kill_step = *step;
  }
  if (const char* text = std::getenv("FSDPP_FAULT_NAN"); text && *text) {
    const std::string_view s(text);
    const auto colon = s.find(':');
    const auto step = parse_whole(s.substr(0, colon));
    FSDPP_CHECK_AS(ConfigError, step && *step >= 1 && (colon == std::string_view::npos || colon + 1 < s.size()),
                   "[train] FSDPP_FAULT_NAN='{}': expected STEP or STEP:PARAMETER such as 3 or "
                   "3:layers.0.attention.wq.weight (step >= 1)",
                   text);
    plan.nan_step = *step;
    if (colon != std::string_view::npos) plan.nan_param = std::string(s.substr(colon + 1));
  }
  return plan;
}

void kill_self(int rank, int64_t step) {
  const double now = std::chrono::duration<double>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  std::fprintf(stderr, "[fault] FSDPP_FAULT_KILL: rank %d sends itself SIGKILL at step %lld (t=%.3f)\n",
               rank, static_cast<long long>(step), now);
  std::fflush(stderr);
  ::kill(::getpid(), SIGKILL);
  for (;;) ::pause();  // SIGKILL cannot be caught; this only keeps the compiler's promise
}

}  // namespace fsdpp::train::detail
