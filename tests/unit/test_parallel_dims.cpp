// fsdpp::parallel's degrees and the pipeline's cut (docs/parallelize.md): dp_shard filled in,
// every refusal naming the degrees, the sparse dim of the experts, and stages cut from the
// schedule's traits.
#include <gtest/gtest.h>

#include <string>

#include "fsdpp/common/error.h"
#include "fsdpp/models/llama_stages.h"
#include "fsdpp/parallel/parallel_dims.h"
#include "fsdpp/parallel/pipeline_cut.h"

using fsdpp::ConfigError;
using fsdpp::parallel::ParallelDims;
using fsdpp::parallel::cut_pipeline;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(ParallelDims, ResolvesAndNamesWhatDoesNotFit) {
  auto d = ParallelDims{.pp = 2, .tp = 2}.resolved(16);
  EXPECT_EQ(d.dp_shard, 4);
  EXPECT_EQ(d.world_size(), 16);
  EXPECT_EQ(d.dp(), 4);
  EXPECT_EQ(d.describe(), "pp 2 x dp_shard 4 x tp 2");
  auto e = ParallelDims{.dp_replicate = 2, .tp = 2, .ep = 4}.resolved(8);
  EXPECT_EQ(e.dp_shard, 2);
  EXPECT_EQ(e.efsdp(), 1);  // ep takes dp_shard x tp = 4 ranks
  EXPECT_EQ(ParallelDims{}.resolved(1).describe(), "one rank");
  EXPECT_NE(error_of([] { ParallelDims{.tp = 3}.resolved(8); }).find("cannot fill 8 ranks"),
            std::string::npos);
  EXPECT_NE(error_of([] { ParallelDims{.dp_shard = 2, .tp = 2}.resolved(8); })
                .find("is 4 ranks but the world has 8"),
            std::string::npos);
  EXPECT_NE(error_of([] { ParallelDims{.ep = 3}.resolved(4); })
                .find("ep=3 does not divide dp_shard x tp = 4 x 1"),
            std::string::npos);
  EXPECT_NE(error_of([] { ParallelDims{.pp = 0}.resolved(4); }).find("ParallelDims.pp=0: expected >= 1"),
            std::string::npos);
  EXPECT_NE(error_of([] { ParallelDims{.dp_shard = 0}.resolved(4); }).find("dp_shard=0"),
            std::string::npos);
}

// `n` units of a language model: the embedding, n - 2 blocks, the head.
static fsdpp::parallel::PipelineUnits units(int64_t n) { return {n, fsdpp::models::language_model_units(n - 2)}; }

TEST(PipelineCut, StagesFromTheSchedulesTraits) {
  auto one = cut_pipeline(units(10), "1F1B", 4, 8);
  EXPECT_EQ(one.units_per_stage, (std::vector<int>{3, 3, 2, 2}));
  EXPECT_EQ(one.schedule.num_stages, 4);
  auto v = cut_pipeline(units(10), "ZBVZeroBubble", 2, 4);
  EXPECT_EQ(v.units_per_stage, (std::vector<int>{3, 3, 2, 2}));
  EXPECT_EQ(v.schedule.stage_to_rank, (std::vector<int>{0, 1, 1, 0}));
  EXPECT_EQ(v.describe(), "ZBVZeroBubble, 4 stages of 3+3+2+2 units, 4 microbatches");
  // layers_per_stage: 10 units in stages of 2 make 5 stages, which no schedule on 2 ranks fits.
  auto looped = cut_pipeline(units(12), "Interleaved1F1B", 2, 2, 2);
  EXPECT_EQ(looped.schedule.num_stages, 6);  // 3 per rank, looped
  EXPECT_NE(error_of([] { cut_pipeline(units(10), "Interleaved1F1B", 2, 2, 2); }).find("make 5 stages"),
            std::string::npos);
  EXPECT_NE(error_of([] { cut_pipeline(units(10), "ZBVZeroBubble", 2, 2, 2); }).find("needs 4 (2 per rank)"),
            std::string::npos);
  EXPECT_NE(error_of([] { cut_pipeline(units(3), "ZBVZeroBubble", 2, 2); })
                .find("needs 4 stages but the model has 3 units (the embedding, 1 block and the head)"),
            std::string::npos);
  // The units as the model names them: a chain's are its children, not layers.
  const fsdpp::parallel::PipelineUnits chain{3, "the children of sequential_plan 'mlp'"};
  const auto few = error_of([&] { cut_pipeline(chain, "1F1B", 4, 4); });
  EXPECT_NE(few.find("needs 4 stages but the model has 3 units (the children of sequential_plan "
                     "'mlp'); use a model of more units or fewer pipeline ranks"),
            std::string::npos) << few;
  EXPECT_EQ(few.find("embedding"), std::string::npos) << few;
  const auto uneven = error_of([&] { cut_pipeline(chain, "ZBVZeroBubble", 2, 2, 2); });
  EXPECT_NE(uneven.find("3 units (the children of sequential_plan 'mlp') in stages of 2 make 2 stages"),
            std::string::npos) << uneven;
  EXPECT_NE(error_of([] { cut_pipeline(units(6), "DualPipe", 2, 2); }).find("unknown schedule 'DualPipe'"),
            std::string::npos);
}
