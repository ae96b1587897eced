// tokenizer.json pre-tokenizers. See pre_tokenizers.h.
#include "pre_tokenizers.h"

#include "json_pattern.h"
#include "unicode_text.h"

namespace fsdpp::data {
namespace {

constexpr const char* kSupported = "ByteLevel, Split, Metaspace, Digits, Sequence";
// GPT-2's regex, which ByteLevel splits with when use_regex is true (the library's own constant).
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

using Matches = std::vector<std::pair<uint32_t, uint32_t>>;

class ByteLevel final : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex, const std::string& where)
      : add_prefix_space_(add_prefix_space),
        regex_(use_regex ? std::make_unique<Pcre2Regex>(kGpt2Pattern, where) : nullptr) {}
  void split(const TextPiece& piece, std::vector<TextPiece>& out, PieceArena& arena) const override {
    TextPiece p = piece;
    if (add_prefix_space_ && (p.text.empty() || p.text[0] != ' ')) {
      std::string& s = arena.make();
      s.reserve(p.text.size() + 1);
      s += ' ';
      s.append(p.text);
      p = {s, p.at_start > 0 ? p.at_start + 1 : 0};
    }
    if (!regex_) {
      if (!p.text.empty()) out.push_back(p);
      return;
    }
    Matches matches;
    regex_->find_all(p.text, matches);
    split_at_matches(p, matches, SplitBehavior::kIsolated, false, out);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Pcre2Regex> regex_;
};

SplitBehavior behavior_of(const JsonSection& s) {
  const std::string b = s.string("behavior");
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  s.fail("\"behavior\" is '{}'; expected Removed, Isolated, MergedWithPrevious, MergedWithNext or "
         "Contiguous",
         b);
}

class Split final : public PreTokenizer {
 public:
  Split(Pcre2Regex pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void split(const TextPiece& piece, std::vector<TextPiece>& out, PieceArena&) const override {
    Matches matches;
    pattern_.find_all(piece.text, matches);
    split_at_matches(piece, matches, behavior_, invert_, out);
  }

 private:
  Pcre2Regex pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

enum class PrependScheme { kFirst, kNever, kAlways };

// Spaces become `replacement` ("▁"), which is put before the piece as the scheme says; with
// split, the piece is cut before every replacement.
class Metaspace final : public PreTokenizer {
 public:
  Metaspace(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void split(const TextPiece& piece, std::vector<TextPiece>& out, PieceArena& arena) const override {
    std::string& s = arena.make();
    s.reserve(piece.text.size() + 8);
    uint32_t at_start = 0;
    const bool starts_text = piece.at_start > 0;
    for (size_t i = 0; i < piece.text.size(); ++i) {
      if (piece.text[i] == ' ') {
        s += replacement_;
      } else {
        s += piece.text[i];
      }
      if (i + 1 == piece.at_start) at_start = static_cast<uint32_t>(s.size());
    }
    const bool starts_with_replacement = s.compare(0, replacement_.size(), replacement_) == 0;
    const bool prepend = !starts_with_replacement &&
                         (scheme_ == PrependScheme::kAlways ||
                          (scheme_ == PrependScheme::kFirst && starts_text));
    if (prepend) {
      s.insert(0, replacement_);
      if (at_start > 0) at_start += static_cast<uint32_t>(replacement_.size());
    }
    const TextPiece p{s, at_start};
    if (!split_) {
      if (!s.empty()) out.push_back(p);
      return;
    }
    Matches matches;
    for (size_t at = s.find(replacement_); at != std::string::npos;
         at = s.find(replacement_, at + replacement_.size())) {
      matches.emplace_back(static_cast<uint32_t>(at), static_cast<uint32_t>(at + replacement_.size()));
    }
    split_at_matches(p, matches, SplitBehavior::kMergedWithNext, false, out);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

// Numbers (Rust's char::is_numeric) apart from the rest: each digit alone, or runs of them.
class Digits final : public PreTokenizer {
 public:
  explicit Digits(bool individual) : individual_(individual) {}
  void split(const TextPiece& piece, std::vector<TextPiece>& out, PieceArena&) const override {
    Matches matches;
    for (size_t i = 0; i < piece.text.size();) {
      size_t len = 0;
      if (unicode::is_numeric(unicode::decode(piece.text, i, &len))) {
        matches.emplace_back(static_cast<uint32_t>(i), static_cast<uint32_t>(i + len));
      }
      i += len;
    }
    split_at_matches(piece, matches,
                     individual_ ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, false, out);
  }

 private:
  bool individual_;
};

PrependScheme scheme_of(const JsonSection& s) {
  // Files written before prepend_scheme existed say add_prefix_space instead.
  if (!s.has("prepend_scheme")) {
    return s.boolean("add_prefix_space", true) ? PrependScheme::kAlways : PrependScheme::kNever;
  }
  const std::string scheme = s.string("prepend_scheme");
  if (scheme == "first") return PrependScheme::kFirst;
  if (scheme == "never") return PrependScheme::kNever;
  if (scheme == "always") return PrependScheme::kAlways;
  s.fail("\"prepend_scheme\" is '{}'; expected first, never or always", scheme);
}

void add_steps(const JsonSection& s, PreTokenizerSteps& out, std::vector<std::string>& byte_levels) {
  const std::string type = s.type();
  const std::string where = s.file() + ": " + s.path();
  if (type == "Sequence") {
    const auto& list = s.array("pretokenizers");
    for (size_t i = 0; i < list.size(); ++i) {
      add_steps(s.child(list[i], fmt::format(".pretokenizers[{}]", i)), out, byte_levels);
    }
    return;
  }
  if (type == "ByteLevel") {
    out.steps.push_back(std::make_unique<ByteLevel>(s.boolean("add_prefix_space", true),
                                                    s.boolean("use_regex", true), where));
    byte_levels.push_back(s.path());
    return;
  }
  if (!byte_levels.empty()) {
    s.fail("'{}' comes after ByteLevel ({}); supported: ByteLevel as the last pre-tokenizer", type,
           byte_levels.back());
  }
  if (type == "Split") {
    out.steps.push_back(
        std::make_unique<Split>(read_pattern(s), behavior_of(s), s.boolean("invert", false)));
  } else if (type == "Metaspace") {
    if (s.json().contains("add_prefix_space") && s.json().contains("prepend_scheme") &&
        !s.boolean("add_prefix_space", true) && s.string("prepend_scheme") != "never") {
      s.fail("has add_prefix_space false and prepend_scheme '{}'; expected them to agree",
             s.string("prepend_scheme"));
    }
    out.steps.push_back(std::make_unique<Metaspace>(s.character("replacement", "\xe2\x96\x81"),
                                                    scheme_of(s), s.boolean("split", true)));
  } else if (type == "Digits") {
    out.steps.push_back(std::make_unique<Digits>(s.boolean("individual_digits", false)));
  } else {
    s.fail("'{}' is not supported; supported: {}", type, kSupported);
  }
}

}  // namespace

PreTokenizerSteps make_pre_tokenizer(const JsonSection& section) {
  PreTokenizerSteps out;
  std::vector<std::string> byte_levels;
  add_steps(section, out, byte_levels);
  if (byte_levels.size() > 1) {
    section.fail("has ByteLevel twice ({} and {}); supported: one ByteLevel, the last step",
                 byte_levels[0], byte_levels[1]);
  }
  out.byte_level = !byte_levels.empty();
  return out;
}

}  // namespace fsdpp::data
