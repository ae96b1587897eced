#pragma once
// A CPU allocator that counts live tensor bytes per rank (the thread that allocated, tl_rank),
// for tests that compare fsdpp-estimate's ledger with what the real model allocates
// (tests/unit/test_memory_estimate*.cpp). Install it with CountingScope for a test's lifetime.

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <array>
#include <atomic>
#include <cstdint>

namespace fsdpp::test {

inline thread_local int tl_rank = -1;

class CountingAllocator final : public c10::Allocator {
 public:
  static constexpr int kMaxRanks = 8;
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t n) override {
    auto inner = base_->allocate(n);
    auto* ctx = new Ctx{std::move(inner), static_cast<int64_t>(n), tl_rank, this};
    void* data = ctx->inner.get();
    const auto device = ctx->inner.device();
    if (ctx->rank >= 0) {
      const int64_t now = live_[ctx->rank].fetch_add(ctx->n) + ctx->n;
      int64_t p = peak_[ctx->rank].load();
      while (now > p && !peak_[ctx->rank].compare_exchange_weak(p, now)) {
      }
    }
    return {data, ctx, &CountingAllocator::release, device};
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  void reset_peak(int rank) { peak_[rank].store(live_[rank].load()); }
  int64_t peak(int rank) const { return peak_[rank].load(); }
  int64_t live(int rank) const { return live_[rank].load(); }

 private:
  struct Ctx {
    c10::DataPtr inner;
    int64_t n;
    int rank;
    CountingAllocator* owner;
  };
  static void release(void* p) {
    auto* ctx = static_cast<Ctx*>(p);
    if (ctx->rank >= 0) ctx->owner->live_[ctx->rank].fetch_sub(ctx->n);
    delete ctx;
  }
  c10::Allocator* base_;
  std::array<std::atomic<int64_t>, kMaxRanks> live_{};
  std::array<std::atomic<int64_t>, kMaxRanks> peak_{};
};

// Installs the counting allocator for the test's lifetime.
class CountingScope {
 public:
  CountingScope() : original_(c10::GetCPUAllocator()), counting_(original_) {
    c10::SetCPUAllocator(&counting_, /*priority=*/100);
  }
  ~CountingScope() { c10::SetCPUAllocator(original_, /*priority=*/100); }
  CountingAllocator& counter() { return counting_; }

 private:
  c10::Allocator* original_;
  CountingAllocator counting_;
};

}  // namespace fsdpp::test
