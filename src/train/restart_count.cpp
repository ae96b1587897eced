#include "restart_count.h"

#include <cstdint>
#include <cstdlib>

#include "fsdpp/common/error.h"
#include "fsdpp/common/whole_number.h"

namespace fsdpp::train::detail {

int restart_count_from_env() {
  for (const char* var : {"FSDPP_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"}) {
    const char* text = std::getenv(var);
    if (text == nullptr || *text == '\0') continue;
    const auto v = parse_whole_number(text);
    FSDPP_CHECK_AS(ConfigError, v && *v >= 0 && *v <= 1'000'000,
                   "[train] {}='{}': expected a whole number >= 0 (the launcher's restart count)",
                   var, text);
    return static_cast<int>(*v);
  }
  return 0;
}

}  // namespace fsdpp::train::detail
