// The tests' counting allocator (tests/support/counting_allocator.h) outlives the scope that
// installed it: a storage made under it allocates through it again when resized later.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <vector>

#include "../support/counting_allocator.h"

// A tensor made in a scope and resized after it: c10 allocates the new bytes through the
// allocator the storage recorded, the scope's (as FSDPParam::alloc_unsharded does at each gather).
// Before, that allocator was the scope's member: here the scope is on the heap and its memory
// taken back (zeroed) before the resize, which then called through a null vtable and died by
// SIGSEGV, as a rank of DeferredInit.* did near exit when stack memory held something else.
TEST(CountingAllocator, StorageResizedAfterItsScopeIsGone) {
  at::Tensor t;
  int64_t counted = 0;
  {
    auto scope = std::make_unique<fsdpp::test::CountingScope>();
    fsdpp::test::tl_rank = 0;
    t = at::empty({16});
    counted = scope->counter().live(0);
    fsdpp::test::tl_rank = -1;
  }
  EXPECT_GE(counted, 16 * 4);
  std::vector<std::unique_ptr<char[]>> reuse;  // the scope's freed chunk, and its neighbours'
  for (int i = 0; i < 64; ++i) reuse.push_back(std::make_unique<char[]>(sizeof(fsdpp::test::CountingScope)));
  t.resize_({1 << 16});
  t.fill_(1.0f);
  EXPECT_EQ(t.sum().item<float>(), static_cast<float>(1 << 16));
}
