#include "restart_count.h"

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <optional>
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

}  // namespace fsdpp::train::detail
