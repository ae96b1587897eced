#pragma once
// Text for a terminal: bytes that are not valid UTF-8, and control characters other than
// newline and tab, become \xNN, so that an untrained model's output (any bytes) cannot write
// binary or escape sequences to the terminal.

#include <string>
#include <string_view>

namespace fsdpp::data {

std::string printable_text(std::string_view bytes);

}  // namespace fsdpp::data
