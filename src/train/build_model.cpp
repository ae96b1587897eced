// fsdpp-train's language models (run_model.h) at build_model (phases.h): the model's vocabulary,
// the check that the run fits in memory, the model of model.architecture (on the meta device
// under model.deferred_init, else whole), its plan, the classes the config names in it and
// model.init_from's weights where they load before sharding (a model built whole); the layout
// checks of its shape (choose_start) and its FLOPs per token (MFU).
#include <string>

#include "fsdpp/common/error.h"
#include "fsdpp/estimate/flops.h"
#include "fsdpp/fsdp/wrap_policy.h"
#include "fsdpp/models/llama_stages.h"
#include "fsdpp/models/model_plan.h"
#include "fsdpp/train/memory_check.h"
#include "fits_check.h"
#include "phases.h"
#include "wrap_classes.h"

namespace fsdpp::train::detail {
namespace {

// The guide's Qwen3MoeDecoderLayer on the Llama that fsdpp-train builds is the usual case of a
// wrap class the model lacks (wrap_classes.h).
void check_layer_classes(const TrainConfig& cfg, torch::nn::Module& model) {
  const auto missing = missing_wrap_class(cfg, model);
  if (!missing) return;
  // The model built, not the YAML: model.init_from may have made it another architecture.
  const auto arch = cfg.model.architecture;
  FSDPP_THROW(ConfigError,
              "[train] training.fsdp_config.fsdp_transformer_layer_cls_to_wrap names '{}', "
              "which is not a module class of the model fsdpp-train builds ({}: {}){}; "
              "expected its decoder layer's class, [{}]{}",
              missing->name, module_class_name(model), missing->classes,
              arch == ModelArchitecture::LLAMA && missing->name == decoder_layer_class(ModelArchitecture::QWEN3_MOE)
                  ? " (Qwen3MoeDecoderLayer is the Qwen3-MoE model's layer: set "
                    "model.architecture=qwen3_moe)"
                  : "",
              decoder_layer_class(arch),
              cfg.model.init_from.empty()
                  ? ""
                  : fmt::format(" (model.init_from='{}' made the model {})", cfg.model.init_from,
                                cfg.model.architecture.name()));
}

}  // namespace

// The pipeline's cut of model.n_layers under the keys that set it, before output_dir is touched.
void LanguageModels::check_layout(TrainSession& s) const {
  const int64_t n = s.cfg.model.n_layers;
  const parallel::PipelineUnits units{
      n + 2, fmt::format("{}; model.n_layers={}", models::language_model_units(n), n)};
  if (s.dims.pipeline_parallel()) (void)pipeline_microbatches(s.cfg, s.dims, units);
}

double LanguageModels::flops_per_token(const TrainSession& s) const {
  const auto ce = configured_estimate(s.cfg, s.vocab, s.dims);
  return training_flops_per_token(ce.model, s.cfg.data.seq_len);
}

void LanguageModels::build_model(TrainSession& s) const {
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
  if (cfg.distillation.live_teacher()) distill::check_teacher_source(cfg.distillation, vocab);
  check_run_fits(
      s, [&] { return configured_estimate(cfg, vocab, s.dims); },
      /*builds_whole=*/!deferred_init(cfg));
  const at::Device device = model_build_device(cfg);
  if (llama) {
    s.lm = models::causal_lm(models::Llama(cfg.llama_config(vocab), device));
  } else {
    s.lm = models::causal_lm(models::Qwen3Moe(cfg.qwen3_moe_config(vocab), device));
  }
  // The plan parallelize applies (shard_model), sharing the model the session owns.
  s.plan = models::plan_of(std::shared_ptr<models::CausalLM>(std::shared_ptr<void>(), s.lm.get()));
  check_layer_classes(cfg, s.lm->module());
  if (init && !deferred_init(cfg)) init->load_whole(*s.lm);
  const int64_t n_params = models::num_parameters(s.lm->module());
  s.say(fmt::format("[train] model: {}: {:.2f} M parameters", s.lm->describe(), n_params / 1e6));
}

}  // namespace fsdpp::train::detail
