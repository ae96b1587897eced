#pragma once
// GPT-2's bytes_to_unicode, which the ByteLevel pre-tokenizer and decoder apply: every byte is
// shown as one printable character, so that a byte-level vocabulary is text. Printable Latin-1
// bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) stand for themselves; the other 68 become U+0100
// onwards in byte order.

#include <cstdint>
#include <optional>

namespace fsdpp::data {

constexpr bool byte_level_prints_itself(uint32_t b) {
  return (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
}

// The character that stands for byte `b`.
constexpr char32_t byte_level_char(uint8_t b) {
  if (byte_level_prints_itself(b)) return b;
  char32_t next = 256;
  for (uint32_t x = 0; x < b; ++x) {
    if (!byte_level_prints_itself(x)) ++next;
  }
  return next;
}

// The byte that character `c` stands for; nothing for a character outside the alphabet.
constexpr std::optional<uint8_t> byte_level_byte(char32_t c) {
  if (c < 256) {
    if (byte_level_prints_itself(c)) return static_cast<uint8_t>(c);
    return std::nullopt;
  }
  uint32_t k = c - 256;  // the k-th byte that does not print itself
  for (uint32_t x = 0; x < 256; ++x) {
    if (byte_level_prints_itself(x)) continue;
    if (k == 0) return static_cast<uint8_t>(x);
    --k;
  }
  return std::nullopt;
}

static_assert(byte_level_char(' ') == 0x120 && byte_level_char('\n') == 0x10a);
static_assert(byte_level_byte(0x120) == ' ' && byte_level_byte(0x143) == 0xad);

}  // namespace fsdpp::data
