// The distillation guide's YAML (its "Complete FSDP Configuration Example" and every option it
// names elsewhere) read by TrainConfig, and what each option hands to the trainer.
// tests/train/guide_options.sh runs them with fsdpp-train.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "fsdpp/common/error.h"
#include "fsdpp/train/config.h"

using fsdpp::BackwardPrefetch;
using fsdpp::ConfigError;
using fsdpp::ShardingStrategy;
using fsdpp::train::TrainConfig;

namespace {

const std::string kData = "data:\n  path: corpus.txt\n";

// The guide's example, as printed there.
const std::string kGuideExample = R"(# conf/distillation/default.yaml

training:
  # FSDP settings
  fsdp: "full_shard"
  fsdp_config:
    fsdp_transformer_layer_cls_to_wrap: ["Qwen3MoeDecoderLayer"]
    fsdp_backward_prefetch: "backward_pre"
    fsdp_forward_prefetch: false
    fsdp_auto_wrap_policy: "TRANSFORMER_BASED_WRAP"
    fsdp_state_dict_type: "FULL_STATE_DICT"
    fsdp_offload_params: false  # We have enough GPU memory

  # Memory optimization
  gradient_checkpointing: true
  bf16: true

  # Batch settings
  per_device_train_batch_size: 2
  gradient_accumulation_steps: 8

  # Other settings
  learning_rate: 5e-5
  num_train_epochs: 3
  save_steps: 500
  logging_steps: 10
)";

// A snippet of the guide under `training:` (already indented), with data.path and a length.
TrainConfig training(const std::string& lines, const std::vector<std::string>& overrides = {}) {
  std::vector<std::string> o = {"training.max_steps=10"};
  o.insert(o.end(), overrides.begin(), overrides.end());
  return TrainConfig::from_yaml_string(kData + "training:\n" + lines, o, "guide.yaml");
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a ConfigError";
  return "";
}

}  // namespace

TEST(DistillGuideConfig, CompleteExampleIsReadUnchanged) {
  const auto c = TrainConfig::from_yaml_string(kData + kGuideExample, {}, "default.yaml");
  const auto& t = c.training;
  const auto& f = t.fsdp_config;
  EXPECT_EQ(t.fsdp, ShardingStrategy::FULL_SHARD);
  EXPECT_EQ(f.transformer_layer_cls_to_wrap, std::vector<std::string>{"Qwen3MoeDecoderLayer"});
  EXPECT_EQ(f.backward_prefetch, BackwardPrefetch::BACKWARD_PRE);
  EXPECT_FALSE(f.forward_prefetch);
  EXPECT_EQ(f.auto_wrap_policy, "TRANSFORMER_BASED_WRAP");
  EXPECT_EQ(f.state_dict_type, "FULL_STATE_DICT");
  EXPECT_FALSE(f.offload_params);
  EXPECT_TRUE(t.gradient_checkpointing);
  EXPECT_TRUE(t.bf16);
  EXPECT_EQ(t.per_device_train_batch_size, 2);
  EXPECT_EQ(t.gradient_accumulation_steps, 8);
  EXPECT_DOUBLE_EQ(t.learning_rate, 5e-5);
  EXPECT_EQ(t.max_steps, -1);
  EXPECT_DOUBLE_EQ(t.num_train_epochs, 3);
  EXPECT_EQ(t.save_steps, 500);
  EXPECT_EQ(t.logging_steps, 10);
  EXPECT_EQ(TrainConfig::from_yaml_string(c.to_yaml()).to_yaml(), c.to_yaml());
}

