#include "jinja_lexer.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "jinja_error.h"
#include "jinja_text.h"

namespace fsdpp::data::jinja {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run();

 private:
  // Python's \s for one code point at `pos`; its byte length, 0 when not whitespace.
  size_t space_at(size_t pos) const;
  size_t skip_spaces(size_t pos) const {
    while (size_t n = space_at(pos)) pos += n;
    return pos;
  }
  bool starts_with(size_t pos, const char* s) const { return src_.compare(pos, std::strlen(s), s) == 0; }
  [[noreturn]] void fail(size_t pos, const std::string& what) const;
  void push(TokenType type, std::string value, size_t pos);

  // The text before a tag, with the tag's whitespace control applied: '-' strips it to its
  // last non-whitespace character; lstrip_blocks drops the indentation of a block tag or
  // comment alone on its line.
  std::string strip_before(std::string_view text, char sign, bool block_like) const;
  // {% raw %} at `pos`: the end of its opening tag, or npos.
  size_t raw_begin_end(size_t pos) const;
  size_t lex_raw(size_t body_begin);
  size_t lex_comment(size_t pos, size_t open);
  size_t lex_tag(size_t pos, bool block, size_t open);
  size_t lex_string(size_t pos);
  size_t lex_number(size_t pos);

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  bool line_starting_ = true;  // the last match ended with a newline (jinja2's lstrip rule)
};

size_t Lexer::space_at(size_t pos) const {
  if (pos >= src_.size()) return 0;
  const auto c = static_cast<unsigned char>(src_[pos]);
  if (c < 0x80) return text::is_space(c) ? 1 : 0;
  const size_t n = (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 1;
  const std::u32string u = text::decode(std::string_view(src_).substr(pos, n));
  return u.size() == 1 && text::is_space(u[0]) ? n : 0;
}

void Lexer::fail(size_t pos, const std::string& what) const {
  const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos) - 1;
  const int line = static_cast<int>(it - line_starts_.begin()) + 1;
  const int column = static_cast<int>(text::length(std::string_view(src_).substr(*it, pos - *it))) + 1;
  throw SyntaxError(line, column, what);
}

void Lexer::push(TokenType type, std::string value, size_t pos) {
  const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos) - 1;
  const int line = static_cast<int>(it - line_starts_.begin()) + 1;
  const int column = static_cast<int>(text::length(std::string_view(src_).substr(*it, pos - *it))) + 1;
  tokens_.push_back(Token{type, std::move(value), line, column});
}

std::string Lexer::strip_before(std::string_view text, char sign, bool block_like) const {
  if (sign == '-') {
    size_t end = text.size();
    // Strip whole whitespace code points from the end.
    while (end > 0) {
      size_t start = end - 1;
      while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
      const std::u32string u = text::decode(text.substr(start, end - start));
      if (u.size() != 1 || !text::is_space(u[0])) break;
      end = start;
    }
    return std::string(text.substr(0, end));
  }
  if (sign != '+' && block_like) {
    const size_t nl = text.rfind('\n');
    const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
    if (l_pos > 0 || line_starting_) {
      const std::u32string tail = text::decode(text.substr(l_pos));
      if (!tail.empty() && std::all_of(tail.begin(), tail.end(), text::is_space))
        return std::string(text.substr(0, l_pos));
    }
  }
  return std::string(text);
}

size_t Lexer::raw_begin_end(size_t pos) const {
  size_t p = pos + 2;
  if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
  p = skip_spaces(p);
  if (!starts_with(p, "raw")) return std::string::npos;
  p = skip_spaces(p + 3);
  if (starts_with(p, "-%}")) return skip_spaces(p + 3);
  if (starts_with(p, "%}")) return p + 2;
  return std::string::npos;
}

size_t Lexer::lex_raw(size_t body_begin) {
  for (size_t p = src_.find("{%", body_begin); p != std::string::npos; p = src_.find("{%", p + 1)) {
    size_t q = p + 2;
    const char sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q] : 0;
    if (sign) ++q;
    q = skip_spaces(q);
    if (!starts_with(q, "endraw")) continue;
    q = skip_spaces(q + 6);
    size_t end;
    if (starts_with(q, "+%}")) end = q + 3;
    else if (starts_with(q, "-%}")) end = skip_spaces(q + 3);
    else if (starts_with(q, "%}")) end = q + 2 + (q + 2 < src_.size() && src_[q + 2] == '\n');
    else continue;
    std::string body = strip_before(std::string_view(src_).substr(body_begin, p - body_begin), sign, true);
    if (!body.empty()) push(TokenType::kData, std::move(body), body_begin);
    line_starting_ = src_[end - 1] == '\n';
    return end;
  }
  fail(body_begin, "missing {% endraw %} for a {% raw %} block");
}

