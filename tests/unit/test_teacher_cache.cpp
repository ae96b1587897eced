// The offline teacher cache's pieces (fsdpp/train/teacher_cache.h): token ids packed in
// ceil(log2 vocab) bits and back, cache.json written and read, and refused when malformed.
// tests/train/distill_modes.sh writes and reads whole caches with fsdpp-train.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "fsdpp/common/error.h"
#include "fsdpp/distill/teacher_cache.h"

using namespace fsdpp::distill;

TEST(TeacherCache, IndexBitsCoverTheVocabulary) {
  EXPECT_EQ(index_bits_for(1), 1);
  EXPECT_EQ(index_bits_for(2), 1);
  EXPECT_EQ(index_bits_for(256), 8);
  EXPECT_EQ(index_bits_for(257), 9);
  EXPECT_EQ(index_bits_for(32000), 15);
  EXPECT_EQ(index_bits_for(151936), 18);
}

TEST(TeacherCache, PackedIdsRoundTripAtEveryWidth) {
  for (int64_t vocab : {2, 3, 256, 300, 32000, 151936}) {
    const int64_t bits = index_bits_for(vocab);
    torch::manual_seed(vocab);
    auto ids = torch::randint(0, vocab, {3, 37}, torch::kLong);
    ids.index_put_({0, 0}, vocab - 1);  // the largest id uses every bit
    const auto packed = pack_ids(ids, bits);
    EXPECT_EQ(packed.scalar_type(), torch::kByte);
    EXPECT_EQ(packed.size(1), (37 * bits + 7) / 8) << vocab;
    EXPECT_TRUE(torch::equal(unpack_ids(packed, 37, bits), ids)) << vocab;
  }
  // Little-endian bit order: ids 1, 2, 3 in 2 bits each are 0b00111001.
  const auto packed = pack_ids(torch::tensor({{1, 2, 3}}, torch::kLong), 2);
  EXPECT_EQ(packed[0][0].item<int>(), 0b111001);
}

TEST(TeacherCache, IndexRoundTripsAndBadOnesAreRefused) {
  TeacherCacheInfo info;
  info.teacher = "runs/t/checkpoint-5";
  info.vocab_size = 256;
  info.seq_len = 32;
  info.top_k = 16;
  info.index_bits = 8;
  info.windows = 7;
  info.shards = {{"shard-00000.safetensors", 0, 5, 1000, 0xabcdef0123456789ULL},
                 {"shard-00001.safetensors", 5, 2, 400, 42}};
  const auto back = TeacherCacheInfo::from_json(info.to_json(), "cache.json");
  EXPECT_EQ(back.to_json(), info.to_json());
  EXPECT_EQ(back.shards[0].xxh3, 0xabcdef0123456789ULL);
  auto broken = info;
  broken.shards[1].first_window = 6;  // a hole
  EXPECT_THROW(TeacherCacheInfo::from_json(broken.to_json(), "cache.json"), fsdpp::CheckpointError);
  broken = info;
  broken.index_bits = 9;
  EXPECT_THROW(TeacherCacheInfo::from_json(broken.to_json(), "cache.json"), fsdpp::CheckpointError);
  EXPECT_THROW(TeacherCacheInfo::from_json("{\"format\": \"other\"}", "cache.json"),
               fsdpp::CheckpointError);
  EXPECT_THROW(TeacherCache::open("/nonexistent/cache"), fsdpp::ConfigError);
}
