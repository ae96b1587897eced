#pragma once
// A tokenizer.json regular expression run by PCRE2 (8-bit, UTF + UCP, JIT-compiled).
//
// The tokenizers library compiles these patterns with Oniguruma (Ruby-like syntax). PCRE2 reads
// the same syntax for everything the published files use (\p{L}, \p{N}, (?!\S), (?i:...),
// possessive and lazy quantifiers), with three differences that the constructor rewrites away:
//   \s, \S   PCRE2's includes U+180E (MONGOLIAN VOWEL SEPARATOR), Oniguruma's is White_Space;
//            both become White_Space written out (a class of its own outside brackets, its
//            ranges inside them; \S inside brackets is refused: it cannot be written as ranges)
//   \w, \W   PCRE2's is L, N and _; Oniguruma's is Alphabetic, marks, Nd, Pc and the joiners
//   \h, \H   Oniguruma's is a hex digit, PCRE2's horizontal space
//   \uHHHH   Oniguruma's code point escape, \x{HHHH} for PCRE2
// Character-class intersections ([a-z&&[^aeiou]]) and nested classes, which PCRE2 would read as
// literal characters, are refused. ^ and $ match at line starts and ends, as in Ruby.
//
// Matches are found as Oniguruma's iterator (rust-onig's find_iter) finds them: leftmost-first,
// left to right, each search starting where the previous match ended, an empty match right
// after the previous match skipped by one character.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct pcre2_real_code_8;

namespace fsdpp::data {

class Pcre2Regex {
 public:
  // `pattern` as written in tokenizer.json; `where` names it in errors ("[data] <where>: ...").
  // Throws ConfigError with PCRE2's message and the offset in the pattern.
  Pcre2Regex(std::string_view pattern, std::string_view where);
  // A regex that matches `text` literally (a Split or Replace "String" pattern).
  static Pcre2Regex literal(std::string_view text, std::string_view where);
  ~Pcre2Regex();
  Pcre2Regex(Pcre2Regex&& other) noexcept;
  Pcre2Regex& operator=(Pcre2Regex&&) = delete;
  Pcre2Regex(const Pcre2Regex&) = delete;

  // Appends the (begin, end) byte offsets of every match in `text`, which must be valid UTF-8.
  // Safe to call from several threads at once.
  void find_all(std::string_view text, std::vector<std::pair<uint32_t, uint32_t>>& matches) const;

  // The pattern PCRE2 compiled (after the rewrites above).
  const std::string& compiled_pattern() const { return compiled_; }

 private:
  Pcre2Regex(std::string compiled, uint32_t options, std::string_view where);

  pcre2_real_code_8* code_ = nullptr;
  bool jit_ = false;
  std::string compiled_;
  std::string where_;
};

// The Oniguruma -> PCRE2 rewrite described above; `where` names the pattern in errors.
std::string oniguruma_to_pcre2(std::string_view pattern, std::string_view where);

}  // namespace fsdpp::data
