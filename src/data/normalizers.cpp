// tokenizer.json normalizers. See normalizers.h.
#include "normalizers.h"

#include <utf8proc.h>

#include <cstdlib>
#include <vector>

#include "json_pattern.h"
#include "unicode_text.h"

namespace fsdpp::data {
namespace {

constexpr const char* kSupported =
    "NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, Prepend, Replace, Sequence";

uint32_t first_char_length(const std::string& s) {
  return s.empty() ? 0 : static_cast<uint32_t>(unicode::char_length(static_cast<unsigned char>(s[0])));
}

// NFC, NFD, NFKC, NFKD through libutf8proc. ASCII is the same in every form and never combines
// with what precedes it, so only the runs of non-ASCII characters (with the one ASCII character
// before each, which a combining mark may compose with) go through utf8proc: English text costs
// a copy.
class UnicodeForm final : public Normalizer {
 public:
  explicit UnicodeForm(int options) : options_(options) {}
  void normalize(std::string_view text, std::string& out, uint32_t& at_start) const override {
    out.clear();
    out.reserve(text.size() + text.size() / 8);
    const size_t n = text.size();
    size_t i = 0;
    while (i < n) {
      size_t j = i;
      while (j < n && static_cast<unsigned char>(text[j]) < 0x80) ++j;
      if (j == n) {
        out.append(text.substr(i));
        break;
      }
      const size_t begin = j > i ? j - 1 : j;
      out.append(text.substr(i, begin - i));
      size_t end = j;
      while (end < n && static_cast<unsigned char>(text[end]) >= 0x80) ++end;
      append_normalized(text.substr(begin, end - begin), out);
      i = end;
    }
    if (at_start > 0) at_start = first_char_length(out);
  }

 private:
  void append_normalized(std::string_view run, std::string& out) const {
    utf8proc_uint8_t* result = nullptr;
    const utf8proc_ssize_t len =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(run.data()),
                     static_cast<utf8proc_ssize_t>(run.size()), &result,
                     static_cast<utf8proc_option_t>(options_));
    if (len < 0) {
      std::free(result);
      FSDPP_THROW(Error, "[data] Unicode normalization failed on {} bytes: {}", run.size(),
                  utf8proc_errmsg(len));
    }
    out.append(reinterpret_cast<const char*>(result), static_cast<size_t>(len));
    std::free(result);
  }

  int options_;
};

// Rust's char::to_lowercase per character.
class Lowercase final : public Normalizer {
 public:
  void normalize(std::string_view text, std::string& out, uint32_t& at_start) const override {
    out.clear();
    out.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
      size_t len = 0;
      unicode::append_lowercase(out, unicode::decode(text, i, &len));
      i += len;
    }
    if (at_start > 0) at_start = first_char_length(out);
  }
};

// White_Space off either end.
class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string_view text, std::string& out, uint32_t& at_start) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        size_t len = 0;
        if (!unicode::is_white_space(unicode::decode(text, begin, &len))) break;
        begin += len;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t k = end - 1;
        while (k > begin && (static_cast<unsigned char>(text[k]) & 0xc0) == 0x80) --k;
        size_t len = 0;
        if (!unicode::is_white_space(unicode::decode(text, k, &len))) break;
        end = k;
      }
    }
    out.assign(text.substr(begin, end - begin));
    if (begin > 0) at_start = 0;  // what is left starts after the input's first character
  }

 private:
  bool left_, right_;
};

// Drops combining marks (meant to follow NFD/NFKD).
class StripAccents final : public Normalizer {
 public:
  void normalize(std::string_view text, std::string& out, uint32_t& at_start) const override {
    out.clear();
    out.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
      size_t len = 0;
      const char32_t cp = unicode::decode(text, i, &len);
      if (!unicode::is_combining_mark(cp)) {
        out.append(text.substr(i, len));
      } else if (i == 0) {
        at_start = 0;
      }
      i += len;
    }
  }
};

// `prepend` before any non-empty text (Llama 2's "▁").
class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prepend) : prepend_(std::move(prepend)) {}
  void normalize(std::string_view text, std::string& out, uint32_t& at_start) const override {
    out.clear();
    if (text.empty()) return;
    out.reserve(prepend_.size() + text.size());
    out += prepend_;
    out.append(text);
    if (at_start > 0) at_start += static_cast<uint32_t>(prepend_.size());
  }

 private:
  std::string prepend_;
};

// Every match of a pattern replaced by `content`.
class Replace final : public Normalizer {
 public:
  Replace(Pcre2Regex pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::string_view text, std::string& out, uint32_t& at_start) const override {
    std::vector<std::pair<uint32_t, uint32_t>> matches;
    pattern_.find_all(text, matches);
    out.clear();
    out.reserve(text.size() + matches.size() * content_.size());
    uint32_t prev = 0;
    for (const auto& [s, e] : matches) {
      out.append(text.substr(prev, s - prev));
      out += content_;
      prev = e;
    }
    out.append(text.substr(prev));
    if (at_start > 0 && !matches.empty() && matches[0].first == 0 && matches[0].second > 0) {
      at_start = static_cast<uint32_t>(content_.size());
    }
  }

 private:
  Pcre2Regex pattern_;
  std::string content_;
};

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  void normalize(std::string_view text, std::string& out, uint32_t& at_start) const override {
    out.assign(text);
    std::string next;
    for (const auto& step : steps_) {
      step->normalize(out, next, at_start);
      out.swap(next);
    }
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const JsonSection& s) {
  const std::string type = s.type();
  if (type == "NFC") return std::make_unique<UnicodeForm>(UTF8PROC_STABLE | UTF8PROC_COMPOSE);
  if (type == "NFD") return std::make_unique<UnicodeForm>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
  if (type == "NFKC") {
    return std::make_unique<UnicodeForm>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
  }
  if (type == "NFKD") {
    return std::make_unique<UnicodeForm>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  }
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Strip") {
    return std::make_unique<Strip>(s.boolean("strip_left", true), s.boolean("strip_right", true));
  }
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "Prepend") return std::make_unique<Prepend>(s.string("prepend"));
  if (type == "Replace") return std::make_unique<Replace>(read_pattern(s), s.string("content"));
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> steps;
    const auto& list = s.array("normalizers");
    for (size_t i = 0; i < list.size(); ++i) {
      steps.push_back(make_normalizer(s.child(list[i], fmt::format(".normalizers[{}]", i))));
    }
    return std::make_unique<Sequence>(std::move(steps));
  }
  s.fail("'{}' is not supported; supported: {}", type, kSupported);
}

}  // namespace fsdpp::data
