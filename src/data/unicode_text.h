#pragma once
// UTF-8 and the few Unicode properties a tokenizer.json pipeline asks about, with the definitions
// Hugging Face's tokenizers library (Rust) uses, so that fsdpp splits text where it does.
// Character categories come from libutf8proc; White_Space is written out here (it is a short,
// stable list that utf8proc does not expose).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fsdpp::data::unicode {

// Bytes in the UTF-8 character whose first byte is `lead` (1 for a byte that starts none: only
// used on text already checked by first_invalid_utf8).
inline size_t char_length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xe0 ? 2 : lead < 0xf0 ? 3 : 4;
}

// The code point at text[at] (valid UTF-8), and its length in bytes.
char32_t decode(std::string_view text, size_t at, size_t* length);

void append_utf8(std::string& out, char32_t cp);
std::string utf8(char32_t cp);

// The offset of the first byte that does not start a well-formed UTF-8 character (RFC 3629: no
// overlong forms, no surrogates, nothing above U+10FFFF), or nullopt. NUL is a character.
std::optional<size_t> first_invalid_utf8(std::string_view text);

// Rust's String::from_utf8_lossy (and Python's bytes.decode("utf-8", "replace")): every maximal
// ill-formed subsequence becomes one U+FFFD.
std::string utf8_lossy(std::string_view bytes);

// Rust's char::is_whitespace and the regex crate's \s: the White_Space property.
bool is_white_space(char32_t cp);
// Rust's char::is_numeric: general category Nd, Nl or No.
bool is_numeric(char32_t cp);
// The regex crate's \w, which AddedToken's single_word tests: Alphabetic, marks, decimal digits,
// connector punctuation and the joiners. Alphabetic is approximated by L + Nl + the enclosed
// letters (Other_Alphabetic's symbols); its other members are marks, which \w has anyway.
bool is_word_char(char32_t cp);
// Mn, Mc or Me (the StripAccents normalizer's combining marks).
bool is_combining_mark(char32_t cp);
// Rust's char::to_lowercase: utf8proc's simple mapping, plus U+0130's two-character lowercase.
void append_lowercase(std::string& out, char32_t cp);

}  // namespace fsdpp::data::unicode
