// tokenizer.json's BPE model. See bpe_model.h.
#include "bpe_model.h"

#include <algorithm>
#include <climits>
#include <queue>

#include "byte_level_alphabet.h"
#include "unicode_text.h"

namespace fsdpp::data {
namespace {

constexpr std::string_view kMetaspace = "\xe2\x96\x81";  // ▁

// Whether some token has "▁" right after another character (then a merge may join there).
bool has_metaspace_inside(const std::vector<std::string>& tokens) {
  for (const std::string& t : tokens) {
    for (size_t at = t.find(kMetaspace, 1); at != std::string::npos; at = t.find(kMetaspace, at + 1)) {
      if (at < kMetaspace.size() || t.compare(at - kMetaspace.size(), kMetaspace.size(), kMetaspace) != 0) {
        return true;
      }
    }
  }
  return false;
}

// A token of a byte-level vocabulary as the bytes it stands for; nothing for a token with a
// character outside GPT-2's alphabet (an added token's text): no byte-level piece can be it.
std::optional<std::string> to_bytes(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    size_t len = 0;
    const auto b = byte_level_byte(unicode::decode(token, i, &len));
    if (!b) return std::nullopt;
    out += static_cast<char>(*b);
    i += len;
  }
  return out;
}

int32_t id_of(const JsonSection& m, const std::string& key, const nlohmann::json& v) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX) {
    m.fail("vocab['{}'] is {}; expected an id, an integer in [0, 2^31)", key, v.dump());
  }
  return static_cast<int32_t>(v.get<int64_t>());
}

// The two tokens of merges[i]: ["a", "b"] or "a b".
std::optional<std::pair<std::string, std::string>> merge_pair(const JsonSection& m,
                                                              const nlohmann::json& merge, size_t i) {
  if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
    return std::pair{merge[0].get<std::string>(), merge[1].get<std::string>()};
  }
  if (merge.is_string()) {
    const auto s = merge.get<std::string>();
    if (s.rfind("#version", 0) == 0) return std::nullopt;  // merges.txt's header line
    const size_t space = s.find(' ');
    if (space != std::string::npos && s.find(' ', space + 1) == std::string::npos) {
      return std::pair{s.substr(0, space), s.substr(space + 1)};
    }
  }
  m.fail("merges[{}] is {}; expected [\"a\", \"b\"] or \"a b\"", i, merge.dump());
}

}  // namespace

