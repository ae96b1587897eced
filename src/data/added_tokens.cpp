// tokenizer.json's added tokens. See added_tokens.h.
#include "added_tokens.h"

#include <algorithm>
#include <tuple>

#include "unicode_text.h"

namespace fsdpp::data {
namespace {

bool same_properties(const AddedToken& a, const AddedToken& b) {
  return a.content == b.content && a.single_word == b.single_word && a.lstrip == b.lstrip &&
         a.rstrip == b.rstrip && a.normalized == b.normalized && a.special == b.special;
}

// The last character of text[0, end) is a word character (the regex crate's \w$).
bool ends_with_word(std::string_view text, size_t end) {
  if (end == 0) return false;
  size_t k = end - 1;
  while (k > 0 && (static_cast<unsigned char>(text[k]) & 0xc0) == 0x80) --k;
  size_t len = 0;
  return unicode::is_word_char(unicode::decode(text, k, &len));
}

bool starts_with_word(std::string_view text, size_t at) {
  if (at >= text.size()) return false;
  size_t len = 0;
  return unicode::is_word_char(unicode::decode(text, at, &len));
}

// Where the whitespace that ends text[0, end) begins (\s*$).
size_t trailing_space_start(std::string_view text, size_t end) {
  while (end > 0) {
    size_t k = end - 1;
    while (k > 0 && (static_cast<unsigned char>(text[k]) & 0xc0) == 0x80) --k;
    size_t len = 0;
    if (!unicode::is_white_space(unicode::decode(text, k, &len))) break;
    end = k;
  }
  return end;
}

// The length of the whitespace that starts text[at, ...) (^\s*).
size_t leading_space_length(std::string_view text, size_t at) {
  size_t i = at;
  while (i < text.size()) {
    size_t len = 0;
    if (!unicode::is_white_space(unicode::decode(text, i, &len))) break;
    i += len;
  }
  return i - at;
}

}  // namespace

void AddedTokens::Trie::add(std::string_view text, int32_t token) {
  int32_t node = 0;
  for (unsigned char c : text) {
    auto& children = nodes[node].children;
    auto it = std::find_if(children.begin(), children.end(), [c](const auto& e) { return e.first == c; });
    if (it == children.end()) {
      const auto child = static_cast<int32_t>(nodes.size());
      nodes[node].children.emplace_back(c, child);
      nodes.emplace_back();
      node = child;
    } else {
      node = it->second;
    }
  }
  nodes[node].token = token;
  first_byte[static_cast<unsigned char>(text[0])] = true;
}

std::pair<int32_t, size_t> AddedTokens::Trie::longest_at(std::string_view text, size_t at) const {
  int32_t node = 0;
  std::pair<int32_t, size_t> best{-1, 0};
  for (size_t i = at; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const auto& children = nodes[node].children;
    auto it = std::find_if(children.begin(), children.end(), [c](const auto& e) { return e.first == c; });
    if (it == children.end()) break;
    node = it->second;
    if (nodes[node].token >= 0) best = {nodes[node].token, i + 1 - at};
  }
  return best;
}

AddedTokens::AddedTokens(const JsonSection& root, const nlohmann::json& list, const BpeModel& model,
                         const Normalizer* normalizer) {
  if (list.is_null()) return;
  if (!list.is_array()) root.fail("\"added_tokens\" is {}; expected an array", list.type_name());
  // The library's add_tokens: ids past the model's vocabulary count from its size.
  auto next_id = static_cast<int32_t>(model.vocab_count());
  for (size_t i = 0; i < list.size(); ++i) {
    const JsonSection t(list[i], root.file(), fmt::format("added_tokens[{}]", i));
    AddedToken token;
    token.content = t.string("content");
    if (token.content.empty()) continue;  // the library ignores empty tokens
    token.single_word = t.boolean("single_word", false);
    token.lstrip = t.boolean("lstrip", false);
    token.rstrip = t.boolean("rstrip", false);
    token.normalized = t.boolean("normalized", true);
    token.special = t.boolean("special", false);
    if (const auto known = by_content_.find(token.content); known != by_content_.end()) {
      if (same_properties(by_id_.at(known->second), token)) continue;
    }
    if (const auto known = by_content_.find(token.content); known != by_content_.end()) {
      token.id = known->second;
    } else if (const auto in_model = model.token_to_id(token.content)) {
      token.id = *in_model;
    } else {
      token.id = next_id++;
    }
    token.matched = token.content;
    if (token.normalized && normalizer != nullptr) {
      uint32_t at_start = 0;
      normalizer->normalize(token.content, token.matched, at_start);
    }
    by_content_[token.content] = token.id;
    if (token.special) special_contents_.insert(token.content);
    by_id_[token.id] = std::move(token);
  }
  for (const auto& [id, token] : by_id_) {
    if (token.matched.empty()) continue;
    if (token.normalized) {
      normalized_.add(token.matched, id);
      has_normalized_ = true;
    } else {
      raw_.add(token.matched, id);
      has_raw_ = true;
    }
  }
}

void AddedTokens::split(std::string_view text, bool normalized_pass,
                        std::vector<TextSegment>& out) const {
  const bool any = normalized_pass ? has_normalized_ : has_raw_;
  if (!any) {
    if (!text.empty()) out.push_back({text, -1});
    return;
  }
  const Trie& trie = normalized_pass ? normalized_ : raw_;
  const size_t n = text.size();
  size_t start_offset = 0;  // where the text not yet handed out starts
  size_t pos = 0;           // where the search goes on
  while (pos < n) {
    int32_t token = -1;
    size_t start = pos, length = 0;
    for (; start < n; ++start) {
      if (!trie.first_byte[static_cast<unsigned char>(text[start])]) continue;
      std::tie(token, length) = trie.longest_at(text, start);
      if (token >= 0) break;
    }
    if (token < 0) break;
    size_t stop = start + length;
    pos = stop;
    const AddedToken& t = by_id_.at(token);
    if (t.single_word && ((start > 0 && ends_with_word(text, start)) || starts_with_word(text, stop))) {
      continue;  // inside a word
    }
    if (t.lstrip) start = std::max(trailing_space_start(text, start), start_offset);
    if (t.rstrip) stop += leading_space_length(text, stop);
    if (start_offset < start) out.push_back({text.substr(start_offset, start - start_offset), -1});
    out.push_back({text.substr(start, stop - start), token});
    start_offset = stop;
  }
  if (start_offset < n) out.push_back({text.substr(start_offset), -1});
}

const AddedToken* AddedTokens::find(int32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &it->second;
}

std::optional<int32_t> AddedTokens::id_of(std::string_view content) const {
  const auto it = by_content_.find(std::string(content));
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

bool AddedTokens::is_special_content(std::string_view text) const {
  return special_contents_.count(std::string(text)) > 0;
}

int32_t AddedTokens::max_id() const {
  int32_t m = -1;
  for (const auto& [id, token] : by_id_) m = std::max(m, id);
  return m;
}

}  // namespace fsdpp::data
