// build_model (phases.h): the model's vocabulary, the check that the run fits in memory, the
// model of model.architecture (on the meta device under model.deferred_init, else whole) and
// model.init_from's weights where they load before sharding (a model built whole).
#include "fsdpp/common/error.h"
#include "fsdpp/train/memory_check.h"
#include "fits_check.h"
#include "phases.h"

namespace fsdpp::train::detail {

void build_model(TrainSession& s) {
  if (s.custom) return build_custom_model(s);  // train()'s module (custom_model.cpp)
  const auto& cfg = s.cfg;
  auto& world = s.world;
  const auto& tokenizer = s.tokenizer;
  auto& init = s.init;
  const int64_t vocab = s.vocab = cfg.model.vocab_size > 0 ? cfg.model.vocab_size : tokenizer->vocab_size();
  FSDPP_CHECK_AS(ConfigError, vocab >= tokenizer->vocab_size(),
                 "[train] model.vocab_size={} is smaller than the tokenizer's vocabulary ({})",
                 vocab, tokenizer->vocab_size());
  const bool llama = cfg.model.architecture == ModelArchitecture::LLAMA;
  // distillation.teacher's directory and vocabulary, named by the key before anything reads it.
  if (cfg.distillation.live_teacher()) check_teacher_source(cfg, vocab);
  check_run_fits(
      s, [&] { return configured_estimate(cfg, vocab, world.size(), world.env().local_world_size); },
      /*builds_whole=*/!deferred_init(cfg));
  const at::Device device = model_build_device(cfg);
  if (llama) {
    s.lm = models::causal_lm(models::Llama(cfg.llama_config(vocab), device));
  } else {
    s.lm = models::causal_lm(models::Qwen3Moe(cfg.qwen3_moe_config(vocab), device));
  }
  if (init && !deferred_init(cfg)) init->load_whole(*s.lm);
  const int64_t n_params = models::num_parameters(s.lm->module());
  s.say(fmt::format("[train] model: {}: {:.2f} M parameters", s.lm->describe(), n_params / 1e6));
}

}  // namespace fsdpp::train::detail
