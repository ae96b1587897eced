// Backward prefetch's names, read off the one table. See include/fsdpp/fsdp/prefetch.h.
#include "fsdpp/fsdp/prefetch.h"

#include <cctype>

#include "fsdpp/common/error.h"

namespace fsdpp {

namespace {

std::string upper(std::string_view s) {
  std::string out;
  for (char c : s) out += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// fsdpp's names in lower case, as messages list them: "backward_pre, backward_post or none".
std::string expected_names() {
  std::string out;
  const size_t n = std::size(kBackwardPrefetchNames);
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out += i + 1 == n ? " or " : ", ";
    for (char c : kBackwardPrefetchNames[i].name) {
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
  }
  return out;
}

}  // namespace

const char* to_string(BackwardPrefetch p) {
  for (const auto& row : kBackwardPrefetchNames) {
    if (row.value == p) return row.name.data();
  }
  return "?";
}

BackwardPrefetch parse_backward_prefetch(const std::string& name) {
  const std::string n = upper(name);
  for (const auto& row : kBackwardPrefetchNames) {
    if (n == row.name || n == row.hf_name) return row.value;
  }
  FSDPP_THROW(ConfigError, "[fsdp] unknown backward prefetch '{}'; expected {}", name,
              expected_names());
}

}  // namespace fsdpp