BpeModel::BpeModel(const JsonSection& m, bool byte_level) : byte_level_(byte_level) {
  if (const std::string type = m.type(); type != "BPE") {
    m.fail("'{}' is not supported; supported: BPE", type);
  }
  if (m.has("dropout") && !(m.json()["dropout"].is_number() && m.json()["dropout"].get<double>() == 0)) {
    m.fail("has dropout {}; supported: null (fsdpp encodes deterministically)",
           m.json()["dropout"].dump());
  }
  unk_token_ = m.optional_string("unk_token");
  prefix_spelled_ = m.string_or("continuing_subword_prefix", "");
  suffix_spelled_ = m.string_or("end_of_word_suffix", "");
  fuse_unk_ = m.boolean("fuse_unk", false);
  byte_fallback_ = m.boolean("byte_fallback", false);
  ignore_merges_ = m.boolean("ignore_merges", false);

  if (!m.json().contains("vocab") || !m.json()["vocab"].is_object()) {
    m.fail("has no \"vocab\" object (token -> id)");
  }
  int32_t max_id = -1;
  for (const auto& [token, value] : m.json()["vocab"].items()) {
    const int32_t id = id_of(m, token, value);
    vocab_.insert(token, id);
    max_id = std::max(max_id, id);
  }
  tokens_.resize(static_cast<size_t>(max_id + 1));
  has_token_.assign(tokens_.size(), false);
  for (const auto& [token, value] : m.json()["vocab"].items()) {
    const auto id = static_cast<size_t>(value.get<int64_t>());
    tokens_[id] = token;
    has_token_[id] = true;
    if (byte_level_) {
      if (auto bytes = to_bytes(token)) units_.insert(*bytes, static_cast<int32_t>(id));
    }
  }
  prefix_ = prefix_spelled_;
  suffix_ = suffix_spelled_;
  if (byte_level_) {
    auto p = to_bytes(prefix_spelled_), s = to_bytes(suffix_spelled_);
    if (!p || !s) {
      m.fail("has continuing_subword_prefix '{}' / end_of_word_suffix '{}' outside the byte-level "
             "alphabet; expected them spelled in it",
             prefix_spelled_, suffix_spelled_);
    }
    prefix_ = *p;
    suffix_ = *s;
  }
  const StringIdMap& units = byte_level_ ? units_ : vocab_;
  for (int b = 0; b < 256; ++b) {
    const auto unit = units.find(std::string(1, static_cast<char>(b)));
    single_byte_ids_[b] = (byte_level_ || b < 0x80) && unit ? *unit : -1;
    const auto fallback = vocab_.find(fmt::format("<0x{:02X}>", b));
    fallback_byte_ids_[b] = fallback ? *fallback : -1;
  }
  if (unk_token_) unk_id_ = vocab_.find(*unk_token_);

  const nlohmann::json empty = nlohmann::json::array();
  const nlohmann::json& merges = m.json().contains("merges") ? m.array("merges") : empty;
  uint32_t rank = 0;
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto pair = merge_pair(m, merges[i], i);
    if (!pair) continue;
    const auto& [a, b] = *pair;
    const auto a_id = vocab_.find(a), b_id = vocab_.find(b);
    if (!a_id || !b_id) {
      m.fail("merges[{}] ('{}', '{}'): '{}' is not in the vocabulary", i, a, b, !a_id ? a : b);
    }
    if (b.size() < prefix_spelled_.size() || b.compare(0, prefix_spelled_.size(), prefix_spelled_) != 0) {
      m.fail("merges[{}] ('{}', '{}'): '{}' does not start with continuing_subword_prefix '{}'", i,
             a, b, b, prefix_spelled_);
    }
    const std::string made = a + b.substr(prefix_spelled_.size());
    const auto made_id = vocab_.find(made);
    if (!made_id) m.fail("merges[{}] ('{}', '{}'): '{}' is not in the vocabulary", i, a, b, made);
    merges_.insert(*a_id, *b_id, {rank++, *made_id});
  }
  // (An unk token spelled with a trailing "▁" could end a word's last symbol with one.)
  const bool unk_ends_in_metaspace =
      unk_token_ && unk_token_->size() >= kMetaspace.size() &&
      unk_token_->compare(unk_token_->size() - kMetaspace.size(), kMetaspace.size(), kMetaspace) == 0;
  split_at_metaspace_ = !byte_level_ && !ignore_merges_ && prefix_.empty() && suffix_.empty() &&
                        !unk_ends_in_metaspace && vocab_.find(kMetaspace).has_value() &&
                        !has_metaspace_inside(tokens_);
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size() || !has_token_[id]) return nullptr;
  return &tokens_[id];
}

void BpeModel::tokenize(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (!split_at_metaspace_) return tokenize_word(piece, out);
  size_t start = 0;
  for (size_t at = piece.find(kMetaspace, 1); at != std::string_view::npos;
       at = piece.find(kMetaspace, at + kMetaspace.size())) {
    // A "▁" after another character (UTF-8 is self-synchronizing: the bytes before it spell
    // "▁" only when that character is one).
    if (at < kMetaspace.size() || piece.compare(at - kMetaspace.size(), kMetaspace.size(), kMetaspace) != 0) {
      tokenize_word(piece.substr(start, at - start), out);
      start = at;
    }
  }
  tokenize_word(piece.substr(start), out);
}

void BpeModel::tokenize_word(std::string_view piece, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    if (const auto id = (byte_level_ ? units_ : vocab_).find(piece)) {
      out.push_back(*id);
      return;
    }
  }
  const bool cacheable = piece.size() < 256;
  if (cacheable && cache_.find(piece, out)) return;
  std::vector<int32_t> ids;
  std::vector<uint32_t> lens;
  initial_ids(piece, ids, lens);
  merge(ids, lens);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) cache_.insert(piece, ids);
}

int32_t BpeModel::unit_id(std::string_view unit, bool first, bool last) const {
  const StringIdMap& units = byte_level_ ? units_ : vocab_;
  if (prefix_.empty() && suffix_.empty()) {
    if (unit.size() == 1) return single_byte_ids_[static_cast<unsigned char>(unit[0])];
    const auto id = units.find(unit);
    return id ? *id : -1;
  }
  std::string s;
  if (!first) s += prefix_;
  s.append(unit);
  if (last) s += suffix_;
  const auto id = units.find(s);
  return id ? *id : -1;
}

