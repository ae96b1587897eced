#include "jinja_text.h"

#include <utf8proc.h>

#include <algorithm>

#include <fmt/format.h>

#include "jinja_error.h"

namespace fsdpp::data::jinja::text {

namespace {

// An undecodable byte b (always >= 0x80) is the code point U+DC00 + b, as Python's
// surrogateescape takes it in, and goes back out as the byte.
constexpr char32_t kEscapeBase = 0xDC00;

bool in_set(char32_t c, const std::u32string& set) { return set.find(c) != std::u32string::npos; }

utf8proc_category_t category(char32_t c) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(c));
}

bool is_cased(char32_t c) {
  const auto cat = category(c);
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

char32_t to_upper(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c)));
}
char32_t to_lower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
}
char32_t to_title(char32_t c) {
  if (c < 0x80) return to_upper(c);
  return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c)));
}

// Python's str.upper(), title() and lower() use Unicode's full case mappings, where a few
// characters map to several ('ß'.upper() is 'SS'); utf8proc has the one-to-one mappings only.
// The common ones: German sharp s, the Latin ligatures, 'İ'.lower().
const char* full_mapping(char32_t c, char mode) {
  switch (c) {
    case 0x00DF: return mode == 'u' ? "SS" : mode == 't' ? "Ss" : nullptr;
    case 0x0149: return mode == 'l' ? nullptr : "\u02BCN";
    case 0xFB00: return mode == 'u' ? "FF" : mode == 't' ? "Ff" : nullptr;
    case 0xFB01: return mode == 'u' ? "FI" : mode == 't' ? "Fi" : nullptr;
    case 0xFB02: return mode == 'u' ? "FL" : mode == 't' ? "Fl" : nullptr;
    case 0xFB03: return mode == 'u' ? "FFI" : mode == 't' ? "Ffi" : nullptr;
    case 0xFB04: return mode == 'u' ? "FFL" : mode == 't' ? "Ffl" : nullptr;
    case 0xFB05:
    case 0xFB06: return mode == 'u' ? "ST" : mode == 't' ? "St" : nullptr;
    case 0x0130: return mode == 'l' ? "i\u0307" : nullptr;
    default: return nullptr;
  }
}

void append_mapped(std::string& out, char32_t c, char mode) {
  if (c >= 0x80) {
    if (const char* full = full_mapping(c, mode)) {
      out += full;
      return;
    }
  }
  append_utf8(out, mode == 'u' ? to_upper(c) : mode == 'l' ? to_lower(c) : to_title(c));
}

// Python's printable: every character except the categories "Other" and "Separator", the space
// excepted.
bool is_printable(char32_t c) {
  if (c == ' ') return true;
  if (c < 0x7f) return c >= 0x20;
  switch (category(c)) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

bool is_line_break(char32_t c) {
  switch (c) {
    case '\n': case '\r': case 0x0b: case 0x0c: case 0x1c: case 0x1d: case 0x1e: case 0x85:
    case 0x2028: case 0x2029:
      return true;
    default:
      return false;
  }
}

std::u32string strip_set(const std::optional<std::string>& chars) {
  return chars ? decode(*chars) : std::u32string();
}

}  // namespace

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
    for (size_t k = 1; ok && k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      ok = (b >> 6) == 0x2;
      cp = (cp << 6) | (b & 0x3f);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    if (ok && ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
               (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF))
      ok = false;
    if (ok) {
      out.push_back(cp);
      i += n;
    } else {
      out.push_back(kEscapeBase + c);
      ++i;
    }
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c >= kEscapeBase + 0x80 && c <= kEscapeBase + 0xff) {
    out.push_back(static_cast<char>(c - kEscapeBase));  // an undecodable byte taken in by decode()
    return;
  }
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3f)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3f)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3f)));
  }
}

std::string encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

size_t length(std::string_view s) { return is_ascii(s) ? s.size() : decode(s).size(); }

