#pragma once
// Whether bytes are UTF-8 text: what TokenizerJson accepts (the tokenizers library takes only
// valid strings), and what fsdpp-tokenize checks its input against before tokenizing any of it.

#include <cstddef>
#include <optional>
#include <string_view>

namespace fsdpp::data {

// The offset of the first byte that does not start a well-formed UTF-8 character (RFC 3629: no
// overlong forms, no surrogates, nothing above U+10FFFF), or nullopt. NUL is a character.
std::optional<size_t> first_invalid_utf8(std::string_view bytes);

}  // namespace fsdpp::data
