#pragma once
// The estimator's ledger (private to src/estimate/): every tensor one training step allocates and
// frees, in order, with the high-water mark of live bytes, what made it up, and on the CPU the
// resident high water of glibc's heap that RSS shows.

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace fsdpp::estimate_detail {

// What holds a tensor of the ledger. Gradient shards are apart from the other gradient buffers
// because CPU offload moves them to the host.
enum Cat { kParams, kGradWork, kGradShards, kOptim, kUnsharded, kActs, kTeacher, kNumCats };

// glibc's malloc (malloc/malloc.c) reduced to what decides the resident memory of tensor-sized
// blocks on a CPU run:
// - a request at or above the mmap threshold gets a mapping of its own, unmapped when freed;
//   unless the threshold was set (MALLOC_MMAP_THRESHOLD_), freeing a mapping raises it to the
//   mapping's size (up to 32 MiB), so after the first few frees nearly every tensor comes from
//   the heap;
// - a smaller request takes the best-fitting free chunk (the rest of it stays free), or else the
//   top of the heap, which grows it;
// - freed tensor chunks stay apart: the small objects allocated with every tensor (its
//   TensorImpl and storage, autograd nodes and saved-variable records) are carved from the same
//   heap between the data chunks and live in per-thread caches and fast bins that glibc never
//   coalesces, and the long-lived ones made during the step keep the heap from shrinking.
// Pages below the heap's top stay resident after their chunks are freed, so the heap's high
// water, not the live bytes, is what RSS shows. With the threshold fixed low, few tensors use the
// heap and this is close to exact; with glibc's dynamic threshold real fragmentation exceeds this
// model's (docs/estimate.md gives the measured gap), so it is a lower bound there.
class HeapModel {
 public:
  static constexpr int64_t kInitialThreshold = 128 << 10;  // DEFAULT_MMAP_THRESHOLD_MIN
  static constexpr int64_t kMaxThreshold = 32 << 20;       // DEFAULT_MMAP_THRESHOLD_MAX (64-bit)
  static constexpr int64_t kPage = 4096;

  // `fixed`: the threshold was set (M_MMAP_THRESHOLD), which turns its adjustment off.
  HeapModel(int64_t threshold, bool fixed) : threshold_(threshold), fixed_(fixed) {}

  void alloc(int id, int64_t bytes) {
    if (static_cast<size_t>(id) >= where_.size()) where_.resize(id + 1, {0, 0});
    if (bytes >= threshold_) {
      const int64_t n = round_up(bytes + 64, kPage);
      mapped_ += n;
      where_[id] = {-1, n};
      note();
      return;
    }
    const int64_t n = round_up(bytes + 64, 64);  // chunk header and 64-byte alignment
    auto fit = holes_.lower_bound(n);
    if (fit != holes_.end()) {
      const int64_t size = *fit;
      holes_.erase(fit);
      if (size > n) holes_.insert(size - n);
      where_[id] = {0, n};
      return;
    }
    top_ += n;
    where_[id] = {0, n};
    note();
  }

  void free(int id) {
    const auto [kind, n] = where_[id];
    if (n == 0) return;
    where_[id] = {0, 0};
    if (kind < 0) {
      mapped_ -= n;
      if (!fixed_ && n > threshold_ && n <= kMaxThreshold) threshold_ = n;
      return;
    }
    holes_.insert(n);
  }

  int64_t resident_peak() const { return peak_; }

 private:
  static int64_t round_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }
  void note() { peak_ = std::max(peak_, top_ + mapped_); }

  int64_t threshold_;
  bool fixed_;
  int64_t top_ = 0;  // the heap's size: it only grows
  int64_t mapped_ = 0;
  int64_t peak_ = 0;
  std::multiset<int64_t> holes_;                     // sizes of the free chunks in the heap
  std::vector<std::pair<int64_t, int64_t>> where_;  // id -> (-1 if mapped, else 0; size)
};

// Every tensor the steps allocate and free, in order; the high-water mark of live bytes and
// what made it up, and (on the CPU) the heap's resident high water.
class Ledger {
 public:
  using Id = int;
  Ledger(std::array<bool, kNumCats> on_device, HeapModel* heap) : on_device_(on_device), heap_(heap) {}

  Id alloc(Cat c, int64_t bytes) {
    const Id id = static_cast<Id>(sizes_.size());
    sizes_.push_back(bytes);
    cats_.push_back(c);
    live_.push_back(true);
    cur_[c] += bytes;
    if (on_device_[c]) {
      device_ += bytes;
      if (heap_) heap_->alloc(id, bytes);
      if (device_ > peak_) {
        peak_ = device_;
        at_peak_ = cur_;
        peak_where_ = where_;
      }
    } else {
      host_ += bytes;
      host_peak_ = std::max(host_peak_, host_);
    }
    return id;
  }
  void free(Id id) {
    if (id < 0 || !live_[id]) return;
    live_[id] = false;
    cur_[cats_[id]] -= sizes_[id];
    if (on_device_[cats_[id]]) {
      device_ -= sizes_[id];
      if (heap_) heap_->free(id);
    } else {
      host_ -= sizes_[id];
    }
  }
  // A temporary: the peak sees it, nothing keeps it.
  void touch(Cat c, int64_t bytes) { free(alloc(c, bytes)); }
  void at(std::string where) { where_ = std::move(where); }

  int64_t peak() const { return peak_; }
  int64_t live() const { return device_; }
  // Starts a new high-water mark at what is live now (a phase's own peak).
  void reset_peak() { peak_ = device_; at_peak_ = cur_; peak_where_ = where_; }
  int64_t resident_peak() const { return heap_ ? heap_->resident_peak() : peak_; }
  int64_t host_peak() const { return host_peak_; }
  const std::array<int64_t, kNumCats>& at_peak() const { return at_peak_; }
  const std::string& peak_where() const { return peak_where_; }

 private:
  std::array<bool, kNumCats> on_device_;
  HeapModel* heap_;
  std::vector<int64_t> sizes_;
  std::vector<Cat> cats_;
  std::vector<bool> live_;
  std::array<int64_t, kNumCats> cur_{};
  std::array<int64_t, kNumCats> at_peak_{};
  int64_t device_ = 0, host_ = 0, peak_ = 0, host_peak_ = 0;
  std::string where_ = "start", peak_where_ = "start";
};

using Id = Ledger::Id;

}  // namespace fsdpp::estimate_detail
