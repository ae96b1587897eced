#include "teacher.h"

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include "fsdpp/common/error.h"
#include "fsdpp/data/tokenizer_files.h"
#include "fsdpp/data/tokenizer_identity.h"
#include "fsdpp/fsdp/deferred_init.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/fsdp/inspect.h"
#include "fsdpp/fsdp/wrap_policy.h"
#include "phases.h"

namespace fsdpp::train::detail {

ModelSource check_teacher_source(const TrainConfig& cfg, int64_t student_vocab) {
  const auto& d = cfg.distillation;
  ModelSource source(d.teacher, "distillation.teacher");
  FSDPP_CHECK_AS(ConfigError, source.vocab_size() == student_vocab,
                 "[train] distillation.teacher='{}' has a vocabulary of {} tokens and the "
                 "student {}: the KD loss compares distributions over the same tokens; expected "
                 "a teacher of the student's tokenizer (or model.vocab_size={})",
                 source.dir().string(), source.vocab_size(), student_vocab, source.vocab_size());
  FSDPP_CHECK_AS(ConfigError, d.top_k <= student_vocab,
                 "[config] distillation.top_k={} is larger than the vocabulary ({} tokens); "
                 "expected 0 (all of it) or 1..{}",
                 d.top_k, student_vocab, student_vocab);
  return source;
}

std::optional<std::string> check_teacher_tokenizer(const TrainConfig& cfg,
                                                   const data::Tokenizer& tokenizer,
                                                   const std::string& how) {
  const ModelSource source(cfg.distillation.teacher, "distillation.teacher");
  const auto student = data::identity_of(tokenizer);
  const auto teacher = data::read_tokenizer_identity(source.dir());
  if (!teacher) {
    return fmt::format("[train] warning: distillation.teacher='{}' holds no tokenizer (no {}, "
                       "tokenizer.model or tokenizer.json): fsdpp cannot check that it speaks the "
                       "student's tokenizer, {} ({}); the KD loss is meaningless if it does not",
                       source.dir().string(), data::kTokenizerFile, student.describe(), how);
  }
  FSDPP_CHECK_AS(ConfigError, data::same_tokenizer(*teacher, tokenizer),
                 "[train] distillation.teacher='{}' speaks another tokenizer than the student: "
                 "the teacher's is {}, the student's {} ({}). The same id means another string to "
                 "each, so the KD loss would compare unrelated tokens (a vocabulary of the same "
                 "size is no proof). Train the student with the teacher's tokenizer, or distil "
                 "from a teacher trained on the student's (docs/distillation.md#the-teachers-"
                 "tokenizer)",
                 source.dir().string(), teacher->describe(), student.describe(), how);
  return std::nullopt;
}

Teacher::Teacher(const TrainConfig& cfg, dist::World& world, int64_t student_vocab)
    : source_(check_teacher_source(cfg, student_vocab)) {
  const auto& d = cfg.distillation;
  // Under model.deferred_init the teacher is made without storage and each rank reads its
  // shards' rows only; otherwise built whole and loaded before sharding.
  const bool deferred = deferred_init(cfg);
  lm_ = source_.build(cfg.training.seed, deferred ? at::Device(at::kMeta) : at::Device(at::kCPU));
  torch::nn::Module& model = lm_->module();
  if (!deferred) {
    source_.load_whole(*lm_);
    if (!world.device().is_cpu()) model.to(world.device());  // the student's device
  }
  {
    at::NoGradGuard no_grad;
    for (auto& p : model.parameters()) {
      p.requires_grad_(false);
      // bf16 storage halves the teacher's shards (and, on a GPU, its all-gathers and compute).
      if (d.teacher_dtype == TeacherDtype::BFLOAT16) p.set_data(p.to(at::kBFloat16));
    }
  }
  // A group of its own: comm_counters(teacher) then counts the teacher's collectives alone,
  // and the student's comm_bytes stay the student's. (A 1-D mesh over the world would be the
  // world's own group; the "shard" dim of a 1 x N mesh is a new group over the same ranks.)
  mesh_ = world.init_device_mesh({1, world.size()}, {"teacher", "shard"})->sub({"shard"});
  FullyShardOptions o;
  o.mesh = mesh_;
  o.strategy = ShardingStrategy::FULL_SHARD;
  o.backward_prefetch = BackwardPrefetch::NONE;
  o.limit_all_gathers = cfg.training.fsdp_config.limit_all_gathers ? 2 : 0;
  if (d.teacher_dtype == TeacherDtype::BFLOAT16 && world.device().is_cpu()) {
    // On the CPU, bf16 shards are gathered and computed in float32: oneDNN's bf16 matmuls cache
    // a primitive per shape, and the experts' shapes change with every batch's routing
    // (measured: RSS +320 MiB over 80 steps, where float32 stays flat).
    o.mp_policy.param_dtype = at::kFloat;
  }
  apply_fully_shard(model, transformer_layer_policy({decoder_layer_class(source_.architecture())}), o);
  if (deferred) to_empty(model, world.device());
  source_.load_after_sharding(*lm_, mesh_->group(0));
  comm_before_ = comm_counters(model);
}

std::string Teacher::describe() const {
  return fmt::format("{} from {}", lm_->describe(), source_.dir().string());
}

models::CausalLMOutput Teacher::forward(const at::Tensor& x,
                                       const std::vector<int64_t>& hidden_layers,
                                       const at::Tensor& positions) {
  at::NoGradGuard no_grad;
  return lm_->forward_features(x, /*aux_loss=*/false, hidden_layers, positions);
}

void Teacher::begin_step() { comm_before_ = comm_counters(lm_->module()); }

void Teacher::log_step(nlohmann::json& line) {
  const auto comm = comm_counters(lm_->module()) - comm_before_;
  line["teacher_all_gather_bytes"] = comm.bytes_of(dist::Collective::ALL_GATHER);
  line["teacher_reduce_scatter_bytes"] = comm.bytes_of(dist::Collective::REDUCE_SCATTER);
}

}  // namespace fsdpp::train::detail
