// The distillation: section of TrainConfig (docs/distillation.md#the-distillation-section): its
// keys from YAML and from overrides (next to the Hydra group's distillation.training.X), the
// round trip through to_yaml, and [config] errors naming the key and what is accepted.
// tests/train/distill.sh runs it with fsdpp-train.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "fsdpp/common/error.h"
#include "fsdpp/train/config.h"

using fsdpp::ConfigError;
using fsdpp::distill::DistillLossType;
using fsdpp::distill::TeacherDtype;
using fsdpp::train::TrainConfig;

namespace {

const std::string kYaml = R"(data:
  path: corpus.txt
training:
  max_steps: 10
distillation:
  teacher: runs/qwen3-moe-small/checkpoint-300
  loss: generalized_jsd
  beta: 0.3
  temperature: 2.0
  kd_ratio: 0.7
  top_k: 20
  teacher_dtype: bfloat16
)";

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(DistillConfig, ReadsTheSection) {
  const auto cfg = TrainConfig::from_yaml_string(kYaml);
  const auto& d = cfg.distillation;
  EXPECT_TRUE(d.enabled());
  EXPECT_EQ(d.teacher, "runs/qwen3-moe-small/checkpoint-300");
  EXPECT_EQ(d.loss, DistillLossType::GENERALIZED_JSD);
  EXPECT_EQ(d.beta, 0.3);
  EXPECT_EQ(d.temperature, 2.0);
  EXPECT_EQ(d.kd_ratio, 0.7);
  EXPECT_EQ(d.top_k, 20);
  EXPECT_EQ(d.teacher_dtype, TeacherDtype::BFLOAT16);
  // Off by default, with torchtune's / TRL's defaults.
  const auto plain = TrainConfig::from_yaml_string("data:\n  path: c.txt\ntraining:\n  max_steps: 1\n");
  EXPECT_FALSE(plain.distillation.enabled());
  EXPECT_EQ(plain.distillation.loss, DistillLossType::FORWARD_KL);
  EXPECT_EQ(plain.distillation.kd_ratio, 0.5);
  EXPECT_EQ(plain.distillation.temperature, 1.0);
  EXPECT_EQ(plain.distillation.teacher_dtype, TeacherDtype::FLOAT32);
}

TEST(DistillConfig, OverridesNextToTheHydraGroup) {
  const auto cfg = TrainConfig::from_yaml_string(
      "data:\n  path: c.txt\ntraining:\n  max_steps: 1\n",
      {"distillation.teacher=/models/teacher", "distillation.kd_ratio=0.25",
       "distillation.loss=reverse_kl", "distillation.training.per_device_train_batch_size=3",
       "distillation.training.fsdp=\"shard_grad_op\""});
  EXPECT_EQ(cfg.distillation.teacher, "/models/teacher");
  EXPECT_EQ(cfg.distillation.kd_ratio, 0.25);
  EXPECT_EQ(cfg.distillation.loss, DistillLossType::REVERSE_KL);
  EXPECT_EQ(cfg.training.per_device_train_batch_size, 3);
  EXPECT_EQ(cfg.training.fsdp, fsdpp::ShardingStrategy::SHARD_GRAD_OP);
}

TEST(DistillConfig, RoundTripsThroughToYaml) {
  const auto cfg = TrainConfig::from_yaml_string(kYaml);
  const auto again = TrainConfig::from_yaml_string(cfg.to_yaml());
  EXPECT_EQ(again.to_yaml(), cfg.to_yaml());
  EXPECT_EQ(again.distillation.teacher, cfg.distillation.teacher);
  EXPECT_EQ(again.distillation.teacher_dtype, TeacherDtype::BFLOAT16);
  EXPECT_NE(cfg.to_yaml().find("distillation:"), std::string::npos);
}

