#pragma once
// The two lookups a BPE model makes per character and per merge, as open-addressing tables
// (std::unordered_map's node per entry and its hashing cost more than the merging itself).
//
// StringIdMap: token text -> id, keys kept in one buffer, XXH3 hashes.
// PairMap:     (left id, right id) -> (merge rank, merged id).

#include <xxhash.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fsdpp::data {

class StringIdMap {
 public:
  // Inserts or replaces (a later duplicate wins, as when the library collects a JSON object).
  void insert(std::string_view key, int32_t id) {
    if ((size_ + 1) * 4 > slots_.size() * 3) grow();
    const uint64_t h = XXH3_64bits(key.data(), key.size());
    Slot& slot = slots_[probe(key, h)];
    if (slot.id < 0) {
      slot = {h, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(key.size()), id};
      keys_.append(key);
      ++size_;
    } else {
      slot.id = id;
    }
  }
  std::optional<int32_t> find(std::string_view key) const {
    if (slots_.empty()) return std::nullopt;
    const uint64_t h = XXH3_64bits(key.data(), key.size());
    const Slot& slot = slots_[probe(key, h)];
    if (slot.id < 0) return std::nullopt;
    return slot.id;
  }
  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t offset = 0, length = 0;
    int32_t id = -1;  // -1: empty
  };
  // The slot of `key`, or the empty slot where it would go.
  size_t probe(std::string_view key, uint64_t h) const {
    const size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.id < 0) return i;
      if (s.hash == h && s.length == key.size() &&
          std::string_view(keys_).substr(s.offset, s.length) == key) {
        return i;
      }
    }
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 64 : old.size() * 2, Slot{});
    const size_t mask = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.id < 0) continue;
      size_t i = s.hash & mask;
      while (slots_[i].id >= 0) i = (i + 1) & mask;
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;
  std::string keys_;
  size_t size_ = 0;
};

class PairMap {
 public:
  struct Merge {
    uint32_t rank;
    int32_t id;
  };
  // Inserts or replaces (the library keeps the last of duplicate merges).
  void insert(int32_t left, int32_t right, Merge m) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    Slot& s = slots_[probe(key(left, right))];
    if (s.key == kEmpty) ++size_;
    s = {key(left, right), m};
  }
  const Merge* find(int32_t left, int32_t right) const {
    if (slots_.empty()) return nullptr;
    const Slot& s = slots_[probe(key(left, right))];
    return s.key == kEmpty ? nullptr : &s.merge;
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are non-negative: no pair is this
  struct Slot {
    uint64_t key = kEmpty;
    Merge merge{};
  };
  static uint64_t key(int32_t l, int32_t r) {
    return (uint64_t{static_cast<uint32_t>(l)} << 32) | static_cast<uint32_t>(r);
  }
  static size_t mix(uint64_t k) {  // splitmix64's finalizer
    k ^= k >> 30;
    k *= 0xbf58476d1ce4e5b9ull;
    k ^= k >> 27;
    k *= 0x94d049bb133111ebull;
    return static_cast<size_t>(k ^ (k >> 31));
  }
  size_t probe(uint64_t k) const {
    const size_t mask = slots_.size() - 1;
    for (size_t i = mix(k) & mask;; i = (i + 1) & mask) {
      if (slots_[i].key == k || slots_[i].key == kEmpty) return i;
    }
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 64 : old.size() * 2, Slot{});
    for (const Slot& s : old) {
      if (s.key != kEmpty) slots_[probe(s.key)] = s;
    }
  }

  std::vector<Slot> slots_;
  size_t size_ = 0;
};

}  // namespace fsdpp::data