bool is_space(char32_t c) {
  if (c <= 0x20) return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f);
  switch (c) {
    case 0x85: case 0xa0: case 0x1680: case 0x2028: case 0x2029: case 0x202f: case 0x205f:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200a;
  }
}

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::u32string u = decode(s);
  const std::u32string set = strip_set(chars);
  auto strip_it = [&](char32_t c) { return chars ? in_set(c, set) : is_space(c); };
  size_t b = 0, e = u.size();
  if (left) while (b < e && strip_it(u[b])) ++b;
  if (right) while (e > b && strip_it(u[e - 1])) --e;
  return encode(std::u32string_view(u).substr(b, e - b));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) throw RenderError("str.split(): empty separator");
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      const size_t at = s.find(*sep, pos);
      if (at == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, at - pos));
      pos = at + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  const std::u32string u = decode(s);
  size_t i = 0;
  while (true) {
    while (i < u.size() && is_space(u[i])) ++i;
    if (i == u.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.push_back(encode(std::u32string_view(u).substr(i)));
      break;
    }
    size_t j = i;
    while (j < u.size() && !is_space(u[j])) ++j;
    out.push_back(encode(std::u32string_view(u).substr(i, j - i)));
    i = j;
  }
  return out;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) throw RenderError("str.rsplit(): empty separator");
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      const size_t at = s.rfind(*sep, end - sep->size());
      if (at == std::string_view::npos) break;
      out.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
      end = at;
    }
    out.emplace_back(s.substr(0, end));
  } else {
    const std::u32string u = decode(s);
    size_t j = u.size();
    while (true) {
      while (j > 0 && is_space(u[j - 1])) --j;
      if (j == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        out.push_back(encode(std::u32string_view(u).substr(0, j)));
        break;
      }
      size_t i = j;
      while (i > 0 && !is_space(u[i - 1])) --i;
      out.push_back(encode(std::u32string_view(u).substr(i, j - i)));
      j = i;
    }
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  const std::u32string u = decode(s);
  std::vector<std::string> out;
  size_t i = 0;
  while (i < u.size()) {
    size_t j = i;
    while (j < u.size() && !is_line_break(u[j])) ++j;
    size_t eol = j;
    if (j < u.size()) eol = (u[j] == '\r' && j + 1 < u.size() && u[j + 1] == '\n') ? j + 2 : j + 1;
    out.push_back(encode(std::u32string_view(u).substr(i, (keepends ? eol : j) - i)));
    i = eol;
  }
  return out;
}

std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts the replacement before every code point and at the end.
    const std::u32string u = decode(s);
    int64_t done = 0;
    for (char32_t c : u) {
      if (count < 0 || done < count) { out += repl; ++done; }
      append_utf8(out, c);
    }
    if (count < 0 || done < count) out += repl;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(old, pos);
    if (at == std::string_view::npos) break;
    out.append(s.substr(pos, at - pos));
    out.append(repl);
    pos = at + old.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

int64_t count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(length(s)) + 1;
  int64_t n = 0;
  for (size_t at = s.find(sub); at != std::string_view::npos; at = s.find(sub, at + sub.size())) ++n;
  return n;
}

int64_t find(std::string_view s, std::string_view sub, bool reverse) {
  const size_t at = reverse ? s.rfind(sub) : s.find(sub);
  if (at == std::string_view::npos) return -1;
  return static_cast<int64_t>(length(s.substr(0, at)));
}

std::string upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : decode(s)) append_mapped(out, c, 'u');
  return out;
}

std::string lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : decode(s)) append_mapped(out, c, 'l');
  return out;
}

std::string title(std::string_view s) {
  std::string out;
  bool previous_cased = false;
  for (char32_t c : decode(s)) {
    append_mapped(out, c, previous_cased ? 'l' : 't');
    previous_cased = is_cased(c);
  }
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out;
  bool first = true;
  for (char32_t c : decode(s)) {
    append_mapped(out, c, first ? 't' : 'l');
    first = false;
  }
  return out;
}

bool all_of_class(std::string_view s, char kind) {
  const std::u32string u = decode(s);
  if (u.empty()) return false;
  auto is_alpha = [](char32_t c) {
    const auto cat = category(c);
    return cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
  };
  auto is_digit = [](char32_t c) { return category(c) == UTF8PROC_CATEGORY_ND; };
  auto is_numeric = [](char32_t c) {
    const auto cat = category(c);
    return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
  };
  switch (kind) {
    case 'a': return std::all_of(u.begin(), u.end(), is_alpha);
    case 'd': return std::all_of(u.begin(), u.end(), is_digit);
    case 'n': return std::all_of(u.begin(), u.end(), [&](char32_t c) { return is_alpha(c) || is_numeric(c); });
    case 's': return std::all_of(u.begin(), u.end(), is_space);
    case 'l':
    case 'u': {
      bool any_cased = false;
      for (char32_t c : u) {
        const auto cat = category(c);
        if (cat == UTF8PROC_CATEGORY_LT) return false;
        if (cat == UTF8PROC_CATEGORY_LU) { if (kind == 'l') return false; any_cased = true; }
        if (cat == UTF8PROC_CATEGORY_LL) { if (kind == 'u') return false; any_cased = true; }
      }
      return any_cased;
    }
    default: return false;
  }
}

std::string repr(std::string_view s) {
  const std::u32string u = decode(s);
  const bool has_single = u.find(U'\'') != std::u32string::npos;
  const bool has_double = u.find(U'"') != std::u32string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : u) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (is_printable(c)) {
      append_utf8(out, c);
    } else if (c < 0x100) {
      out += fmt::format("\\x{:02x}", static_cast<uint32_t>(c));
    } else if (c < 0x10000) {
      out += fmt::format("\\u{:04x}", static_cast<uint32_t>(c));
    } else {
      out += fmt::format("\\U{:08x}", static_cast<uint32_t>(c));
    }
  }
  out.push_back(quote);
  return out;
}

}  // namespace fsdpp::data::jinja::text
