#pragma once
// A whole number in decimal, all of the text and nothing else ("12", "-3"; not "", "1.5", "7 ",
// "0x10"): what environment variables and command-line values hold.
//
//   if (auto n = fsdpp::parse_whole_number(text)) use(*n); else error("expected a whole number");

#include <charconv>
#include <cstdint>
#include <optional>
#include <string_view>

namespace fsdpp {

inline std::optional<int64_t> parse_whole_number(std::string_view s) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace fsdpp