bool BpeModel::fallback_ids(std::string_view unit, bool first, bool last,
                            std::vector<int32_t>& out) const {
  std::string s;
  if (!first) s += prefix_spelled_;
  if (byte_level_) {
    unicode::append_utf8(s, byte_level_char(static_cast<uint8_t>(unit[0])));
  } else {
    s.append(unit);
  }
  if (last) s += suffix_spelled_;
  for (unsigned char c : s) {
    if (fallback_byte_ids_[c] < 0) return false;
    out.push_back(fallback_byte_ids_[c]);
  }
  return true;
}

void BpeModel::initial_ids(std::string_view piece, std::vector<int32_t>& ids,
                           std::vector<uint32_t>& lens) const {
  ids.reserve(piece.size());
  lens.reserve(piece.size());
  int32_t pending_unk = -1;  // an unknown character's unk token, not added yet (fuse_unk)
  uint32_t pending_len = 0;
  std::vector<int32_t> fallback;
  const size_t n = piece.size();
  for (size_t i = 0; i < n;) {
    const size_t len = byte_level_ ? 1 : unicode::char_length(static_cast<unsigned char>(piece[i]));
    const bool first = i == 0, last = i + len >= n;
    const std::string_view unit = piece.substr(i, len);
    i += len;
    if (const int32_t id = unit_id(unit, first, last); id >= 0) {
      if (pending_unk >= 0) {
        ids.push_back(pending_unk);
        lens.push_back(pending_len);
        pending_unk = -1;
      }
      ids.push_back(id);
      lens.push_back(static_cast<uint32_t>(len));
      continue;
    }
    if (byte_fallback_) {
      fallback.clear();
      if (fallback_ids(unit, first, last, fallback)) {
        // As the library does: bytes go in without flushing a pending unk token first.
        for (int32_t b : fallback) {
          ids.push_back(b);
          lens.push_back(1);
        }
        continue;
      }
    }
    if (!unk_token_) continue;  // no unk token: the library drops the character
    FSDPP_CHECK(unk_id_.has_value(),
                "[data] tokenizer.json: the text has a character the vocabulary lacks and "
                "unk_token '{}' is not in the vocabulary either",
                *unk_token_);
    if (pending_unk >= 0 && fuse_unk_) {
      pending_len += static_cast<uint32_t>(len);
      continue;
    }
    if (pending_unk >= 0) {
      ids.push_back(pending_unk);
      lens.push_back(pending_len);
    }
    pending_unk = *unk_id_;
    pending_len = static_cast<uint32_t>(len);
  }
  if (pending_unk >= 0) {
    ids.push_back(pending_unk);
    lens.push_back(pending_len);
  }
}

void BpeModel::merge(std::vector<int32_t>& ids, std::vector<uint32_t>& lens) const {
  // Short words: find the lowest-ranked pair, leftmost first, merge, repeat: the order the
  // library's heap pops them in (rank, then position), without the heap.
  if (ids.size() > 64) return merge_with_heap(ids, lens);
  if (ids.size() < 2) return;
  std::vector<uint32_t> ranks(ids.size() - 1);
  std::vector<int32_t> made(ids.size() - 1);
  auto look = [&](size_t k) {
    const PairMap::Merge* m = merges_.find(ids[k], ids[k + 1]);
    ranks[k] = m ? m->rank : UINT32_MAX;
    made[k] = m ? m->id : -1;
  };
  for (size_t k = 0; k + 1 < ids.size(); ++k) look(k);
  while (ids.size() > 1) {
    size_t best = 0;
    for (size_t k = 1; k < ranks.size(); ++k) {
      if (ranks[k] < ranks[best]) best = k;
    }
    if (ranks[best] == UINT32_MAX) break;
    ids[best] = made[best];
    ids.erase(ids.begin() + static_cast<ptrdiff_t>(best) + 1);
    ranks.erase(ranks.begin() + static_cast<ptrdiff_t>(best));
    made.erase(made.begin() + static_cast<ptrdiff_t>(best));
    if (best > 0) look(best - 1);
    if (best + 1 < ids.size()) look(best);
  }
}

