#pragma once
// A CPU allocator that counts live tensor bytes per rank (the thread that allocated, tl_rank),
// for tests that compare fsdpp-estimate's ledger with what the real model allocates
// (tests/unit/test_memory_estimate*.cpp). Install it with CountingScope for a test's lifetime.

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace fsdpp::test {

inline thread_local int tl_rank = -1;

// The counts live apart from the allocator, shared by every allocation it made: a tensor
// allocated under a test's CountingScope may be freed after the scope is gone (a process group's
// cached buffer, a tensor a background thread drops), and its release must then decrement counts
// that still exist, never the destroyed scope's (which was stack memory that the next test reused:
// the flake of DeferredInit.ErrorsNameWhatIsWrong).
class CountingAllocator final : public c10::Allocator {
 public:
  static constexpr int kMaxRanks = 8;
  explicit CountingAllocator(c10::Allocator* base) : base_(base), counts_(std::make_shared<Counts>()) {}

  c10::DataPtr allocate(size_t n) override {
    auto inner = base_->allocate(n);
    auto* ctx = new Ctx{std::move(inner), static_cast<int64_t>(n), tl_rank, counts_};
    void* data = ctx->inner.get();
    const auto device = ctx->inner.device();
    if (ctx->rank >= 0) {
      auto& c = *counts_;
      const int64_t now = c.live[ctx->rank].fetch_add(ctx->n) + ctx->n;
      int64_t p = c.peak[ctx->rank].load();
      while (now > p && !c.peak[ctx->rank].compare_exchange_weak(p, now)) {
      }
    }
    return {data, ctx, &CountingAllocator::release, device};
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  void reset_peak(int rank) { counts_->peak[rank].store(counts_->live[rank].load()); }
  int64_t peak(int rank) const { return counts_->peak[rank].load(); }
  int64_t live(int rank) const { return counts_->live[rank].load(); }

 private:
  struct Counts {
    std::array<std::atomic<int64_t>, kMaxRanks> live{};
    std::array<std::atomic<int64_t>, kMaxRanks> peak{};
  };
  struct Ctx {
    c10::DataPtr inner;
    int64_t n;
    int rank;
    std::shared_ptr<Counts> counts;  // outlives the allocator when the tensor does
  };
  static void release(void* p) {
    auto* ctx = static_cast<Ctx*>(p);
    if (ctx->rank >= 0) ctx->counts->live[ctx->rank].fetch_sub(ctx->n);
    delete ctx;
  }
  c10::Allocator* base_;
  std::shared_ptr<Counts> counts_;
};

// Installs the counting allocator for the test's lifetime. The allocator itself lives as long as
// the process: a tensor's storage keeps a pointer to the allocator that made it and allocates
// through it whenever it is resized (FSDP's unsharded parameters at each gather,
// FSDPParam::alloc_unsharded; a buffer that a later test grows; a tensor resized at exit), which
// may be after the scope is gone. An allocator that was the scope's member (stack memory the next
// test reuses) was then called through whatever the stack held by then: a crash at a later test
// or at exit, now and then (issue 43: a rank of DeferredInit.* died by SIGSEGV near exit).
class CountingScope {
 public:
  CountingScope() : original_(c10::GetCPUAllocator()), counting_(keep(new CountingAllocator(original_))) {
    c10::SetCPUAllocator(counting_, /*priority=*/100);
  }
  ~CountingScope() { c10::SetCPUAllocator(original_, /*priority=*/100); }
  CountingScope(const CountingScope&) = delete;
  CountingScope& operator=(const CountingScope&) = delete;
  CountingAllocator& counter() { return *counting_; }

 private:
  // Every scope's allocator, never destroyed (reachable, so not a leak to LeakSanitizer): a few
  // hundred bytes per test that counts.
  static CountingAllocator* keep(CountingAllocator* a) {
    static std::mutex mutex;
    static auto* kept = new std::vector<CountingAllocator*>();
    std::lock_guard<std::mutex> lock(mutex);
    kept->push_back(a);
    return a;
  }
  c10::Allocator* original_;
  CountingAllocator* counting_;
};

}  // namespace fsdpp::test
