// UTF-8 and Unicode properties. See unicode_text.h.
#include "unicode_text.h"

#include "fsdpp/data/utf8.h"

#include <utf8proc.h>

namespace fsdpp::data::unicode {

char32_t decode(std::string_view text, size_t at, size_t* length) {
  const auto* b = reinterpret_cast<const unsigned char*>(text.data()) + at;
  const unsigned c = b[0];
  if (c < 0x80) {
    *length = 1;
    return c;
  }
  if (c < 0xe0) {
    *length = 2;
    return ((c & 0x1f) << 6) | (b[1] & 0x3f);
  }
  if (c < 0xf0) {
    *length = 3;
    return ((c & 0x0f) << 12) | ((b[1] & 0x3f) << 6) | (b[2] & 0x3f);
  }
  *length = 4;
  return ((c & 0x07) << 18) | ((b[1] & 0x3f) << 12) | ((b[2] & 0x3f) << 6) | (b[3] & 0x3f);
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

std::string utf8(char32_t cp) {
  std::string s;
  append_utf8(s, cp);
  return s;
}

namespace {

// The length of the well-formed character at b[i], or, for an ill-formed one, minus the length
// of its maximal ill-formed prefix (at least 1): the unit both the validator and the lossy
// decoder step over (Unicode's "maximal subpart" practice, which Rust and Python follow).
long next_char(const unsigned char* b, size_t i, size_t n) {
  const unsigned c = b[i];
  if (c < 0x80) return 1;
  size_t len = 0;
  unsigned lo = 0x80, hi = 0xbf;  // the range of the second byte
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    if (c == 0xe0) lo = 0xa0;  // overlong
    if (c == 0xed) hi = 0x9f;  // surrogates
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    if (c == 0xf0) lo = 0x90;  // overlong
    if (c == 0xf4) hi = 0x8f;  // above U+10FFFF
  } else {
    return -1;  // a continuation byte without a lead, or a lead that is never valid
  }
  if (i + 1 >= n || b[i + 1] < lo || b[i + 1] > hi) return -1;
  for (size_t k = 2; k < len; ++k) {
    if (i + k >= n || (b[i + k] & 0xc0) != 0x80) return -static_cast<long>(k);
  }
  return static_cast<long>(len);
}

}  // namespace

std::optional<size_t> first_invalid_utf8(std::string_view text) {
  const auto* b = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    // Eight ASCII bytes at a time: most text is mostly ASCII.
    while (i + 8 <= n) {
      uint64_t w;
      __builtin_memcpy(&w, b + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    const long len = next_char(b, i, n);
    if (len < 0) return i;
    i += static_cast<size_t>(len);
  }
  return std::nullopt;
}

std::string utf8_lossy(std::string_view bytes) {
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  std::string out;
  out.reserve(n);
  for (size_t i = 0; i < n;) {
    const long len = next_char(b, i, n);
    if (len > 0) {
      out.append(bytes.data() + i, static_cast<size_t>(len));
      i += static_cast<size_t>(len);
    } else {
      out += "\xef\xbf\xbd";  // U+FFFD
      i += static_cast<size_t>(-len);
    }
  }
  return out;
}

bool is_white_space(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0d);
  switch (cp) {
    case 0x85: case 0xa0: case 0x1680: case 0x2028: case 0x2029: case 0x202f: case 0x205f:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200a;
  }
}

bool is_numeric(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  const auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool is_word_char(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') ||
           cp == '_';
  }
  if (cp == 0x200c || cp == 0x200d) return true;  // Join_Control
  // Other_Alphabetic symbols: circled, parenthesized, squared and negative letters.
  if ((cp >= 0x24b6 && cp <= 0x24e9) || (cp >= 0x1f130 && cp <= 0x1f149) ||
      (cp >= 0x1f150 && cp <= 0x1f169) || (cp >= 0x1f170 && cp <= 0x1f189)) {
    return true;
  }
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

bool is_combining_mark(char32_t cp) {
  if (cp < 0x300) return false;
  const auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC || c == UTF8PROC_CATEGORY_ME;
}

void append_lowercase(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
    return;
  }
  if (cp == 0x130) {  // İ: SpecialCasing's only unconditional multi-character lowercase
    out += "i\xcc\x87";
    return;
  }
  append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
}

}  // namespace fsdpp::data::unicode

namespace fsdpp::data {

std::optional<size_t> first_invalid_utf8(std::string_view bytes) {
  return unicode::first_invalid_utf8(bytes);
}

}  // namespace fsdpp::data
