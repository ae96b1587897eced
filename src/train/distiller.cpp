// The distilling run's loss per micro-batch and its metrics (distiller.h).
#include "distiller.h"

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <chrono>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/inspect.h"
#include "fsdpp/train/chunked_distill_loss.h"
#include "fsdpp/train/vocab_parallel_distill_loss.h"
#include "fsdpp/train/layer_distill_loss.h"
#include "elapsed.h"

namespace fs = std::filesystem;

namespace fsdpp::train::detail {
namespace {

// compress.json's layer_map of model.init_from (written by fsdpp-ckpt compress).
std::vector<std::string> compressed_layer_map(const TrainConfig& cfg) {
  const auto path = fs::path(cfg.model.init_from) / "compress.json";
  FSDPP_CHECK_AS(ConfigError, !cfg.model.init_from.empty() && fs::exists(path),
                 "[config] distillation.layer_map=[auto] takes the layers fsdpp-ckpt compress "
                 "kept from model.init_from's compress.json, and {}; give the pairs as [S:T, ...]",
                 cfg.model.init_from.empty() ? "model.init_from is empty"
                                             : "'" + path.string() + "' does not exist");
  std::ifstream in(path);
  const auto j = nlohmann::json::parse(std::string(std::istreambuf_iterator<char>(in), {}));
  std::vector<std::string> map;
  const auto& kept = j.at("kept_layers");
  for (size_t i = 0; i < kept.size(); ++i) map.push_back(fmt::format("{}:{}", i, kept[i].get<int64_t>()));
  return map;
}

}  // namespace

std::vector<std::pair<int64_t, int64_t>> resolve_layer_map(const TrainConfig& cfg,
                                                           int64_t student_layers,
                                                           int64_t teacher_layers) {
  const auto& map = cfg.distillation.layer_map;
  const bool automatic = map.size() == 1 && map.front() == "auto";
  const auto pairs = parse_layer_map(automatic ? compressed_layer_map(cfg) : map);
  for (const auto& [s, t] : pairs) {
    FSDPP_CHECK_AS(ConfigError, s < student_layers && t < teacher_layers,
                   "[config] distillation.layer_map{} pairs the student's layer {} with the "
                   "teacher's layer {}; expected student layers 0 .. {} and teacher layers 0 .. {}",
                   automatic ? " (auto, from compress.json)" : "", s, t, student_layers - 1,
                   teacher_layers - 1);
  }
  return pairs;
}

Distiller::Distiller(const TrainConfig& cfg, dist::World& world, int64_t student_vocab,
                     models::CausalLM& student)
    : policy_(cfg.distillation, cfg.training.seed, cfg.data.seq_len) {
  const auto& d = cfg.distillation;
  options_ = {.type = d.loss, .beta = d.beta, .temperature = d.temperature, .top_k = d.top_k};
  options_.validate();
  kd_ratio_ = d.kd_ratio;
  aux_coef_ = cfg.model.router_aux_loss_coef;
  layer_weight_ = d.layer_loss_weight;
  layer_loss_ = d.layer_loss;
  chunk_ = d.loss_chunk_tokens;
  seq_len_ = cfg.data.seq_len;
  vocab_ = student_vocab;
  if (d.live_teacher()) teacher_ = std::make_unique<Teacher>(cfg, world, student_vocab);
  if (!d.teacher_cache.empty()) {
    cache_ = TeacherCache::open(d.teacher_cache);
    const auto& info = cache_->info();
    FSDPP_CHECK_AS(ConfigError, info.vocab_size == student_vocab && info.seq_len == seq_len_,
                   "[train] distillation.teacher_cache='{}' was written for data.seq_len={} and "
                   "a vocabulary of {} tokens; this run has data.seq_len={} and {} tokens. Write "
                   "it again for this run (fsdpp-train teacher-logits with its config)",
                   d.teacher_cache, info.seq_len, info.vocab_size, seq_len_, student_vocab);
    FSDPP_CHECK_AS(ConfigError, d.top_k <= info.top_k,
                   "[config] distillation.top_k={} is more than the {} tokens per position "
                   "distillation.teacher_cache='{}' holds; expected 0 (all of them) or 1..{}",
                   d.top_k, info.top_k, d.teacher_cache, info.top_k);
  }
  if (!d.layer_map.empty()) {
    const auto pairs = resolve_layer_map(cfg, student.num_layers(), teacher_->lm().num_layers());
    for (const auto& [s, t] : pairs) {
      student_layers_.push_back(s);
      teacher_layers_.push_back(t);
    }
    projections_.emplace(d.layer_projection, pairs, student.hidden_size(),
                         teacher_->lm().hidden_size(), cfg.training.seed, world.device());
  }
}

void Distiller::shard_vocabulary(tp::GroupPtr group) {
  columns_ = tp::shard_range(vocab_, group->size(), group->rank());
  tp_group_ = std::move(group);
}

std::string Distiller::describe() const {
  std::string s = teacher_ ? "teacher " + teacher_->describe() : "";
  if (cache_) {
    s += fmt::format("{}offline teacher {} (top {} of {} tokens, {:.1f} MiB)", s.empty() ? "" : "; ",
                     cache_->dir().string(), cache_->info().top_k, cache_->info().vocab_size,
                     static_cast<double>(cache_->disk_bytes()) / (1 << 20));
  }
  return s;
}

TeacherTargets Distiller::cached_teacher(const data::BatchLoader::Batch& batch) const {
  std::vector<int64_t> windows;
  for (int64_t start : batch.starts) windows.push_back(start / seq_len_);
  return cache_->lookup(windows, batch.inputs);
}

Distiller::Result Distiller::loss(models::CausalLM& student, const data::BatchLoader::Batch& batch,
                                  int64_t step, int64_t micro) {
  const auto source = policy_.active() ? policy_.source(step, micro) : BatchSource::DATA;
  PolicyBatch pb;
  if (source == BatchSource::DATA) {
    pb = policy_.data(batch.inputs, batch.targets);
  } else {
    const auto t0 = Clock::now();
    auto& sampler = source == BatchSource::STUDENT ? student : teacher_->lm();
    pb = policy_.sample(sampler, source, batch.inputs, batch.targets, batch.starts, step);
    generate_ms_ += ms_since(t0);
    ++(source == BatchSource::STUDENT ? student_sampled_ : teacher_sampled_);
  }
  auto out = student.forward_features(pb.inputs, /*aux_loss=*/true, student_layers_);
  // The teacher: its cached top-K on the data's windows, else the live teacher.
  TeacherTargets targets;
  std::vector<at::Tensor> teacher_hidden;
  if (cache_ && source == BatchSource::DATA && student_layers_.empty()) {
    targets = cached_teacher(batch);
  } else {
    auto t = teacher_->forward(pb.inputs, teacher_layers_);
    targets.logits = t.logits;
    teacher_hidden = std::move(t.hidden_states);
  }
  at::Tensor loss = objective(out.logits, targets, pb);
  targets = {};
  if (!student_layers_.empty()) {
    const auto layer = layer_distillation_loss(out.hidden_states, teacher_hidden, pb.kd_mask,
                                               layer_loss_, projections_->weights());
    layer_sum_ += layer.item<double>();
    loss = loss + layer_weight_ * layer;
  }
  if (out.aux_loss.defined()) loss = loss + aux_coef_ * out.aux_loss;
  return {loss, out.aux_loss};
}

at::Tensor Distiller::objective(const at::Tensor& logits, const TeacherTargets& teacher,
                               const PolicyBatch& batch) {
  DistillObjective parts;
  if (tp_group_) {
    // This rank's columns of both: the teacher's logits are whole (it is not tensor parallel).
    FSDPP_CHECK(logits.size(-1) == columns_.size && teacher.logits.defined(),
                "[train] a tensor-parallel student's logits have {} columns, its share of the "
                "vocabulary {}; the teacher gave {}",
                logits.size(-1), columns_.size,
                teacher.logits.defined() ? "whole logits" : "a cache's top-K");
    parts = vocab_parallel_distillation_objective(
        logits, teacher.logits.narrow(-1, columns_.offset, columns_.size), batch.targets,
        batch.kd_mask, options_, kd_ratio_, columns_.offset, tp_group_);
  } else {
    parts = chunked_distillation_objective(logits, teacher, batch.targets, batch.kd_mask, options_,
                                           kd_ratio_, chunk_);
  }
  kd_sum_ += parts.kd.item<double>();
  ce_sum_ += parts.ce.item<double>();
  ++objectives_;
  return parts.loss;
}

parallel::MicrobatchObjective Distiller::pipeline_objective(const data::BatchLoader::Batch& rows,
                                                            int microbatches, bool last_stage) {
  FSDPP_CHECK(!policy_.active() && student_layers_.empty(),
              "[train] a pipelined student distils on the data's windows from the teacher's "
              "logits alone (distillation.lmbda, seq_kd and layer_map are refused with "
              "pipeline_parallel_degree > 1)");
  TeacherTargets all;
  if (cache_) {
    if (last_stage) all = cached_teacher(rows);
  } else {
    all.logits = teacher_->forward(rows.inputs).logits;  // collective: on every rank
  }
  if (!last_stage) return {};
  // Microbatch k's rows of the teacher, as the pipeline splits the batch (dim 0, equal parts).
  const int64_t per = rows.inputs.size(0) / microbatches;
  auto teacher = std::make_shared<std::vector<TeacherTargets>>();
  for (int k = 0; k < microbatches; ++k) {
    auto rows_of = [&](const at::Tensor& t) { return t.defined() ? t.narrow(0, k * per, per) : t; };
    teacher->push_back({rows_of(all.logits), rows_of(all.values), rows_of(all.ids)});
  }
  return [this, teacher](const at::Tensor& logits, const at::Tensor& targets, int k) {
    auto& mine = teacher->at(static_cast<size_t>(k));
    auto loss = objective(logits, mine, policy_.data(at::Tensor(), targets));
    mine = {};  // used once: its memory back before the next microbatch's
    return loss;
  };
}

void Distiller::begin_step() {
  objectives_ = 0;
  kd_sum_ = ce_sum_ = layer_sum_ = generate_ms_ = 0;
  student_sampled_ = teacher_sampled_ = 0;
  if (teacher_) teacher_->begin_step();
}

void Distiller::log_step(nlohmann::json& line, dist::World& world) {
  // Summed with their counts: under a pipeline only the last stage's ranks have any.
  auto sums = torch::tensor({kd_sum_, ce_sum_, layer_sum_, static_cast<double>(objectives_)},
                            torch::kDouble);
  world.group()->all_reduce(sums, dist::ReduceOp::SUM, {"metrics"});
  const double n = std::max(1.0, sums[3].item<double>());
  line["kd_loss"] = sums[0].item<double>() / n;
  line["ce_loss"] = sums[1].item<double>() / n;
  if (!student_layers_.empty()) line["layer_loss"] = sums[2].item<double>() / n;
  if (policy_.active()) {
    // The same on every rank (the sources are agreed); the time is this rank's.
    line["student_sampled_batches"] = student_sampled_;
    line["teacher_sampled_batches"] = teacher_sampled_;
    line["generate_ms"] = generate_ms_;
  }
  if (teacher_) {
    teacher_->log_step(line);
  } else {
    line["teacher_all_gather_bytes"] = 0;
    line["teacher_reduce_scatter_bytes"] = 0;
  }
}

}  // namespace fsdpp::train::detail
