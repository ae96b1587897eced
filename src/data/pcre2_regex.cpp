// tokenizer.json regexes through PCRE2. See pcre2_regex.h.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "pcre2_regex.h"

#include <pcre2.h>

#include <memory>

#include "fsdpp/common/error.h"
#include "unicode_text.h"

namespace fsdpp::data {
namespace {

// White_Space (Oniguruma's and the regex crate's \s) as class ranges.
constexpr const char* kSpaceRanges =
    "\\t-\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}"
    "\\x{3000}";
// Oniguruma's \w: Alphabetic (L, Nl and the enclosed letters), marks, Nd, Pc, the joiners.
constexpr const char* kWordRanges =
    "\\p{L}\\p{Nl}\\p{M}\\p{Nd}\\p{Pc}\\x{200c}\\x{200d}\\x{24b6}-\\x{24e9}\\x{1f130}-\\x{1f149}"
    "\\x{1f150}-\\x{1f169}\\x{1f170}-\\x{1f189}";
constexpr const char* kHexRanges = "0-9a-fA-F";

bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};
struct MatchContextDeleter {
  void operator()(pcre2_match_context* m) const { pcre2_match_context_free(m); }
};
struct JitStackDeleter {
  void operator()(pcre2_jit_stack* s) const { pcre2_jit_stack_free(s); }
};

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof(buf)) < 0) return fmt::format("error {}", code);
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

std::string oniguruma_to_pcre2(std::string_view p, std::string_view where) {
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  bool class_start = false;  // just after "[" or "[^": a "]" here is a literal
  for (size_t i = 0; i < p.size();) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char d = p[i + 1];
      auto negated_outside = [&](const char* ranges) {
        FSDPP_CHECK_AS(ConfigError, !in_class,
                       "[data] {}: regex '{}' has \\{} inside a character class at offset {}; "
                       "supported inside classes: \\s, \\w, \\h (and \\{} outside them)",
                       where, p, d, i, d);
        out += fmt::format("[^{}]", ranges);
      };
      if (d == 's') {
        out += in_class ? std::string(kSpaceRanges) : fmt::format("[{}]", kSpaceRanges);
      } else if (d == 'S') {
        negated_outside(kSpaceRanges);
      } else if (d == 'w') {
        out += in_class ? std::string(kWordRanges) : fmt::format("[{}]", kWordRanges);
      } else if (d == 'W') {
        negated_outside(kWordRanges);
      } else if (d == 'h') {
        out += in_class ? std::string(kHexRanges) : fmt::format("[{}]", kHexRanges);
      } else if (d == 'H') {
        negated_outside(kHexRanges);
      } else if (d == 'u' && i + 6 <= p.size() && is_hex(p[i + 2]) &&
                 is_hex(p[i + 3]) && is_hex(p[i + 4]) && is_hex(p[i + 5])) {
        out += fmt::format("\\x{{{}}}", p.substr(i + 2, 4));
        i += 6;
        class_start = false;
        continue;
      } else {
        out += c;
        out += d;
      }
      i += 2;
      class_start = false;
      continue;
    }
    if (in_class) {
      if (c == '[') {
        if (i + 1 < p.size() && p[i + 1] == ':') {  // a POSIX class, [:alpha:]
          const size_t close = p.find(":]", i + 2);
          FSDPP_CHECK_AS(ConfigError, close != std::string_view::npos,
                         "[data] {}: regex '{}' has an unterminated [: at offset {}", where, p, i);
          out.append(p.substr(i, close + 2 - i));
          i = close + 2;
          class_start = false;
          continue;
        }
        FSDPP_THROW(ConfigError,
                    "[data] {}: regex '{}' has a nested character class at offset {}; PCRE2 "
                    "would read it as a literal '[' (supported: flat classes)",
                    where, p, i);
      }
      FSDPP_CHECK_AS(ConfigError, !(c == '&' && i + 1 < p.size() && p[i + 1] == '&'),
                     "[data] {}: regex '{}' has a class intersection (&&) at offset {}; "
                     "supported: flat classes",
                     where, p, i);
      if (c == ']' && !class_start) in_class = false;
      out += c;
      class_start = false;
      ++i;
      continue;
    }
    out += c;
    ++i;
    if (c == '[') {
      in_class = true;
      class_start = true;
      if (i < p.size() && p[i] == '^') out += p[i++];
    }
  }
  return out;
}

