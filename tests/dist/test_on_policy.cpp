// Sampling inside training (docs/distillation.md#on-policy-distillation): the KV cache of
// fsdpp's Llama and Qwen3-MoE against recomputing the whole context, on a model FULL_SHARD-ed
// over the ranks; and on-policy batches (src/train/on_policy.h) sampled by the sharded student,
// each rank its own windows, equal to the same windows sampled in one process by the unsharded
// model in one batch, reproducible under the seed and masked to the sampled part.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include "fsdpp/distill/on_policy.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/fsdp/wrap_policy.h"
#include "fsdpp/models/causal_lm.h"
#include "tiny_models.h"
#include "world_fixture.h"

using namespace fsdpp;

namespace {

models::Qwen3MoeConfig tiny_moe() {
  auto c = fsdpp::test::tiny_moe(/*n_layers=*/2, /*num_experts=*/4, /*seed=*/3);
  c.max_position_embeddings = 24;
  c.initializer_range = 0.2;  // peaked distributions: sampling differences would show
  return c;
}

models::LlamaConfig tiny_llama() {
  return {.vocab_size = 64, .dim = 32, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
          .max_seq_len = 24, .seed = 4, .init_std = 0.2};
}

std::unique_ptr<models::CausalLM> sharded(std::unique_ptr<models::CausalLM> lm, const char* layer) {
  FullyShardOptions o;
  o.mesh = test::world().mesh();
  apply_fully_shard(lm->module(), transformer_layer_policy({layer}), o);
  return lm;
}

// Every position's logits of `tokens` fed through the cache in pieces equal the logits of one
// forward over the whole sequence; greedy generation with the cache equals greedy generation
// that recomputes the context each step.
void check_cache(models::CausalLM& lm, const std::function<at::Tensor(const at::Tensor&)>& full,
                 const std::function<at::Tensor(const at::Tensor&, models::KVCache&)>& cached) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  const auto tokens = torch::randint(0, 64, {3, 20}, gen);
  at::NoGradGuard no_grad;
  const auto want = full(tokens);
  models::KVCache cache(static_cast<size_t>(lm.num_layers()));
  std::vector<at::Tensor> parts;
  for (auto [begin, n] : std::vector<std::pair<int64_t, int64_t>>{{0, 7}, {7, 1}, {8, 5}, {13, 1}, {14, 6}}) {
    parts.push_back(cached(tokens.narrow(1, begin, n), cache));
  }
  EXPECT_EQ(cache.length, 20);
  const auto got = at::cat(parts, 1);
  EXPECT_LE((got - want).abs().max().item<double>(), 2e-5);

  models::GenerateOptions o;
  o.max_new_tokens = 10;
  o.temperature = 0;
  const auto prompt = tokens.narrow(1, 0, 6);
  const auto fast = lm.generate(prompt, o);
  const auto slow = models::sample_tokens([&](const at::Tensor& ctx) { return full(ctx).select(1, -1); },
                                          {24, 64}, prompt, o);
  EXPECT_TRUE(torch::equal(fast, slow)) << fast << slow;
  // Past max_seq_len the context is cropped and the cache starts again: still the same.
  o.max_new_tokens = 22;
  EXPECT_TRUE(torch::equal(lm.generate(prompt, o),
                           models::sample_tokens([&](const at::Tensor& ctx) { return full(ctx).select(1, -1); },
                                                 {24, 64}, prompt, o)));
}

TEST(KVCache, Qwen3MoeShardedEqualsRecomputing) {
  models::Qwen3Moe model(tiny_moe());
  auto lm = sharded(models::causal_lm(model), "Qwen3MoeDecoderLayer");
  check_cache(*lm, [&](const at::Tensor& t) { return fsdpp::forward(model, t); },
              [&](const at::Tensor& t, models::KVCache& c) { return fsdpp::forward(model, t, c); });
}

TEST(KVCache, LlamaShardedEqualsRecomputing) {
  models::Llama model(tiny_llama());
  auto lm = sharded(models::causal_lm(model), "TransformerBlock");
  check_cache(*lm, [&](const at::Tensor& t) { return fsdpp::forward(model, t); },
              [&](const at::Tensor& t, models::KVCache& c) { return fsdpp::forward(model, t, c); });
}

distill::DistillationSection on_policy_section() {
  distill::DistillationSection d;
  d.teacher = "unused";
  d.lmbda = 0.5;
  d.max_new_tokens = 6;
  d.generation_temperature = 1.0;
  return d;
}

