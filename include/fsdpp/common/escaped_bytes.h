#pragma once
// Text from a file that may be anything (a corrupt header, a parser's "last read: '...'"), made
// safe to print in a message: control characters and bytes outside ASCII as \xNN, so that a
// terminal shows what the file holds instead of raw bytes that garble it.
//
//   FSDPP_THROW(CheckpointError, "[state] '{}': the header is not valid JSON: {}", file,
//               escaped_bytes(e.what()));   // last read: '"\xff'

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace fsdpp {

inline std::string escaped_bytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto b = static_cast<unsigned char>(c);
    if (b < 0x20 || b >= 0x7f) {
      out += fmt::format("\\x{:02x}", b);
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace fsdpp