// The library's Word::merge_all (no dropout): a heap of candidate merges by (rank, position),
// stale ones skipped when popped. O(n log n) for long pieces (a run of digits or spaces).
void BpeModel::merge_with_heap(std::vector<int32_t>& ids, std::vector<uint32_t>& lens) const {
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    uint32_t len;
  };
  struct Candidate {
    uint32_t rank;
    uint32_t pos;
    int32_t made;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  const auto n = static_cast<int32_t>(ids.size());
  std::vector<Symbol> sym(ids.size());
  for (int32_t i = 0; i < n; ++i) sym[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1, lens[i]};
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  for (int32_t i = 0; i + 1 < n; ++i) {
    if (const auto* m = merges_.find(ids[i], ids[i + 1])) {
      queue.push({m->rank, static_cast<uint32_t>(i), m->id});
    }
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& cur = sym[top.pos];
    if (cur.len == 0 || cur.next == -1) continue;
    const int32_t next_pos = cur.next;
    const Symbol right = sym[next_pos];
    const auto* still = merges_.find(cur.id, right.id);
    if (still == nullptr || still->id != top.made) continue;  // the pair changed since
    cur.id = top.made;
    cur.len += right.len;
    cur.next = right.next;
    sym[next_pos].len = 0;
    if (right.next >= 0) sym[right.next].prev = static_cast<int32_t>(top.pos);
    if (cur.prev >= 0) {
      if (const auto* m = merges_.find(sym[cur.prev].id, cur.id)) {
        queue.push({m->rank, static_cast<uint32_t>(cur.prev), m->id});
      }
    }
    if (cur.next >= 0) {
      if (const auto* m = merges_.find(cur.id, sym[cur.next].id)) {
        queue.push({m->rank, top.pos, m->id});
      }
    }
  }
  ids.clear();
  lens.clear();
  for (const Symbol& s : sym) {
    if (s.len == 0) continue;
    ids.push_back(s.id);
    lens.push_back(s.len);
  }
}

BpeModel::WordCache::WordCache() {
  for (Shard& shard : shards_) shard.slots.resize(kSlotsPerShard);
}

size_t BpeModel::WordCache::probe(const Shard& shard, std::string_view word, uint64_t hash) {
  const size_t mask = kSlotsPerShard - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const Slot& s = shard.slots[i];
    if (s.key_size == 0) return i;
    if (s.hash == hash && s.key_size == word.size() &&
        std::string_view(shard.keys).substr(s.key_at, s.key_size) == word) {
      return i;
    }
  }
}

bool BpeModel::WordCache::find(std::string_view word, std::vector<int32_t>& out) const {
  const uint64_t hash = XXH3_64bits(word.data(), word.size());
  Shard& shard = shards_[hash >> 60];  // the top bits: the slot index takes the low ones
  std::lock_guard<std::mutex> lock(shard.mutex);
  const Slot& s = shard.slots[probe(shard, word, hash)];
  if (s.key_size == 0) return false;
  out.insert(out.end(), shard.ids.begin() + s.ids_at, shard.ids.begin() + s.ids_at + s.ids_size);
  return true;
}

void BpeModel::WordCache::insert(std::string_view word, const std::vector<int32_t>& ids) const {
  const uint64_t hash = XXH3_64bits(word.data(), word.size());
  Shard& shard = shards_[hash >> 60];
  std::lock_guard<std::mutex> lock(shard.mutex);
  // Bounded: a full shard starts over (cheaper than tracking use, and the words of one text come
  // back quickly).
  if (shard.used * 2 >= kSlotsPerShard) {
    std::fill(shard.slots.begin(), shard.slots.end(), Slot{});
    shard.keys.clear();
    shard.ids.clear();
    shard.used = 0;
  }
  Slot& s = shard.slots[probe(shard, word, hash)];
  if (s.key_size != 0) return;  // another thread put it there first
  s = {hash, static_cast<uint32_t>(shard.keys.size()), static_cast<uint32_t>(word.size()),
       static_cast<uint32_t>(shard.ids.size()), static_cast<uint32_t>(ids.size())};
  shard.keys.append(word);
  shard.ids.insert(shard.ids.end(), ids.begin(), ids.end());
  ++shard.used;
}

}  // namespace fsdpp::data