TEST(DistillGuideConfig, BackwardPrefetchNullIsNoPrefetch) {
  // The guide: "Options: "backward_pre", "backward_post", null"; null is Accelerate's None.
  for (const std::string v : {"null", "~", "", "Null", "NULL", "None", "\"null\"", "NO_PREFETCH"}) {
    SCOPED_TRACE(v);
    const auto c = training("  fsdp_config:\n    fsdp_backward_prefetch: " + v + "\n");
    EXPECT_EQ(c.training.fsdp_config.backward_prefetch, BackwardPrefetch::NONE);
    EXPECT_EQ(c.fully_shard_options(nullptr).backward_prefetch, BackwardPrefetch::NONE);
    EXPECT_EQ(c.estimate_options().backward_prefetch, 0);
    // Written back by its name, read back the same.
    EXPECT_NE(c.to_yaml().find("fsdp_backward_prefetch: NO_PREFETCH\n"), std::string::npos);
  }
  // On the command line, as Hydra's null or Python's None.
  for (const std::string v : {"null", "None", "~", ""}) {
    SCOPED_TRACE(v);
    EXPECT_EQ(training("", {"training.fsdp_config.fsdp_backward_prefetch=" + v})
                  .training.fsdp_config.backward_prefetch,
              BackwardPrefetch::NONE);
  }
  // The other two values of the guide, and a wrong one naming null among the accepted.
  EXPECT_EQ(training("  fsdp_config:\n    fsdp_backward_prefetch: backward_post\n")
                .fully_shard_options(nullptr).backward_prefetch,
            BackwardPrefetch::BACKWARD_POST);
  const auto e = error_of([] { training("  fsdp_config:\n    fsdp_backward_prefetch: nul\n"); });
  EXPECT_NE(e.find("expected one of BACKWARD_PRE, BACKWARD_POST, NO_PREFETCH, null"),
            std::string::npos) << e;
  // Null means nothing for a choice without a null meaning.
  EXPECT_NE(error_of([] { training("  fsdp_config:\n    fsdp_state_dict_type: null\n"); })
                .find("fsdp_state_dict_type=''"),
            std::string::npos);
}

TEST(DistillGuideConfig, SyncModuleStatesMapsToFullyShard) {
  EXPECT_FALSE(training("").fully_shard_options(nullptr).sync_module_states);
  const auto c = training("  fsdp_config:\n    fsdp_sync_module_states: true\n");
  EXPECT_TRUE(c.training.fsdp_config.sync_module_states);
  EXPECT_TRUE(c.fully_shard_options(nullptr).sync_module_states);
  EXPECT_NE(c.to_yaml().find("fsdp_sync_module_states: true\n"), std::string::npos);
  // Without the prefix, as Hugging Face accepts; booleans stay strict.
  EXPECT_TRUE(training("", {"training.fsdp_config.sync_module_states=true"})
                  .fully_shard_options(nullptr).sync_module_states);
  EXPECT_NE(error_of([] { training("  fsdp_config:\n    fsdp_sync_module_states: yes\n"); })
                .find("expected true or false"),
            std::string::npos);
}

TEST(DistillGuideConfig, DataloaderOptions) {
  const auto d = training("");
  EXPECT_EQ(d.training.dataloader_num_workers, 0);
  EXPECT_EQ(d.training.dataloader_prefetch_factor, 2);
  EXPECT_FALSE(d.training.dataloader_pin_memory);
  // The guide's "Pin Memory" snippet.
  const auto c = training("  dataloader_pin_memory: true\n  dataloader_num_workers: 4\n");
  EXPECT_TRUE(c.training.dataloader_pin_memory);
  EXPECT_EQ(c.training.dataloader_num_workers, 4);
  EXPECT_EQ(TrainConfig::from_yaml_string(c.to_yaml()).to_yaml(), c.to_yaml());
  EXPECT_EQ(training("", {"training.dataloader_prefetch_factor=4"})
                .training.dataloader_prefetch_factor, 4);
  EXPECT_NE(error_of([] { training("  dataloader_num_workers: -1\n"); })
                .find("[config] training.dataloader_num_workers=-1: expected 0"),
            std::string::npos);
  EXPECT_NE(error_of([] { training("  dataloader_num_workers: 65\n"); }).find("to 64"),
            std::string::npos);
  EXPECT_NE(error_of([] { training("  dataloader_prefetch_factor: 0\n"); })
                .find("training.dataloader_prefetch_factor=0"),
            std::string::npos);
  EXPECT_NE(error_of([] { training("  dataloader_num_workers: 2.5\n"); }).find("an integer"),
            std::string::npos);
}

