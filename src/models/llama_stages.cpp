#include "fsdpp/models/llama_stages.h"

#include <numeric>
#include <string>

#include "decoder_parts.h"
#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "model_stage.h"

namespace fsdpp::models {

int64_t llama_pipeline_units(const LlamaConfig& cfg) { return cfg.n_layers + 2; }

std::string language_model_units(int64_t n_layers) {
  return fmt::format("the embedding, {} block{} and the head", n_layers, n_layers == 1 ? "" : "s");
}

std::vector<int> even_units_per_stage(int64_t units, int num_stages) {
  FSDPP_CHECK_AS(ConfigError, num_stages >= 1 && units >= num_stages,
                 "[models] {} units (the embedding, the blocks and the head) cannot fill {} "
                 "pipeline stages; every stage needs at least one",
                 units, num_stages);
  std::vector<int> counts(static_cast<size_t>(num_stages), static_cast<int>(units / num_stages));
  for (int64_t i = 0; i < units % num_stages; ++i) ++counts[static_cast<size_t>(i)];
  return counts;
}

std::vector<int> units_per_stage(int64_t units, int layers_per_stage) {
  FSDPP_CHECK_AS(ConfigError, layers_per_stage >= 1,
                 "[models] pipeline layers_per_stage={}; expected >= 1", layers_per_stage);
  std::vector<int> counts;
  for (int64_t left = units; left > 0; left -= layers_per_stage) {
    counts.push_back(static_cast<int>(std::min<int64_t>(left, layers_per_stage)));
  }
  return counts;
}

LlamaStageImpl::LlamaStageImpl(LlamaImpl& model, int64_t first_unit, int64_t num_units)
    : torch::nn::Module("LlamaStage"),
      parallel(model.parallel),
      first_unit_(first_unit),
      num_units_(num_units),
      max_seq_len_(model.config().max_seq_len) {
  const int64_t n_layers = model.config().n_layers;
  const int64_t units = n_layers + 2;
  FSDPP_CHECK_AS(ConfigError, num_units >= 1 && first_unit >= 0 && first_unit + num_units <= units,
                 "[models] Llama stage of units [{}, {}) is outside the model's {} units",
                 first_unit, first_unit + num_units, units);
  const int64_t last = first_unit + num_units - 1;
  if (first_unit == 0) tok_embeddings = register_module("tok_embeddings", model.tok_embeddings);
  torch::nn::ModuleHolder<torch::nn::Module> layers{nullptr};
  for (int64_t u = std::max<int64_t>(first_unit, 1); u <= std::min(last, n_layers); ++u) {
    if (blocks.empty()) {
      // A plain container, so that the blocks keep the whole model's names ("layers.3...").
      auto container = std::make_shared<torch::nn::Module>("Layers");
      register_module("layers", container);
      layers = torch::nn::ModuleHolder<torch::nn::Module>(container);
    }
    auto block = model.layers->ptr<TransformerBlockImpl>(static_cast<size_t>(u - 1));
    layers->register_module(std::to_string(u - 1), block);
    blocks.emplace_back(block);
  }
  if (last == units - 1) {
    FSDPP_CHECK_AS(ConfigError, !model.output.is_empty(),
                   "[models] a Llama with tie_embeddings cannot be split into pipeline stages: "
                   "its embedding table is also the head");
    norm = register_module("norm", model.norm);
    output = register_module("output", model.output);
  }
}

at::Tensor LlamaStageImpl::forward(const at::Tensor& x) { return forward(x, at::Tensor()); }

at::Tensor LlamaStageImpl::forward(const at::Tensor& x, const at::Tensor& positions_in) {
  at::Tensor h = x;
  if (has_embedding()) {
    FSDPP_CHECK_AS(ConfigError, x.dim() == 2 && x.scalar_type() == at::kLong,
                   "[models] the first Llama stage takes tokens (B,T) int64; got {} dims of {}",
                   x.dim(), c10::toString(x.scalar_type()));
    FSDPP_CHECK_AS(ConfigError, x.size(1) >= 1 && x.size(1) <= max_seq_len_,
                   "[models] Llama sequence length T={} is out of range; expected 1 <= T <= "
                   "max_seq_len={}",
                   x.size(1), max_seq_len_);
    h = parallel ? parallel->embed(x, tok_embeddings->weight) : tok_embeddings(x);  // (B,T,C)
  }
  // Document masking: every stage checks its microbatch's positions (the whole sequence's under
  // sequence parallelism, where h holds this rank's chunk) and makes the mask once.
  at::Tensor positions, mask;
  if (positions_in.defined() && !blocks.empty()) {
    positions = positions_in.to(h.device());
    const int64_t T = has_embedding() ? x.size(1)
                                      : h.size(1) * (parallel ? parallel->sequence_multiple() : 1);
    detail::check_positions(positions, {h.size(0), T}, max_seq_len_, "Llama", "max_seq_len");
    mask = detail::document_causal_mask(positions);
  }
  // Through fsdpp::forward, so that a block made an FSDP unit gathers its parameters.
  for (auto& block : blocks) {
    h = positions.defined() ? fsdpp::forward(block, h, positions, mask) : fsdpp::forward(block, h);
  }
  if (has_head()) {
    h = norm(h);
    if (parallel) h = parallel->enter(h, "output");
    h = output(h);  // (B,T,V)
  }
  return h;
}

at::Tensor LlamaStageImpl::loss(const at::Tensor& logits, const at::Tensor& targets) const {
  FSDPP_CHECK(has_head(), "[models] loss on a Llama stage without the head (units [{}, {}))",
              first_unit_, first_unit_ + num_units_);
  return parallel ? parallel->loss(logits, targets, 0) : token_cross_entropy(logits, targets);
}

std::vector<LlamaStage> split_llama(Llama& model, const std::vector<int>& counts) {
  const auto& cfg = model->config();
  FSDPP_CHECK_AS(ConfigError, !cfg.tie_embeddings,
                 "[models] a Llama with tie_embeddings cannot be split into pipeline stages: its "
                 "embedding table is also the head, on the first and the last stage");
  return detail::cut_into_stages<LlamaStage>(
      counts, llama_pipeline_units(cfg), "Llama",
      fmt::format("the embedding, {} blocks and the head", cfg.n_layers),
      [&](int64_t first, int c) { return LlamaStage(std::make_shared<LlamaStageImpl>(*model, first, c)); });
}

}  // namespace fsdpp::models
