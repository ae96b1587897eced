// The frozen teacher (teacher.h): its directory checked against the student, its model built,
// frozen and parallelized over a mesh of its own.
#include "fsdpp/distill/teacher.h"

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include "fsdpp/common/error.h"
#include "fsdpp/data/tokenizer_files.h"
#include "fsdpp/data/tokenizer_identity.h"
#include "fsdpp/fsdp/deferred_init.h"
#include "fsdpp/fsdp/inspect.h"
#include "fsdpp/models/model_plan.h"

namespace fsdpp::distill {

models::ModelSource check_teacher_source(const DistillationSection& d, int64_t student_vocab) {
  models::ModelSource source(d.teacher, "distillation.teacher");
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

std::optional<std::string> check_teacher_tokenizer(const DistillationSection& d,
                                                   const data::Tokenizer& tokenizer,
                                                   const std::string& how) {
  const models::ModelSource source(d.teacher, "distillation.teacher");
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

namespace {

// FULL_SHARD over every rank, forward only: no backward prefetch, the student's limit on
// all-gathers in flight.
parallel::ParallelizeOptions teacher_options(const DistillationSection& d, const RunParts& run,
                                             dist::World& world) {
  parallel::ParallelizeOptions o;
  o.fsdp.strategy = ShardingStrategy::FULL_SHARD;
  o.fsdp.backward_prefetch = BackwardPrefetch::NONE;
  o.fsdp.limit_all_gathers = run.limit_all_gathers ? 2 : 0;
  if (d.teacher_dtype == TeacherDtype::BFLOAT16 && world.device().is_cpu()) {
    // On the CPU, bf16 shards are gathered and computed in float32: oneDNN's bf16 matmuls cache
    // a primitive per shape, and the experts' shapes change with every batch's routing
    // (measured: RSS +320 MiB over 80 steps, where float32 stays flat).
    o.fsdp.mp_policy.param_dtype = at::kFloat;
  }
  if (run.deferred_init) {
    const auto device = world.device();
    o.materialize = [device](const std::vector<torch::nn::Module*>& roots) {
      for (auto* root : roots) to_empty(*root, device);
    };
  }
  return o;
}

}  // namespace

Teacher::Teacher(const DistillationSection& d, const RunParts& run, dist::World& world)
    : source_(check_teacher_source(d, run.student_vocab)) {
  // Under model.deferred_init the teacher is made without storage and each rank reads its
  // shards' rows only; otherwise built whole and loaded before sharding.
  lm_ = source_.build(run.seed, run.deferred_init ? at::Device(at::kMeta) : at::Device(at::kCPU));
  torch::nn::Module& model = lm_->module();
  if (!run.deferred_init) {
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
  // A mesh of its own over every rank, as the student's plan is applied: its units' groups are
  // new groups over the same ranks, so comm_counters(teacher) counts the teacher's collectives
  // alone and the student's comm_bytes stay the student's.
  auto plan = models::plan_of(std::shared_ptr<models::CausalLM>(std::shared_ptr<void>(), lm_.get()));
  parallel_ = parallel::parallelize(plan, world, {.dp_shard = world.size()},
                                    teacher_options(d, run, world));
  source_.load_after_sharding(parallel_->roots(), parallel_->mesh().group("dp_shard"));
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

}  // namespace fsdpp::distill
