// tokenizer.json decoders. See token_decoders.h.
#include "token_decoders.h"

#include <array>

#include "byte_level_alphabet.h"
#include "json_pattern.h"
#include "unicode_text.h"

namespace fsdpp::data {
namespace {

constexpr const char* kSupported =
    "ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, BPEDecoder, Sequence";

// GPT-2's printable characters back to bytes; a token with any other character (an added
// token's text) is kept as it is. The bytes of all tokens are then read as UTF-8, each
// ill-formed sequence becoming U+FFFD.
class ByteLevel final : public TokenDecoder {
 public:
  ByteLevel() {
    byte_of_.fill(-1);
    for (int b = 0; b < 256; ++b) byte_of_[byte_level_char(static_cast<uint8_t>(b))] = static_cast<int16_t>(b);
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const auto& t : tokens) {
      const size_t mark = bytes.size();
      bool all = true;
      for (size_t i = 0; i < t.size() && all;) {
        size_t len = 0;
        const char32_t c = unicode::decode(t, i, &len);
        i += len;
        if (c < byte_of_.size() && byte_of_[c] >= 0) {
          bytes += static_cast<char>(byte_of_[c]);
        } else {
          all = false;
        }
      }
      if (!all) {
        bytes.resize(mark);
        bytes += t;
      }
    }
    tokens.assign(1, unicode::utf8_lossy(bytes));
  }

 private:
  std::array<int16_t, 0x144> byte_of_;  // the alphabet ends at U+0143
};

class Metaspace final : public TokenDecoder {
 public:
  Metaspace(std::string replacement, bool drop_first) : replacement_(std::move(replacement)), drop_first_(drop_first) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      // Every replacement of the first token goes (not just a leading one), as in the library.
      const std::string with = i == 0 && drop_first_ ? "" : " ";
      std::string& t = tokens[i];
      for (size_t at = t.find(replacement_); at != std::string::npos; at = t.find(replacement_, at + with.size())) {
        t.replace(at, replacement_.size(), with);
      }
    }
  }

 private:
  std::string replacement_;
  bool drop_first_;
};

// Runs of <0xXX> tokens become the text their bytes spell, or one U+FFFD per byte when they
// are not UTF-8.
class ByteFallback final : public TokenDecoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string bytes;
    size_t count = 0;
    auto flush = [&] {
      if (count == 0) return;
      if (!unicode::first_invalid_utf8(bytes)) {
        out.push_back(bytes);
      } else {
        for (size_t i = 0; i < count; ++i) out.emplace_back("\xef\xbf\xbd");
      }
      bytes.clear();
      count = 0;
    };
    for (auto& t : tokens) {
      if (const int b = byte_of(t); b >= 0) {
        bytes += static_cast<char>(b);
        ++count;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }

 private:
  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  // "<0x41>" -> 0x41; -1 for any other token. Rust's u8::from_str_radix takes "+A" too.
  static int byte_of(const std::string& t) {
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
    if (t[3] == '+') return hex(t[4]);
    const int hi = hex(t[3]), lo = hex(t[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
  }
};

class Fuse final : public TokenDecoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

// Up to `start` leading and `stop` trailing `content` characters off each token.
class Strip final : public TokenDecoder {
 public:
  Strip(char32_t content, size_t start, size_t stop) : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      std::vector<std::pair<char32_t, size_t>> chars;  // (character, byte offset)
      for (size_t i = 0; i < t.size();) {
        size_t len = 0;
        chars.emplace_back(unicode::decode(t, i, &len), i);
        i += len;
      }
      size_t begin = 0, end = chars.size();
      for (size_t i = 0; i < start_ && i < chars.size() && chars[i].first == content_; ++i) begin = i + 1;
      for (size_t i = 0; i < stop_ && i < chars.size() && chars[chars.size() - 1 - i].first == content_; ++i) {
        end = chars.size() - 1 - i;
      }
      if (begin >= end) {
        t.clear();
        continue;
      }
      const size_t from = chars[begin].second;
      const size_t to = end < chars.size() ? chars[end].second : t.size();
      t = t.substr(from, to - from);
    }
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

class Replace final : public TokenDecoder {
 public:
  Replace(Pcre2Regex pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::pair<uint32_t, uint32_t>> matches;
    for (auto& t : tokens) {
      matches.clear();
      pattern_.find_all(t, matches);
      if (matches.empty()) continue;
      std::string out;
      uint32_t prev = 0;
      for (const auto& [s, e] : matches) {
        out.append(t, prev, s - prev);
        out += content_;
        prev = e;
      }
      out.append(t, prev, std::string::npos);
      t = std::move(out);
    }
  }

 private:
  Pcre2Regex pattern_;
  std::string content_;
};

// The end-of-word suffix becomes a space (nothing after the last token).
class BpeSuffix final : public TokenDecoder {
 public:
  explicit BpeSuffix(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    if (suffix_.empty()) return;
    for (size_t i = 0; i < tokens.size(); ++i) {
      const std::string with = i + 1 == tokens.size() ? "" : " ";
      std::string& t = tokens[i];
      for (size_t at = t.find(suffix_); at != std::string::npos; at = t.find(suffix_, at + with.size())) {
        t.replace(at, suffix_.size(), with);
      }
    }
  }

 private:
  std::string suffix_;
};

class Sequence final : public TokenDecoder {
 public:
  explicit Sequence(std::vector<std::unique_ptr<TokenDecoder>> steps) : steps_(std::move(steps)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& step : steps_) step->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<TokenDecoder>> steps_;
};

size_t count(const JsonSection& s, const char* key) {
  const int64_t v = s.integer(key, 0);
  if (v < 0) s.fail("\"{}\" is {}; expected a count >= 0", key, v);
  return static_cast<size_t>(v);
}

}  // namespace

std::unique_ptr<TokenDecoder> make_decoder(const JsonSection& s) {
  const std::string type = s.type();
  if (type == "ByteLevel") return std::make_unique<ByteLevel>();
  if (type == "Metaspace") {
    bool drop_first = s.boolean("add_prefix_space", true);
    if (s.has("prepend_scheme")) drop_first = s.string("prepend_scheme") != "never";
    return std::make_unique<Metaspace>(s.character("replacement", "\xe2\x96\x81"), drop_first);
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallback>();
  if (type == "Fuse") return std::make_unique<Fuse>();
  if (type == "Strip") {
    const std::string c = s.character("content", " ");
    size_t len = 0;
    return std::make_unique<Strip>(unicode::decode(c, 0, &len), count(s, "start"), count(s, "stop"));
  }
  if (type == "Replace") return std::make_unique<Replace>(read_pattern(s), s.string("content"));
  if (type == "BPEDecoder") return std::make_unique<BpeSuffix>(s.string_or("suffix", "</w>"));
  if (type == "Sequence") {
    std::vector<std::unique_ptr<TokenDecoder>> steps;
    const auto& list = s.array("decoders");
    for (size_t i = 0; i < list.size(); ++i) {
      steps.push_back(make_decoder(s.child(list[i], fmt::format(".decoders[{}]", i))));
    }
    return std::make_unique<Sequence>(std::move(steps));
  }
  s.fail("'{}' is not supported; supported: {}", type, kSupported);
}

}  // namespace fsdpp::data
