// The distillation teacher of fsdpp-train (fsdpp/distill/teacher.h) on the ranks of the run, against
// the same teacher in one process: a Qwen3-MoE saved as a Hugging Face directory, loaded,
// FULL_SHARD-ed through parallelize on a mesh of its own, and used for a student's step. It has no gradients, is in no
// optimizer, only all-gathers (no reduce-scatter bytes), and its KD and CE losses equal those
// computed in one process from the unsharded teacher within 1e-5; bfloat16 stores its shards
// in bf16 (computed in float32 on the CPU).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <set>
#include <nlohmann/json.hpp>

#include "fsdpp/distill/distiller.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/fsdp/inspect.h"
#include "fsdpp/fsdp/wrap_policy.h"
#include "fsdpp/models/hf_qwen3_moe.h"
#include "fsdpp/state/atomic_dir.h"
#include "fsdpp/train/config.h"
#include "full_checkpoint.h"
#include "tiny_models.h"
#include "world_fixture.h"

using namespace fsdpp;

namespace {

models::Qwen3MoeConfig tiny(int64_t layers, int64_t experts, uint64_t seed) {
  auto c = fsdpp::test::tiny_moe(layers, experts, seed);
  c.max_position_embeddings = 16;
  return c;
}

// The teacher as a Hugging Face directory that every rank reads; rank 0 writes it.
std::filesystem::path save_teacher(const models::Qwen3MoeConfig& cfg) {
  auto& world = test::world();
  const auto dir = test::scratch_dir("distill_teacher", "hf");
  if (world.rank() == 0) {
    state::remove_tree(dir);
    models::Qwen3Moe model(cfg);
    models::NamedTensors named;
    for (const auto& p : model->named_parameters()) named.emplace_back(p.key(), p.value());
    models::save_hf_qwen3_moe(dir, cfg, named);
  }
  world.group()->barrier({"distill_teacher"});
  return dir;
}

train::TrainConfig config(const std::filesystem::path& teacher, const std::string& dtype) {
  return train::TrainConfig::from_yaml_string(
      "data:\n  path: unused.txt\ntraining:\n  max_steps: 1\n", {
          "distillation.teacher=" + teacher.string(), "distillation.loss=generalized_jsd",
          "distillation.beta=0.4", "distillation.temperature=1.5", "distillation.kd_ratio=0.6",
          "distillation.teacher_dtype=" + dtype, "model.router_aux_loss_coef=0.01"});
}

void check_teacher(const std::string& dtype) {
  auto& world = test::world();
  const auto teacher_cfg = tiny(2, 4, 5);
  const auto dir = save_teacher(teacher_cfg);
  const auto cfg = config(dir, dtype);
  // The student: FSDP over the world, AdamW over its parameters alone.
  models::Qwen3Moe student(tiny(1, 2, 9));
  models::Qwen3Moe reference_student(tiny(1, 2, 9));
  auto policy = transformer_layer_policy({"Qwen3MoeDecoderLayer"});
  FullyShardOptions o;
  o.mesh = world.mesh();
  apply_fully_shard(*student, policy, o);
  auto lm = models::causal_lm(student);
  distill::Distiller distiller(cfg.distillation, cfg.distill_run(teacher_cfg.vocab_size), world,
                              *lm);
  auto& teacher = *distiller.live_teacher();
  for (const auto& p : teacher.module().parameters()) {
    EXPECT_FALSE(p.requires_grad());
    EXPECT_EQ(p.scalar_type(), dtype == "bfloat16" ? at::kBFloat16 : at::kFloat);
  }

  torch::optim::AdamW opt(student->parameters(), torch::optim::AdamWOptions(1e-3));
  std::set<const void*> teacher_params;
  for (const auto& p : teacher.module().parameters()) teacher_params.insert(p.unsafeGetTensorImpl());

  // The same batch on every rank, so that the averages over ranks are the one-process values.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const auto x = torch::randint(0, 64, {2, 16}, gen);
  const auto y = torch::randint(0, 64, {2, 16}, gen);
  distiller.begin_step();
  // One accumulation batch of the data (no sampling), its objective on the student's features and the
  // load-balancing term added, as Parallelized::forward_backward does over one stage.
  auto rows = distiller.rows({{x, y, {0, 16}}}, {at::Tensor()}, /*step=*/1,
                             distill::Sampler(), /*microbatches=*/1, /*pipelined=*/false,
                             /*last_stage=*/true);
  auto out = lm->forward_features(rows.inputs, /*aux_loss=*/true, rows.hidden_layers);
  // Divisor 0: the accumulation batch's own means (one accumulation batch, the same rows on every rank).
  auto loss = rows.objective(out.logits, rows.targets, 0, out.hidden_states, /*divisor=*/0) +
              0.01 * out.aux_loss;
  loss.backward();
  opt.step();
  nlohmann::json line;
  distiller.log_step(line, world);

  for (const auto& p : teacher.module().parameters()) EXPECT_FALSE(p.grad().defined());
  size_t state = 0;
  for (const auto& group : opt.param_groups()) {
    for (const auto& p : group.params()) {
      EXPECT_EQ(teacher_params.count(p.unsafeGetTensorImpl()), 0u);
    }
  }
  for (const auto& [key, s] : opt.state()) ++state;
  EXPECT_EQ(state, student->parameters().size());
  EXPECT_EQ(line["teacher_reduce_scatter_bytes"].get<uint64_t>(), 0u);
  if (world.size() > 1) EXPECT_GT(line["teacher_all_gather_bytes"].get<uint64_t>(), 0u);

  // One process: the unsharded teacher from the same directory, the same loss.
  auto hf = models::load_hf_qwen3_moe(dir);
  models::Qwen3Moe ref_teacher(hf.config);
  models::load_named_tensors(*ref_teacher, hf.tensors);
  if (dtype == "bfloat16") {
    at::NoGradGuard g;
    // Stored in bf16, computed in float32 on the CPU (teacher.cpp).
    for (auto& p : ref_teacher->parameters()) p.set_data(p.to(at::kBFloat16).to(at::kFloat));
  }
  at::Tensor teacher_logits;
  {
    at::NoGradGuard g;
    teacher_logits = ref_teacher->forward(x);
  }
  auto ref_out = reference_student->forward(x, y, /*output_router_logits=*/true);
  distill::DistillLossOptions lo{.type = distill::DistillLossType::GENERALIZED_JSD, .beta = 0.4,
                               .temperature = 1.5};
  auto ref = distill::distillation_objective(ref_out.logits, teacher_logits, y, lo, 0.6);
  const double tol = 1e-5;
  EXPECT_NEAR(line["kd_loss"].get<double>(), ref.kd.item<double>(), tol);
  EXPECT_NEAR(line["ce_loss"].get<double>(), ref.ce.item<double>(), 1e-5);
  EXPECT_NEAR(loss.item<double>(), (ref.loss + 0.01 * ref_out.aux_loss).item<double>(), tol);
  world.group()->barrier({"distill_teacher_end"});
  if (world.rank() == 0) state::remove_tree(dir.parent_path());
}

TEST(DistillTeacher, FrozenShardedAndExactFloat32) { check_teacher("float32"); }
TEST(DistillTeacher, FrozenShardedAndExactBfloat16) { check_teacher("bfloat16"); }

}  // namespace