size_t Lexer::lex_comment(size_t pos, size_t open) {
  for (size_t p = pos; p < src_.size(); ++p) {
    size_t end = 0;
    if (starts_with(p, "+#}")) end = p + 3;
    else if (starts_with(p, "-#}")) end = skip_spaces(p + 3);
    else if (starts_with(p, "#}")) end = p + 2 + (p + 2 < src_.size() && src_[p + 2] == '\n');
    if (end) {
      line_starting_ = src_[end - 1] == '\n';
      return end;
    }
  }
  fail(open, "missing end of comment tag '#}'");
}

size_t Lexer::lex_string(size_t pos) {
  const char quote = src_[pos];
  std::string value;
  size_t p = pos + 1;
  while (true) {
    if (p >= src_.size()) fail(pos, "unterminated string literal");
    const char c = src_[p];
    if (c == quote) break;
    if (c != '\\') {
      value.push_back(c);
      ++p;
      continue;
    }
    // Python's unicode-escape, which jinja2 decodes string literals with.
    if (p + 1 >= src_.size()) fail(pos, "unterminated string literal");
    const char e = src_[p + 1];
    p += 2;
    auto hex = [&](size_t digits) {
      if (p + digits > src_.size()) fail(pos, "truncated escape in string literal");
      char32_t cp = 0;
      for (size_t k = 0; k < digits; ++k) {
        const char h = src_[p + k];
        const int d = is_digit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
        if (d < 0) fail(pos, "truncated escape in string literal");
        cp = cp * 16 + static_cast<char32_t>(d);
      }
      p += digits;
      if (cp > 0x10FFFF) fail(pos, "illegal Unicode character in string literal");
      text::append_utf8(value, cp);
    };
    switch (e) {
      case '\n': break;
      case '\\': value.push_back('\\'); break;
      case '\'': value.push_back('\''); break;
      case '"': value.push_back('"'); break;
      case 'a': value.push_back('\a'); break;
      case 'b': value.push_back('\b'); break;
      case 'f': value.push_back('\f'); break;
      case 'n': value.push_back('\n'); break;
      case 'r': value.push_back('\r'); break;
      case 't': value.push_back('\t'); break;
      case 'v': value.push_back('\v'); break;
      case 'x': hex(2); break;
      case 'u': hex(4); break;
      case 'U': hex(8); break;
      default:
        if (e >= '0' && e <= '7') {
          char32_t cp = static_cast<char32_t>(e - '0');
          for (int k = 0; k < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++k, ++p)
            cp = cp * 8 + static_cast<char32_t>(src_[p] - '0');
          text::append_utf8(value, cp);
        } else {
          value.push_back('\\');  // Python keeps unknown escapes as written
          --p;
        }
    }
  }
  push(TokenType::kString, std::move(value), pos);
  return p + 1;
}

size_t Lexer::lex_number(size_t pos) {
  auto digits = [&](size_t p) {  // (\d+_)*\d+ ; returns the end, or p when none
    size_t q = p;
    while (q < src_.size() && is_digit(src_[q])) {
      while (q < src_.size() && is_digit(src_[q])) ++q;
      if (q + 1 < src_.size() && src_[q] == '_' && is_digit(src_[q + 1])) ++q;
    }
    return q;
  };
  // Floats: digits with a fraction, an exponent or both (jinja2's float_re).
  const bool after_dot = pos > 0 && src_[pos - 1] == '.';
  const size_t int_end = digits(pos);
  if (!after_dot) {
    size_t q = int_end;
    bool is_float = false;
    if (q + 1 < src_.size() && src_[q] == '.' && is_digit(src_[q + 1])) {
      q = digits(q + 1);
      is_float = true;
    }
    if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
      size_t r = q + 1;
      if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
      if (r < src_.size() && is_digit(src_[r])) {
        q = digits(r);
        is_float = true;
      }
    }
    if (is_float) {
      push(TokenType::kFloat, src_.substr(pos, q - pos), pos);
      return q;
    }
  }
  size_t q = pos + 1;
  if (src_[pos] == '0' && q < src_.size() && std::strchr("bBoOxX", src_[q]) && src_[q] != 0) {
    const char base = static_cast<char>(src_[q] | 0x20);
    auto ok = [&](char c) {
      c = static_cast<char>(c | 0x20);
      return base == 'b' ? (c == '0' || c == '1') : base == 'o' ? (c >= '0' && c <= '7') : (is_digit(c) || (c >= 'a' && c <= 'f'));
    };
    size_t r = q + 1;
    while (r < src_.size() && (ok(src_[r]) || (src_[r] == '_' && r + 1 < src_.size() && ok(src_[r + 1])))) ++r;
    if (r > q + 1) {
      push(TokenType::kInteger, src_.substr(pos, r - pos), pos);
      return r;
    }
  }
  if (src_[pos] == '0') {  // 0(_?0)*
    while (q < src_.size() && (src_[q] == '0' || (src_[q] == '_' && q + 1 < src_.size() && src_[q + 1] == '0'))) ++q;
  } else {
    q = int_end;
  }
  push(TokenType::kInteger, src_.substr(pos, q - pos), pos);
  return q;
}

