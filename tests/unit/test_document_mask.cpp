// Document masking in one process (docs/training.md#packed-sequences-and-document-masking): for
// the Llama and the Qwen3-MoE in float32, a packed row of several documents with positions
// restarting at 0 gives each document's tokens the logits, the loss and the gradients of that
// document run alone; so do its pipeline stages chained and its activation-checkpointed blocks.
// Without positions nothing changes; bad positions are refused; the cross entropy's divisor.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "../support/error_of.h"
#include "../support/tiny_models.h"
#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/activation_checkpoint.h"
#include "fsdpp/models/causal_lm.h"
#include "fsdpp/models/llama_stages.h"
#include "fsdpp/models/qwen3_moe_stages.h"
#include "packed_documents.h"

using namespace fsdpp;
using namespace fsdpp::models;
using fsdpp::test::error_of;

namespace {

constexpr int64_t kVocab = 53;
constexpr int64_t kSeq = 24;

enum class Arch { kLlama, kQwen3Moe };

LlamaConfig llama_config() {
  auto c = fsdpp::test::tiny_llama(/*n_layers=*/3, kSeq, /*seed=*/5);
  c.vocab_size = kVocab;
  c.n_kv_heads = 2;
  c.ffn_hidden = 40;
  return c;
}

Qwen3MoeConfig qwen3_config() {
  auto c = fsdpp::test::tiny_moe(/*n_layers=*/3, /*num_experts=*/4, /*seed=*/7);
  c.vocab_size = kVocab;
  c.intermediate_size = 40;
  c.mlp_only_layers = {1};
  c.max_position_embeddings = kSeq;
  return c;
}

std::unique_ptr<CausalLM> make(Arch a) {
  return a == Arch::kLlama ? causal_lm(Llama(llama_config())) : causal_lm(Qwen3Moe(qwen3_config()));
}

const char* name_of(Arch a) { return a == Arch::kLlama ? "Llama" : "Qwen3-MoE"; }

// Two rows: three documents of uneven lengths, then one whole row and two short ones.
test::PackedBatch batch() { return test::packed_batch({{7, 11, 6}, {3, 16, 5}}, kVocab, 42); }

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

// Every parameter's gradient, by name (zeros where none reached it).
std::map<std::string, at::Tensor> grads_of(torch::nn::Module& m) {
  std::map<std::string, at::Tensor> out;
  for (const auto& p : m.named_parameters()) {
    out[p.key()] =
        p.value().grad().defined() ? p.value().grad().clone() : at::zeros_like(p.value());
  }
  return out;
}

}  // namespace

// Each document's logits in the packed rows are those it has alone.
TEST(DocumentMask, LogitsOfEachDocumentAlone) {
  const auto b = batch();
  for (Arch a : {Arch::kLlama, Arch::kQwen3Moe}) {
    auto lm = make(a);
    torch::NoGradGuard no_grad;
    const auto packed = lm->forward_features(b.tokens, false, {}, b.positions).logits;  // (B,T,V)
    double worst = 0;
    test::for_each_document(
        b, [&](int64_t row, int64_t start, const at::Tensor& x, const at::Tensor&) {
          const auto alone = lm->forward_features(x, false, {}).logits[0];
          worst = std::max(worst, max_diff(packed[row].narrow(0, start, x.size(1)), alone));
        });
    std::cout << "[document mask] " << name_of(a) << ": logits differ by at most " << worst << "\n";
    EXPECT_LE(worst, 1e-5) << name_of(a);
    // Without the mask the later documents would see the earlier ones: the check has teeth.
    const auto unmasked = lm->forward_features(b.tokens, false, {}).logits;
    EXPECT_GT(max_diff(unmasked, packed), 1e-3) << name_of(a);
  }
}

// The packed rows' loss (the mean over every loss-bearing token) and its gradients are those of
// the documents alone, each document's token losses summed over the same count.
TEST(DocumentMask, LossAndGradientsOfTheDocumentsAlone) {
  const auto b = batch();
  const double n = (b.targets != -100).sum().item<double>();
  for (Arch a : {Arch::kLlama, Arch::kQwen3Moe}) {
    auto lm = make(a);
    auto& m = lm->module();
    const auto out = lm->forward_features(b.tokens, false, {}, b.positions);
    const auto loss = lm->cross_entropy(out.logits, b.targets);
    loss.backward();
    const auto packed = grads_of(m);
    m.zero_grad();
    double ref_loss = 0;
    test::for_each_document(b, [&](int64_t, int64_t, const at::Tensor& x, const at::Tensor& y) {
      const auto doc = lm->cross_entropy(lm->forward_features(x, false, {}).logits, y, n);
      doc.backward();
      ref_loss += doc.item<double>();
    });
    const auto alone = grads_of(m);
    double worst = 0;
    for (const auto& [name, g] : alone) worst = std::max(worst, max_diff(packed.at(name), g));
    std::cout << "[document mask] " << name_of(a) << ": loss " << loss.item<double>() << " vs "
              << ref_loss << ", gradients differ by at most " << worst << "\n";
    EXPECT_NEAR(loss.item<double>(), ref_loss, 1e-6) << name_of(a);
    EXPECT_LE(worst, 1e-6) << name_of(a);
  }
}

