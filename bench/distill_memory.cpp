// fsdpp-distill-memory: the memory a distilled accumulation batch's loss adds, unchunked (the loss of
// distill_loss.h over whole (positions x vocabulary) tensors, as fsdpp-train computed it before
// the chunked loss) against chunked (chunked_distill_loss.h, as fsdpp-train computes it now),
// on a small Qwen3-MoE student and teacher at a vocabulary of 32 K and 151 K (Qwen3's), one
// process. docs/distillation.md#memory shows its table.
//
//   fsdpp-distill-memory [--vocab 32000,151936] [--batch 2] [--seq 128] [--chunk 0]
//                        [--loss forward_kl]
//
// Every live tensor byte is counted (a counting CPU allocator, tests/support): the peak above
// what is live before the step (the two models' parameters and the batch), over the student's
// forward, the teacher's forward, the loss and the backward. The chunked run is the same step
// with the student's logits-only forward and the chunked objective; both give the same loss.
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "../tests/support/counting_allocator.h"
#include "fsdpp/models/causal_lm.h"
#include "fsdpp/distill/chunked_distill_loss.h"
#include "fsdpp/distill/distill_loss.h"

using namespace fsdpp;

namespace {

models::Qwen3MoeConfig small(int64_t vocab, int64_t layers, uint64_t seed) {
  models::Qwen3MoeConfig c;
  c.vocab_size = vocab;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.moe_intermediate_size = 64;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  c.max_position_embeddings = 256;
  c.seed = seed;
  return c;
}

struct Measured {
  double loss = 0;
  int64_t peak = 0;  // bytes above what was live before the step
  double ms = 0;
};

Measured step(test::CountingAllocator& counter, models::CausalLM& student,
              models::CausalLM& teacher, const at::Tensor& x, const at::Tensor& y,
              const distill::DistillLossOptions& o, bool chunked, int64_t chunk) {
  counter.reset_peak(0);
  const int64_t before = counter.live(0);
  const auto t0 = std::chrono::steady_clock::now();
  at::Tensor loss;
  {
    at::Tensor teacher_logits;
    if (chunked) {
      auto out = student.forward_features(x, /*aux_loss=*/true, {});
      {
        at::NoGradGuard g;
        teacher_logits = teacher.forward_features(x, false, {}).logits;
      }
      auto parts = distill::chunked_distillation_objective(out.logits, {.logits = teacher_logits}, y,
                                                         {}, o, 0.5, chunk);
      teacher_logits.reset();
      loss = parts.loss + 0.001 * out.aux_loss;
    } else {
      // fsdpp-train before the chunked loss: the student's forward with its cross-entropy, the
      // teacher's logits, the unchunked objective, the teacher's logits dropped.
      auto out = student.forward(x, y);
      {
        at::NoGradGuard g;
        teacher_logits = teacher.forward_features(x, false, {}).logits;
      }
      auto parts = distill::distillation_objective(out.logits, teacher_logits, y, o, 0.5);
      teacher_logits.reset();
      loss = parts.loss + 0.001 * out.aux_loss;
    }
    loss.backward();
  }
  Measured m;
  m.loss = loss.item<double>();
  m.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  m.peak = counter.peak(0) - before;
  for (auto& p : student.module().parameters()) p.mutable_grad().reset();
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fsdpp-distill-memory: peak memory of the KD loss, unchunked and chunked"};
  std::string vocabs = "32000,151936", loss = "forward_kl";
  int64_t batch = 2, seq = 128, chunk = 0;
  app.add_option("--vocab", vocabs, "vocabulary sizes, comma-separated")->capture_default_str();
  app.add_option("--batch", batch, "sequences per accumulation batch")->capture_default_str();
  app.add_option("--seq", seq, "tokens per sequence")->capture_default_str();
  app.add_option("--chunk", chunk, "positions per chunk of the chunked loss; 0: 64 MiB of "
                 "probabilities (distillation.loss_chunk_tokens)")->capture_default_str();
  app.add_option("--loss", loss, "forward_kl | reverse_kl | generalized_jsd")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  test::CountingScope scope;
  test::tl_rank = 0;
  distill::DistillLossOptions o;
  o.type = loss;
  o.temperature = 2.0;
  std::printf("| vocabulary | loss | (positions x vocab) float32 | chunk (positions) | unchunked "
              "peak | chunked peak | saved | unchunked ms | chunked ms | loss difference |\n"
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::stringstream list(vocabs);
  for (std::string v; std::getline(list, v, ',');) {
    const int64_t V = std::stoll(v);
    auto student = models::causal_lm(models::Qwen3Moe(small(V, 1, 1)));
    auto teacher = models::causal_lm(models::Qwen3Moe(small(V, 2, 2)));
    for (auto& p : teacher->module().parameters()) p.requires_grad_(false);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
    const auto x = torch::randint(0, V, {batch, seq}, gen);
    const auto y = torch::randint(0, V, {batch, seq}, gen);
    step(scope.counter(), *student, *teacher, x, y, o, false, chunk);  // warm up both paths once
    step(scope.counter(), *student, *teacher, x, y, o, true, chunk);
    const auto a = step(scope.counter(), *student, *teacher, x, y, o, false, chunk);
    const auto b = step(scope.counter(), *student, *teacher, x, y, o, true, chunk);
    const double mib = 1 << 20;
    const double nv = static_cast<double>(batch * seq * V) * 4 / mib;
    const int64_t positions = chunk > 0 ? chunk : distill::default_chunk_positions(V);
    std::printf("| %lld | %s | %.0f MiB | %lld | %.0f MiB | %.0f MiB | %.1fx | %.0f | %.0f | %.1e |\n",
                static_cast<long long>(V), loss.c_str(), nv,
                static_cast<long long>(std::min(positions, batch * seq)), a.peak / mib, b.peak / mib,
                static_cast<double>(a.peak) / static_cast<double>(b.peak), a.ms, b.ms,
                std::abs(a.loss - b.loss));
    std::fflush(stdout);
  }
  return 0;
}