TEST(DistillConfig, BadValuesNameTheKey) {
  auto bad = [](const std::string& o) {
    return error_of([&] { TrainConfig::from_yaml_string(kYaml, {o}); });
  };
  EXPECT_NE(bad("distillation.kd_ratio=1.5").find(
                "[config] distillation.kd_ratio=1.5: expected a number in [0, 1]"),
            std::string::npos);
  EXPECT_NE(bad("distillation.beta=-0.1").find("[config] distillation.beta=-0.1: expected a "
                                                "number in [0, 1]"),
            std::string::npos);
  EXPECT_NE(bad("distillation.temperature=0").find("distillation.temperature=0: expected a "
                                                    "finite number > 0"),
            std::string::npos);
  EXPECT_NE(bad("distillation.top_k=-1").find("distillation.top_k=-1: expected >= 0"),
            std::string::npos);
  const auto loss = bad("distillation.loss=kl");
  EXPECT_NE(loss.find("distillation.loss"), std::string::npos) << loss;
  EXPECT_NE(loss.find("forward_kl, reverse_kl"), std::string::npos) << loss;
  const auto dtype = bad("distillation.teacher_dtype=fp16");
  EXPECT_NE(dtype.find("distillation.teacher_dtype"), std::string::npos) << dtype;
  EXPECT_NE(dtype.find("float32, bfloat16"), std::string::npos) << dtype;
  const auto unknown = bad("distillation.teachr=x");
  EXPECT_NE(unknown.find("teacher"), std::string::npos) << unknown;
  // A tensor-parallel student distils from a live teacher (vocab-parallel loss), not from a
  // cache's top-K, nor layer by layer with its sequence split.
  EXPECT_NO_THROW(TrainConfig::from_yaml_string(kYaml, {"parallelism.tensor_parallel_degree=2"}));
  EXPECT_NE(error_of([&] {
              TrainConfig::from_yaml_string(
                  kYaml, {"parallelism.tensor_parallel_degree=2", "distillation.teacher_cache=runs/c"});
            }).find("distillation.teacher_cache with parallelism.tensor_parallel_degree=2"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              TrainConfig::from_yaml_string(
                  kYaml, {"parallelism.tensor_parallel_degree=2", "parallelism.enable_sequence_parallel=true",
                          "distillation.layer_map=[0:0]"});
            }).find("distillation.layer_map with parallelism.enable_sequence_parallel=true"),
            std::string::npos);
  // A pipelined student distils on the data's windows (the teacher's logits or its cache) and on
  // samples (on-policy, seq_kd), not layer by layer.
  auto bad_pp = [](const std::string& a, const std::string& b) {
    return error_of([&] { TrainConfig::from_yaml_string(kYaml, {a, b}); });
  };
  EXPECT_NO_THROW(TrainConfig::from_yaml_string(kYaml, {"parallelism.pipeline_parallel_degree=2"}));
  EXPECT_NO_THROW(TrainConfig::from_yaml_string(
      kYaml, {"parallelism.pipeline_parallel_degree=2", "distillation.teacher_cache=runs/c"}));
  EXPECT_NO_THROW(TrainConfig::from_yaml_string(
      kYaml, {"parallelism.pipeline_parallel_degree=2", "distillation.lmbda=0.5"}));
  EXPECT_NO_THROW(TrainConfig::from_yaml_string(
      kYaml, {"parallelism.pipeline_parallel_degree=2", "distillation.seq_kd=true"}));
  EXPECT_NE(bad_pp("parallelism.pipeline_parallel_degree=2", "distillation.layer_map=[0:0]")
                .find("distillation.layer_map with parallelism.pipeline_parallel_degree=2: the "
                      "student's hidden states"),
            std::string::npos);
}

}  // namespace

