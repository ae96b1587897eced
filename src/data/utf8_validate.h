#pragma once
// UTF-8 validation that says where a string stops being UTF-8: the data readers refuse invalid
// text with its byte offset, as Hugging Face's tokenizers accept only valid str.

#include <cstddef>
#include <string_view>

namespace fsdpp::data::detail {

inline constexpr size_t kValidUtf8 = static_cast<size_t>(-1);

// The offset of the first byte of `s` that does not begin (or continue) a well-formed UTF-8
// sequence (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF), or kValidUtf8.
size_t invalid_utf8_offset(std::string_view s);

}  // namespace fsdpp::data::detail