TEST(OnPolicy, SamplesDependOnTheWindowNotOnRanksOrBatches) {
  auto& world = test::world();
  const int64_t T = 16, N = 8;  // 8 windows over the world
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const auto windows = torch::randint(0, 64, {N, T + 1}, gen);
  std::vector<int64_t> starts;
  for (int64_t i = 0; i < N; ++i) starts.push_back(1000 + 16 * i);
  const distill::OnPolicy policy(on_policy_section(), /*seed=*/42, T);

  // This rank's windows, as the sampler deals them (r, r + W, ...), by the sharded student.
  models::Qwen3Moe student(tiny_moe());
  auto lm = sharded(models::causal_lm(student), "Qwen3MoeDecoderLayer");
  std::vector<int64_t> rows, my_starts;
  for (int64_t i = world.rank(); i < N; i += world.size()) rows.push_back(i), my_starts.push_back(starts[i]);
  const auto idx = torch::tensor(rows);
  const auto mine = windows.index_select(0, idx);
  const auto x = mine.narrow(1, 0, T), y = mine.narrow(1, 1, T);
  const auto got = policy.sample(*lm, distill::BatchSource::STUDENT, x, y, my_starts, 7);

  // The prompt is kept, the rest sampled; KD over the sampled part, no cross-entropy there.
  const int64_t P = T + 1 - 6;
  EXPECT_TRUE(torch::equal(got.inputs.narrow(1, 0, P), x.narrow(1, 0, P)));
  EXPECT_TRUE(torch::equal(got.targets.narrow(1, 0, P - 1), y.narrow(1, 0, P - 1)));
  EXPECT_TRUE((got.targets.narrow(1, P - 1, T - P + 1) == -100).all().item<bool>());
  EXPECT_TRUE(got.kd_mask.narrow(1, P - 1, T - P + 1).all().item<bool>());
  EXPECT_FALSE(got.kd_mask.narrow(1, 0, P - 1).any().item<bool>());
  EXPECT_FALSE(torch::equal(got.inputs.narrow(1, P, T - P), x.narrow(1, P, T - P)));  // sampled

  // One process, the unsharded student, every window in one batch: the same tokens.
  models::Qwen3Moe whole(tiny_moe());
  auto one = models::causal_lm(whole);
  const auto all = policy.sample(*one, distill::BatchSource::STUDENT, windows.narrow(1, 0, T),
                                 windows.narrow(1, 1, T), starts, 7);
  EXPECT_TRUE(torch::equal(got.inputs, all.inputs.index_select(0, idx)));
  EXPECT_TRUE(torch::equal(got.targets, all.targets.index_select(0, idx)));
  // The same seed and step again: the same; another step: other samples.
  const auto again = policy.sample(*one, distill::BatchSource::STUDENT,
                                   windows.narrow(1, 0, T), windows.narrow(1, 1, T), starts, 7);
  EXPECT_TRUE(torch::equal(again.inputs, all.inputs));
  const auto other = policy.sample(*one, distill::BatchSource::STUDENT,
                                   windows.narrow(1, 0, T), windows.narrow(1, 1, T), starts, 8);
  EXPECT_FALSE(torch::equal(other.inputs, all.inputs));
  // Teacher-sampled (seq_kd): its samples are cross-entropy targets too.
  const auto teacher = policy.sample(*one, distill::BatchSource::TEACHER,
                                     windows.narrow(1, 0, T), windows.narrow(1, 1, T), starts, 7);
  EXPECT_TRUE(torch::equal(teacher.targets.narrow(1, 0, T - 1), teacher.inputs.narrow(1, 1, T - 1)));
  EXPECT_FALSE((teacher.targets == -100).any().item<bool>());
}

TEST(OnPolicy, SourcesFollowLmbdaAndAreTheSameOnEveryRank) {
  auto d = on_policy_section();
  const distill::OnPolicy half(d, 42, 16);
  int student = 0;
  std::vector<int64_t> mine;
  for (int64_t step = 1; step <= 400; ++step) {
    const auto s = half.source(step, 0);
    student += s == distill::BatchSource::STUDENT;
    mine.push_back(static_cast<int64_t>(s));
  }
  EXPECT_NEAR(student / 400.0, 0.5, 0.08);
  // The ranks agree without communicating: rank 0's list on every rank.
  auto t = torch::tensor(mine);
  auto r0 = t.clone();
  test::world().group()->broadcast(r0, 0, {"on_policy_sources"});
  EXPECT_TRUE(torch::equal(t, r0));
  d.lmbda = 0;
  d.seq_kd = true;
  EXPECT_EQ(distill::OnPolicy(d, 42, 16).source(3, 0), distill::BatchSource::TEACHER);
  d.lmbda = 1;
  EXPECT_EQ(distill::OnPolicy(d, 42, 16).source(3, 0), distill::BatchSource::STUDENT);
  d.max_new_tokens = 17;
  EXPECT_THROW(distill::OnPolicy(d, 42, 16), ConfigError);
}

}  // namespace
