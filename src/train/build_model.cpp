// build_model (phases.h): the model's vocabulary, the check that the run fits in memory, the
// Llama itself and model.init_from's weights where they load before sharding.
#include "fsdpp/common/error.h"
#include "fsdpp/dist/agree.h"
#include "fsdpp/estimate/memory_estimate.h"
#include "fsdpp/train/memory_check.h"
#include "phases.h"

namespace fsdpp::train::detail {

void build_model(TrainSession& s) {
  const auto& cfg = s.cfg;
  const auto& t = cfg.training;
  auto& world = s.world;
  const auto& tokenizer = s.tokenizer;
  auto& init = s.init;
  auto& model = s.model;
  const int64_t vocab = s.vocab = cfg.model.vocab_size > 0 ? cfg.model.vocab_size : tokenizer->vocab_size();
  FSDPP_CHECK_AS(ConfigError, vocab >= tokenizer->vocab_size(),
                 "[train] model.vocab_size={} is smaller than the tokenizer's vocabulary ({})",
                 vocab, tokenizer->vocab_size());
  if (!t.skip_memory_check && world.backend() == dist::BackendKind::GLOO) {
    // The host's memory is the device's on CPU; a GPU's is not checked here.
    const int local = world.env().local_world_size;
    dist::agree_on_failure(*world.group(), "checking that the run fits in memory", [&] {
      const auto ce = configured_estimate(cfg, vocab, world.size(), local);
      check_memory_fits(estimate_memory(ce.model, ce.options), ce.model.num_params() * 4, local);
    });
  }
  model = models::Llama(cfg.llama_config(vocab));
  if (init) init->load_before_sharding(model);
  const int64_t n_params = models::num_parameters(*model);
  s.say(fmt::format("[train] model: Llama dim {} x {} layers, {} heads ({} kv), vocab {}: {:.2f} M parameters",
                    cfg.model.dim, cfg.model.n_layers, cfg.model.n_heads,
                    cfg.model.n_kv_heads > 0 ? cfg.model.n_kv_heads : cfg.model.n_heads, vocab,
                    n_params / 1e6));
}

}  // namespace fsdpp::train::detail