Pcre2Regex::Pcre2Regex(std::string compiled, uint32_t options, std::string_view where)
    : compiled_(std::move(compiled)), where_(where) {
  std::unique_ptr<pcre2_compile_context, void (*)(pcre2_compile_context*)> ctx(
      pcre2_compile_context_create(nullptr), pcre2_compile_context_free);
  // Oniguruma's newline is LF only: "." excludes it and ^/$ (multi-line) stop at it.
  pcre2_set_newline(ctx.get(), PCRE2_NEWLINE_LF);
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled_.data()), compiled_.size(),
                        options | PCRE2_UTF, &error, &offset, ctx.get());
  FSDPP_CHECK_AS(ConfigError, code_ != nullptr,
                 "[data] {}: regex '{}' does not compile: {} at offset {} (PCRE2, UTF)", where_,
                 compiled_, pcre2_message(error), offset);
  // Without JIT (a PCRE2 built without it) the interpreter gives the same matches, slower.
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
}

Pcre2Regex::Pcre2Regex(std::string_view pattern, std::string_view where)
    : Pcre2Regex(oniguruma_to_pcre2(pattern, where), PCRE2_UCP | PCRE2_MULTILINE, where) {}

Pcre2Regex Pcre2Regex::literal(std::string_view text, std::string_view where) {
  return Pcre2Regex(std::string(text), PCRE2_LITERAL, where);
}

Pcre2Regex::Pcre2Regex(Pcre2Regex&& other) noexcept
    : code_(other.code_), jit_(other.jit_), compiled_(std::move(other.compiled_)),
      where_(std::move(other.where_)) {
  other.code_ = nullptr;
}

Pcre2Regex::~Pcre2Regex() {
  if (code_ != nullptr) pcre2_code_free(code_);
}

void Pcre2Regex::find_all(std::string_view text,
                          std::vector<std::pair<uint32_t, uint32_t>>& matches) const {
  if (text.empty()) return;  // the tokenizers library does not search an empty string
  // Match data per call: a compiled pattern is shared by threads, match data is not.
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(
      pcre2_match_data_create_from_pattern(code_, nullptr));
  FSDPP_CHECK(md != nullptr, "[data] {}: out of memory for PCRE2 match data", where_);
  std::unique_ptr<pcre2_match_context, MatchContextDeleter> mctx;
  std::unique_ptr<pcre2_jit_stack, JitStackDeleter> stack;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  size_t last_end = 0;
  bool matched_before = false;
  size_t last_match_end = 0;
  while (last_end <= n) {
    const int rc = jit_ ? pcre2_jit_match(code_, subject, n, last_end, 0, md.get(), mctx.get())
                        : pcre2_match(code_, subject, n, last_end, PCRE2_NO_UTF_CHECK, md.get(),
                                      mctx.get());
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !stack) {
      // The default 32 KiB is enough for the published patterns; a pathological one gets more.
      mctx.reset(pcre2_match_context_create(nullptr));
      stack.reset(pcre2_jit_stack_create(32 * 1024, 256 * 1024 * 1024, nullptr));
      FSDPP_CHECK(mctx && stack, "[data] {}: out of memory for a PCRE2 JIT stack", where_);
      pcre2_jit_stack_assign(mctx.get(), nullptr, stack.get());
      continue;
    }
    FSDPP_CHECK(rc >= 0, "[data] {}: regex '{}' failed on {} bytes of text: {}", where_, compiled_,
                n, pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t s = ov[0], e = ov[1];
    if (s == e && matched_before && last_match_end == e) {
      last_end += e < n ? unicode::char_length(static_cast<unsigned char>(text[e])) : 1;
      continue;
    }
    last_end = e;
    last_match_end = e;
    matched_before = true;
    matches.emplace_back(static_cast<uint32_t>(s), static_cast<uint32_t>(e));
  }
}

}  // namespace fsdpp::data