// Activation checkpointing recomputes each block with the same positions and mask: the same
// gradients as without it, full or selective (the projections' products kept).
TEST(DocumentMask, ActivationCheckpointingRecomputesTheMask) {
  const auto b = batch();
  for (Arch a : {Arch::kLlama, Arch::kQwen3Moe}) {
    for (bool selective : {false, true}) {
      auto plain = make(a);
      auto checkpointed = make(a);
      apply_activation_checkpointing(
          checkpointed->module(), {a == Arch::kLlama ? "TransformerBlock" : "Qwen3MoeDecoderLayer"},
          1, {.keep_products = selective});
      for (auto* lm : {plain.get(), checkpointed.get()}) {
        lm->cross_entropy(lm->forward_features(b.tokens, false, {}, b.positions).logits, b.targets)
            .backward();
      }
      const auto want = grads_of(plain->module());
      const auto got = grads_of(checkpointed->module());
      double worst = 0;
      for (const auto& [name, g] : want) worst = std::max(worst, max_diff(got.at(name), g));
      EXPECT_LE(worst, 1e-7) << name_of(a) << " selective=" << selective;
    }
  }
}

// Pipeline stages chained, every stage given the positions, compute the whole model's logits.
TEST(DocumentMask, StagesChainedAreTheWholeModel) {
  const auto b = batch();
  torch::NoGradGuard no_grad;
  {
    Llama model(llama_config());
    const auto whole = model->forward(b.tokens, at::Tensor(), {}, b.positions).logits;
    auto stages = split_llama(model, {2, 2, 1});
    at::Tensor h = b.tokens;
    for (auto& s : stages) h = s->forward(h, b.positions);
    EXPECT_TRUE(torch::equal(h, whole));
  }
  {
    Qwen3Moe model(qwen3_config());
    const auto whole = model->forward(b.tokens, at::Tensor(), false, {}, b.positions).logits;
    auto stages = split_qwen3_moe(model, {2, 2, 1});
    at::Tensor h = b.tokens;
    for (auto& s : stages) h = s->forward(h, b.positions);
    EXPECT_TRUE(torch::equal(h, whole));
  }
}

// One document per row (positions 0 .. T-1) is the causal model without positions.
TEST(DocumentMask, OneDocumentPerRowIsTheCausalModel) {
  const auto b = test::packed_batch({{kSeq}, {kSeq}}, kVocab, 3);
  for (Arch a : {Arch::kLlama, Arch::kQwen3Moe}) {
    auto lm = make(a);
    torch::NoGradGuard no_grad;
    const auto with = lm->forward_features(b.tokens, false, {}, b.positions).logits;
    const auto without = lm->forward_features(b.tokens, false, {}).logits;
    EXPECT_LE(max_diff(with, without), 1e-5) << name_of(a);
  }
}

TEST(DocumentMask, BadPositionsAreRefused) {
  const auto b = batch();
  for (Arch a : {Arch::kLlama, Arch::kQwen3Moe}) {
    auto lm = make(a);
    torch::NoGradGuard no_grad;
    auto run = [&](const at::Tensor& p) { lm->forward_features(b.tokens, false, {}, p); };
    const std::string limit = a == Arch::kLlama ? "max_seq_len=24" : "max_position_embeddings=24";
    EXPECT_NE(
        error_of([&] { run(b.positions.narrow(1, 0, 5)); }).find("positions must be (B,T) int64"),
        std::string::npos);
    EXPECT_NE(error_of([&] { run(b.positions.to(at::kInt)); }).find("int64"), std::string::npos);
    EXPECT_NE(error_of([&] { run(b.positions - 1); }).find("positions run from -1"),
              std::string::npos);
    EXPECT_NE(error_of([&] { run(b.positions + kSeq - 3); }).find(limit), std::string::npos)
        << name_of(a);
  }
}

// token_cross_entropy's divisor: the sum over the loss-bearing tokens divided by it; 0 with a
// zero gradient where a batch has none (its mean would be 0/0).
TEST(DocumentMask, CrossEntropyDivisor) {
  auto logits = torch::randn({2, 5, 7}, torch::kDouble).requires_grad_(true);
  auto targets = torch::randint(0, 7, {2, 5});
  targets[0][1] = -100;
  const double mean = token_cross_entropy(logits, targets).item<double>();
  EXPECT_NEAR(token_cross_entropy(logits, targets, 4.5).item<double>(), mean * 9 / 4.5, 1e-12);
  const auto none = torch::full({2, 5}, -100, torch::kLong);
  const auto zero = token_cross_entropy(logits, none, 3.0);
  zero.backward();
  EXPECT_EQ(zero.item<double>(), 0.0);
  EXPECT_EQ(logits.grad().abs().sum().item<double>(), 0.0);
  EXPECT_THROW(token_cross_entropy(logits, targets, -1.0), ConfigError);
}
