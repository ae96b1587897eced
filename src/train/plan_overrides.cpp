// A planned layout as fsdpp-train's overrides and an fsdpp-run line (plan_overrides.h).
#include "fsdpp/train/plan_overrides.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/strategy_traits.h"
#include "fsdpp/train/config.h"

namespace fsdpp::train {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

const char* boolean(bool b) { return b ? "true" : "false"; }

}  // namespace

std::vector<std::string> layout_overrides(const EstimateOptions& o) {
  const bool low = o.param_dtype != EstimateDType::FP32;
  FSDPP_CHECK_AS(ConfigError, !low || o.reduce_dtype == EstimateDType::FP32,
                 "[plan] a layout that reduces gradients in {} cannot be given to fsdpp-train, which "
                 "reduces in float32 under training.bf16 / training.fp16; expected float32 reduction",
                 to_string(o.reduce_dtype));
  const int pp = std::max(1, o.pipeline.degree);
  const int dp = o.world_size / (o.tensor_parallel * pp);
  const bool hybrid = traits_of(o.strategy).hybrid;
  const int group = hybrid ? estimate_shard_group(o) : dp;  // as the estimate played it
  std::vector<std::string> out = {
      fmt::format("training.fsdp={}", lower(to_string(o.strategy))),
      fmt::format("parallelism.data_parallel_replicate_degree={}", hybrid ? dp / group : 1),
      "parallelism.data_parallel_shard_degree=-1",
      fmt::format("parallelism.tensor_parallel_degree={}", o.tensor_parallel),
      fmt::format("parallelism.enable_sequence_parallel={}", boolean(o.tensor_parallel > 1 && o.sequence_parallel)),
      fmt::format("parallelism.pipeline_parallel_degree={}", pp),
      fmt::format("parallelism.expert_parallel_degree={}", std::max(1, o.expert_parallel)),
      fmt::format("training.gradient_checkpointing={}", boolean(o.activation_checkpointing)),
      fmt::format("training.per_device_train_batch_size={}", o.batch),
      "training.gradient_accumulation_steps=1",
      fmt::format("data.seq_len={}", o.seq_len),
      fmt::format("training.bf16={}", boolean(o.param_dtype == EstimateDType::BF16)),
      fmt::format("training.fp16={}", boolean(o.param_dtype == EstimateDType::FP16)),
  };
  if (hybrid) out.push_back(fmt::format("training.fsdp_config.fsdp_hybrid_shard_group_size={}", group));
  if (pp > 1) {
    const int64_t microbatches = std::max(1, o.pipeline.microbatches);
    FSDPP_CHECK_AS(ConfigError, o.batch % microbatches == 0,
                   "[plan] {} sequences per data-parallel rank do not split into {} microbatches",
                   o.batch, microbatches);
    out.push_back(fmt::format("parallelism.pipeline_parallel_schedule={}", o.pipeline.schedule));
    out.push_back(fmt::format("parallelism.pipeline_parallel_microbatch_size={}", o.batch / microbatches));
    out.push_back(fmt::format("parallelism.pipeline_parallel_layers_per_stage={}", o.pipeline.layers_per_stage));
  }
  return out;
}

std::vector<std::string> layout_overrides_for(const std::string& config_path,
                                              const std::vector<std::string>& given,
                                              const EstimateOptions& options) {
  const std::string base = TrainConfig::from_file(config_path, given).to_yaml();
  std::vector<std::string> out;
  for (const auto& o : layout_overrides(options)) {
    auto with = given;
    with.push_back(o);
    try {
      if (TrainConfig::from_file(config_path, with).to_yaml() == base) continue;
    } catch (const ConfigError&) {  // refused alone (training.bf16 beside fp16): it must be given
    }
    out.push_back(o);
  }
  return out;
}

std::string layout_command(int world, int per_node, const std::string& config,
                           const std::vector<std::string>& args,
                           const std::vector<std::string>& overrides) {
  const int local = std::max(1, std::min(world, per_node));
  std::string line = fmt::format("fsdpp-run --nproc-per-node {}", local);
  if (world > local) line += fmt::format(" --nnodes {}", world / local);
  line += " fsdpp-train " + config;
  for (const auto& a : args) line += " " + a;
  for (const auto& a : overrides) line += " " + a;
  return line;
}

}  // namespace fsdpp::train