size_t Lexer::lex_tag(size_t pos, bool block, size_t open) {
  std::vector<std::pair<char, size_t>> balance;  // expected closer, where its opener is
  size_t p = pos;
  while (true) {
    if (balance.empty()) {
      size_t end = 0;
      if (block) {
        if (starts_with(p, "+%}")) end = p + 3;
        else if (starts_with(p, "-%}")) end = skip_spaces(p + 3);
        else if (starts_with(p, "%}")) end = p + 2 + (p + 2 < src_.size() && src_[p + 2] == '\n');
      } else {
        if (starts_with(p, "-}}")) end = skip_spaces(p + 3);
        else if (starts_with(p, "}}")) end = p + 2;
      }
      if (end) {
        push(block ? TokenType::kBlockEnd : TokenType::kVariableEnd, "", p);
        line_starting_ = src_[end - 1] == '\n';
        return end;
      }
    }
    if (size_t n = space_at(p)) {
      p += n;
      continue;
    }
    if (p >= src_.size()) {
      fail(open, fmt::format("the tag opened here is not closed; expected '{}' before the end of the template",
                             block ? "%}" : "}}"));
    }
    const char c = src_[p];
    if (is_digit(c)) {
      p = lex_number(p);
    } else if (is_name_start(c)) {
      size_t q = p;
      while (q < src_.size() && is_name_char(src_[q])) ++q;
      push(TokenType::kName, src_.substr(p, q - p), p);
      p = q;
    } else if (c == '\'' || c == '"') {
      p = lex_string(p);
    } else {
      static const char* const kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
      std::string op;
      for (const char* two : kTwo)
        if (starts_with(p, two)) op = two;
      if (op.empty() && std::strchr("+-/*%~[](){}><=.:|,;", c) && c != 0) op = std::string(1, c);
      if (op.empty()) fail(p, fmt::format("unexpected character '{}'", text::encode(text::decode(src_.substr(p, 4)).substr(0, 1))));
      if (op == "{" || op == "(" || op == "[") {
        balance.emplace_back(op == "{" ? '}' : op == "(" ? ')' : ']', p);
      } else if (op == "}" || op == ")" || op == "]") {
        if (balance.empty()) fail(p, fmt::format("unexpected '{}'", op));
        if (balance.back().first != op[0])
          fail(p, fmt::format("unexpected '{}', expected '{}'", op, balance.back().first));
        balance.pop_back();
      }
      push(TokenType::kOperator, op, p);
      p += op.size();
    }
  }
}

std::vector<Token> Lexer::run() {
  size_t pos = 0;
  while (pos < src_.size()) {
    size_t open = pos;
    while ((open = src_.find('{', open)) != std::string::npos) {
      if (open + 1 < src_.size() && (src_[open + 1] == '{' || src_[open + 1] == '%' || src_[open + 1] == '#')) break;
      ++open;
    }
    if (open == std::string::npos) {
      push(TokenType::kData, src_.substr(pos), pos);
      break;
    }
    const char kind = src_[open + 1];
    size_t after = open + 2;
    const char sign = after < src_.size() && (src_[after] == '-' || src_[after] == '+') ? src_[after] : 0;
    if (sign) ++after;
    const size_t raw_end = kind == '%' ? raw_begin_end(open) : std::string::npos;
    std::string text = strip_before(std::string_view(src_).substr(pos, open - pos), sign, kind != '{');
    if (!text.empty()) push(TokenType::kData, std::move(text), pos);
    line_starting_ = false;
    if (raw_end != std::string::npos) {
      line_starting_ = src_[raw_end - 1] == '\n';
      pos = lex_raw(raw_end);
    } else if (kind == '#') {
      pos = lex_comment(after, open);
    } else {
      push(kind == '%' ? TokenType::kBlockBegin : TokenType::kVariableBegin, "", open);
      pos = lex_tag(after, kind == '%', open);
    }
  }
  push(TokenType::kEof, "", src_.size());
  return std::move(tokens_);
}

}  // namespace

std::string normalize_newlines(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::vector<Token> tokenize(const std::string& source) { return Lexer(normalize_newlines(source)).run(); }

}  // namespace fsdpp::data::jinja
