#pragma once
// Python's str operations on UTF-8 text, as chat templates call them: lengths, indices and slices
// count code points (Python strings are sequences of code points, so `id|length != 9` and
// `content[:-1]` count characters, not bytes), whitespace is str.isspace()'s set (which jinja2's
// `-` whitespace control and `trim` also strip), case mapping is Unicode's (utf8proc's simple
// mappings; Python's full mappings differ only for a few characters such as 'ß'.upper()).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fsdpp::data::jinja::text {

// Decodes UTF-8; a byte that starts no valid sequence is taken as one code point U+DC80+byte
// (Python's surrogateescape), so every input round-trips through encode().
std::u32string decode(std::string_view s);
std::string encode(std::u32string_view s);
void append_utf8(std::string& out, char32_t c);

// The number of code points (len(s)).
size_t length(std::string_view s);
bool is_ascii(std::string_view s);

// str.isspace() for one code point.
bool is_space(char32_t c);

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split(sep, maxsplit) / str.rsplit: no sep splits on runs of whitespace and drops empty parts.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> splitlines(std::string_view s, bool keepends);
// str.replace(old, new, count); count < 0: all.
std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);
// str.count(sub), str.find(sub) / rfind in code points (-1 when absent).
int64_t count(std::string_view s, std::string_view sub);
int64_t find(std::string_view s, std::string_view sub, bool reverse);

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string title(std::string_view s);       // str.title()
std::string capitalize(std::string_view s);  // str.capitalize()
// str.isalpha() / isdigit() / isalnum() / islower() / isupper() / isspace()
bool all_of_class(std::string_view s, char kind);

// Python's repr of a str: single quotes unless the text holds ' and no ", backslash escapes for
// the quote, \\, \n, \r, \t and characters that are not printable.
std::string repr(std::string_view s);

}  // namespace fsdpp::data::jinja::text