namespace {

TEST(DistillConfig, OnPolicyOfflineAndLayerKeys) {
  const auto cfg = TrainConfig::from_yaml_string(
      kYaml + "  lmbda: 0.5\n  seq_kd: true\n  max_new_tokens: 16\n  generation_temperature: 0.9\n"
              "  teacher_cache: runs/cache\n  layer_map: [0:0, 1:2]\n  layer_loss: mse\n"
              "  layer_loss_weight: 0.25\n  loss_chunk_tokens: 512\n  layer_projection: linear\n",
      {"data.train_fraction=0.1"});
  const auto& d = cfg.distillation;
  EXPECT_EQ(d.lmbda, 0.5);
  EXPECT_TRUE(d.seq_kd);
  EXPECT_EQ(d.max_new_tokens, 16);
  EXPECT_EQ(d.generation_temperature, 0.9);
  EXPECT_EQ(d.teacher_cache, "runs/cache");
  EXPECT_EQ(d.layer_map, (std::vector<std::string>{"0:0", "1:2"}));
  EXPECT_EQ(d.layer_loss, fsdpp::distill::LayerLossType::MSE);
  EXPECT_EQ(d.layer_loss_weight, 0.25);
  EXPECT_EQ(d.layer_projection, fsdpp::distill::LayerProjection::LINEAR);
  EXPECT_EQ(TrainConfig::from_yaml_string(kYaml).distillation.layer_projection,
            fsdpp::distill::LayerProjection::AUTO);  // the default
  EXPECT_EQ(TrainConfig::from_yaml_string(kYaml, {"distillation.layer_projection=none"})
                .distillation.layer_projection,
            fsdpp::distill::LayerProjection::NONE);
  EXPECT_EQ(d.loss_chunk_tokens, 512);
  EXPECT_EQ(cfg.data.train_fraction, 0.1);
  EXPECT_TRUE(d.live_teacher());  // samples and hidden states need it beside the cache
  const auto again = TrainConfig::from_yaml_string(cfg.to_yaml());
  EXPECT_EQ(again.to_yaml(), cfg.to_yaml());
  EXPECT_EQ(fsdpp::distill::parse_layer_map(d.layer_map),
            (std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {1, 2}}));
  EXPECT_TRUE(fsdpp::distill::parse_layer_map({"auto"}).empty());
  // A cache alone: enabled, no live teacher.
  const auto cache_only = TrainConfig::from_yaml_string(
      "data:\n  path: c.txt\ntraining:\n  max_steps: 1\ndistillation:\n  teacher_cache: d\n");
  EXPECT_TRUE(cache_only.distillation.enabled());
  EXPECT_FALSE(cache_only.distillation.live_teacher());
}

TEST(DistillConfig, BadOnPolicyOfflineAndLayerValuesNameTheKey) {
  auto bad = [](const std::vector<std::string>& o) {
    return error_of([&] { TrainConfig::from_yaml_string(kYaml, o); });
  };
  EXPECT_NE(bad({"distillation.lmbda=1.5"}).find("distillation.lmbda=1.5: expected a number in [0, 1]"),
            std::string::npos);
  EXPECT_NE(bad({"distillation.lmbda=0.5", "distillation.max_new_tokens=0"})
                .find("distillation.max_new_tokens=0: expected 1 .. data.seq_len=128"),
            std::string::npos);
  EXPECT_NE(bad({"distillation.generation_temperature=0"})
                .find("distillation.generation_temperature=0: expected a finite number > 0"),
            std::string::npos);
  EXPECT_NE(bad({"distillation.layer_map=[0-1]"}).find("distillation.layer_map holds '0-1'"),
            std::string::npos);
  EXPECT_NE(bad({"distillation.layer_map=[0:1, 0:2]"}).find("student layer 0 appears twice ('0:1' and '0:2')"),
            std::string::npos);
  EXPECT_NE(bad({"distillation.layer_map=[auto, 0:1]"}).find("holds 'auto'"), std::string::npos);
  EXPECT_NE(bad({"distillation.layer_loss=l1"}).find("cosine, mse"), std::string::npos);
  const auto projection = bad({"distillation.layer_projection=mlp"});
  EXPECT_NE(projection.find("distillation.layer_projection"), std::string::npos) << projection;
  EXPECT_NE(projection.find("auto, linear, none"), std::string::npos) << projection;
  EXPECT_NE(bad({"distillation.teacher=", "distillation.teacher_cache=c", "distillation.seq_kd=true"})
                .find("distillation.teacher_cache without distillation.teacher"),
            std::string::npos);
  EXPECT_NE(bad({"data.train_fraction=0"}).find("data.train_fraction=0: expected 0 < train_fraction <= 1"),
            std::string::npos);
}

}  // namespace