TEST(DistillGuideConfig, EveryOtherOptionTheGuideNames) {
  // Strategies (its "FSDP Sharding Strategies" section).
  EXPECT_EQ(training("  fsdp: \"shard_grad_op\"\n").training.fsdp, ShardingStrategy::SHARD_GRAD_OP);
  EXPECT_EQ(training("  fsdp: \"hybrid_shard\"\n").training.fsdp, ShardingStrategy::HYBRID_SHARD);
  EXPECT_EQ(training("  fsdp: \"no_shard\"\n").training.fsdp, ShardingStrategy::NO_SHARD);
  // Auto wrap policy, option 2.
  const auto size = training(
      "  fsdp_config:\n    fsdp_auto_wrap_policy: \"SIZE_BASED_WRAP\"\n"
      "    fsdp_min_num_params: 1e8  # 100M parameters\n");
  EXPECT_EQ(size.training.fsdp_config.auto_wrap_policy, "SIZE_BASED_WRAP");
  EXPECT_EQ(size.training.fsdp_config.min_num_params, 100000000);
  // CPU offloading, state dict types.
  EXPECT_TRUE(training("  fsdp_config:\n    fsdp_offload_params: true\n")
                  .fully_shard_options(nullptr).offload_policy.offload_params);
  for (const char* type : {"FULL_STATE_DICT", "SHARDED_STATE_DICT", "LOCAL_STATE_DICT"}) {
    EXPECT_EQ(training(fmt::format("  fsdp_config:\n    fsdp_state_dict_type: \"{}\"\n", type))
                  .training.fsdp_config.state_dict_type, type);
  }
  // Memory optimisation snippets.
  const auto mem = training(
      "  gradient_checkpointing: true\n  fsdp: \"full_shard\"\n  bf16: true  # Recommended\n"
      "  fp16: false\n  per_device_train_batch_size: 1  # Minimal per-GPU\n"
      "  gradient_accumulation_steps: 64\n");
  EXPECT_TRUE(mem.training.gradient_checkpointing);
  EXPECT_EQ(mem.training.gradient_accumulation_steps, 64);
  // Troubleshooting and performance tips, also with the keys spelt without fsdp_.
  EXPECT_EQ(training("  save_total_limit: 2\n").training.save_total_limit, 2);
  EXPECT_EQ(training("  fsdp_config:\n    fsdp_forward_prefetch: true  # Only if you have memory\n")
                .fully_shard_options(nullptr).forward_prefetch, 1);
  const auto short_names = training(
      "  fsdp_config:\n    backward_prefetch: \"backward_pre\"\n    forward_prefetch: true\n");
  EXPECT_EQ(short_names.training.fsdp_config.backward_prefetch, BackwardPrefetch::BACKWARD_PRE);
  EXPECT_TRUE(short_names.training.fsdp_config.forward_prefetch);
  // Its batch-size sweep override (also as distillation.training.X: the next test).
  EXPECT_EQ(training("", {"training.per_device_train_batch_size=8"})
                .training.per_device_train_batch_size, 8);
}

TEST(DistillGuideConfig, HydraGroupOverridesAddressTheTrainingSection) {
  // The guide's launch scripts: `distillation.training.fsdp="full_shard"` and its batch sweep.
  const auto c = training("", {"distillation.training.fsdp=\"shard_grad_op\"",
                               "distillation.training.per_device_train_batch_size=4",
                               "distillation.training.fsdp_config.fsdp_backward_prefetch=null"});
  EXPECT_EQ(c.training.fsdp, ShardingStrategy::SHARD_GRAD_OP);
  EXPECT_EQ(c.training.per_device_train_batch_size, 4);
  EXPECT_EQ(c.training.fsdp_config.backward_prefetch, BackwardPrefetch::NONE);
  // Errors name the override as written.
  const auto e =
      error_of([] { training("", {"distillation.training.per_device_train_batch_size=x"}); });
  EXPECT_NE(e.find("(override 'distillation.training.per_device_train_batch_size=x')"),
            std::string::npos) << e;
  // Only before a top-level section: anything else under the group is read as it is.
  EXPECT_NE(error_of([] { training("", {"distillation.no_such_key=1"}); })
                .find("unknown key 'distillation"),
            std::string::npos);
}
