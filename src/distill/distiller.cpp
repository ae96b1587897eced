// The distilling run's loss per accumulation batch and its metrics (distiller.h).
#include "fsdpp/distill/distiller.h"

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "fsdpp/common/error.h"
#include "fsdpp/fsdp/inspect.h"
#include "fsdpp/distill/chunked_distill_loss.h"
#include "fsdpp/distill/vocab_parallel_distill_loss.h"
#include "fsdpp/distill/layer_distill_loss.h"

namespace fs = std::filesystem;

namespace fsdpp::distill {
namespace {

using Clock = std::chrono::steady_clock;

// compress.json's layer_map of model.init_from (written by fsdpp-ckpt compress).
std::vector<std::string> compressed_layer_map(const std::string& init_from) {
  const auto path = fs::path(init_from) / "compress.json";
  FSDPP_CHECK_AS(ConfigError, !init_from.empty() && fs::exists(path),
                 "[config] distillation.layer_map=[auto] takes the layers fsdpp-ckpt compress "
                 "kept from model.init_from's compress.json, and {}; give the pairs as [S:T, ...]",
                 init_from.empty() ? "model.init_from is empty"
                                             : "'" + path.string() + "' does not exist");
  std::ifstream in(path);
  const auto j = nlohmann::json::parse(std::string(std::istreambuf_iterator<char>(in), {}));
  std::vector<std::string> map;
  const auto& kept = j.at("kept_layers");
  for (size_t i = 0; i < kept.size(); ++i) map.push_back(fmt::format("{}:{}", i, kept[i].get<int64_t>()));
  return map;
}

}  // namespace

std::vector<std::pair<int64_t, int64_t>> resolve_layer_map(const DistillationSection& d,
                                                           const std::string& init_from,
                                                           int64_t student_layers,
                                                           int64_t teacher_layers) {
  const auto& map = d.layer_map;
  const bool automatic = map.size() == 1 && map.front() == "auto";
  const auto pairs = parse_layer_map(automatic ? compressed_layer_map(init_from) : map);
  for (const auto& [s, t] : pairs) {
    FSDPP_CHECK_AS(ConfigError, s < student_layers && t < teacher_layers,
                   "[config] distillation.layer_map{} pairs the student's layer {} with the "
                   "teacher's layer {}; expected student layers 0 .. {} and teacher layers 0 .. {}",
                   automatic ? " (auto, from compress.json)" : "", s, t, student_layers - 1,
                   teacher_layers - 1);
  }
  return pairs;
}

Distiller::Distiller(const DistillationSection& d, const RunParts& run, dist::World& world,
                     models::CausalLM& student)
    : policy_(d, run.seed, run.seq_len) {
  const int64_t student_vocab = run.student_vocab;
  options_ = {.type = d.loss, .beta = d.beta, .temperature = d.temperature, .top_k = d.top_k};
  options_.validate();
  kd_ratio_ = d.kd_ratio;
  layer_weight_ = d.layer_loss_weight;
  layer_loss_ = d.layer_loss;
  chunk_ = d.loss_chunk_tokens;
  seq_len_ = run.seq_len;
  vocab_ = student_vocab;
  if (d.live_teacher()) teacher_ = std::make_unique<Teacher>(d, run, world);
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
    const auto pairs = resolve_layer_map(d, run.init_from, student.num_layers(),
                                         teacher_->lm().num_layers());
    for (const auto& [s, t] : pairs) {
      student_layers_.push_back(s);
      teacher_layers_.push_back(t);
    }
    projections_.emplace(d.layer_projection, pairs, student.hidden_size(),
                         teacher_->lm().hidden_size(), run.seed, world.device());
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

PolicyBatch Distiller::policy_batch(const Sampler& student, const data::BatchLoader::Batch& batch,
                                    int64_t step, int64_t micro) {
  const auto source = policy_.active() ? policy_.source(step, micro) : BatchSource::DATA;
  if (source == BatchSource::DATA) return policy_.data(batch.inputs, batch.targets);
  const auto t0 = Clock::now();
  const auto& x = batch.inputs;
  const auto& y = batch.targets;
  auto pb = source == BatchSource::STUDENT
                ? policy_.sample(student, source, x, y, batch.starts, step)
                : policy_.sample(teacher_->lm(), source, x, y, batch.starts, step);
  generate_ms_ += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  ++(source == BatchSource::STUDENT ? student_sampled_ : teacher_sampled_);
  return pb;
}

void Distiller::check_positions(const std::vector<at::Tensor>& positions) const {
  const bool any = std::any_of(positions.begin(), positions.end(),
                               [](const at::Tensor& p) { return p.defined(); });
  if (!any) return;
  FSDPP_CHECK_AS(ConfigError, !cache_,
                 "[config] data.padding_free (document masking) with distillation.teacher_cache: "
                 "the cached teacher logits were computed over whole rows, not within each "
                 "document; distil from the live teacher (distillation.teacher) or without "
                 "data.padding_free");
  FSDPP_CHECK_AS(ConfigError, !policy_.active(),
                 "[config] data.padding_free (document masking) with on-policy distillation "
                 "(distillation.lmbda > 0 or distillation.seq_kd): sampled continuations are "
                 "single sequences, not packed documents; set lmbda=0 and seq_kd=false, or "
                 "train without data.padding_free");
  for (const auto& p : positions) {
    FSDPP_CHECK(p.defined(), "[train] some accumulation batches of a step have token positions and "
                             "others none; expected all or none");
  }
}

Distiller::StepRows Distiller::rows(const std::vector<data::BatchLoader::Batch>& accumulation_batches,
                                    const std::vector<at::Tensor>& positions, int64_t step,
                                    const Sampler& student, int microbatches, bool pipelined,
                                    bool last_stage) {
  check_positions(positions);
  // Each accumulation batch's rows, in order: the data's, or sampled (collective).
  std::vector<PolicyBatch> batches;
  for (size_t m = 0; m < accumulation_batches.size(); ++m) {
    batches.push_back(policy_batch(student, accumulation_batches[m], step, static_cast<int64_t>(m)));
  }
  if (pipelined) {
    return pipeline_rows(accumulation_batches, std::move(batches), positions, microbatches, last_stage);
  }
  return stage_rows(accumulation_batches, std::move(batches), positions);
}

namespace {

// The step's positions (document masking): the accumulation batches' concatenated, or undefined.
at::Tensor cat_positions(const std::vector<at::Tensor>& positions) {
  if (positions.empty() || !positions.front().defined()) return at::Tensor();
  return at::cat(positions);
}

// Where an objective's means divide by the step's divisor: the cross-entropy always; the KD loss
// on the data's rows, whose KD positions are the cross-entropy's (the same global count).
TokenDivisors divisors_of(const PolicyBatch& pb, double divisor) {
  return {.ce = divisor, .kd = pb.source == BatchSource::DATA ? divisor : 0.0};
}

}  // namespace

Distiller::StepRows Distiller::stage_rows(const std::vector<data::BatchLoader::Batch>& accumulation_batches,
                                          std::vector<PolicyBatch> batches,
                                          const std::vector<at::Tensor>& positions) {
  std::vector<at::Tensor> inputs, targets;
  for (const auto& pb : batches) {
    inputs.push_back(pb.inputs);
    targets.push_back(pb.targets);
  }
  StepRows out{at::cat(inputs), at::cat(targets), {}, student_layers_, cat_positions(positions)};
  // Accumulation batch k's objective: the teacher's side of its rows then, one accumulation batch's at a time
  // (the cache's top-K on the data's windows, else the live teacher's forward: collective, and
  // every rank computes every accumulation batch's objective).
  auto rows = std::make_shared<std::vector<PolicyBatch>>(std::move(batches));
  auto windows = std::make_shared<std::vector<data::BatchLoader::Batch>>(accumulation_batches);
  auto places = std::make_shared<std::vector<at::Tensor>>(positions);
  out.objective = [this, rows, windows, places](const at::Tensor& logits, const at::Tensor&, int k,
                                                const std::vector<at::Tensor>& hidden,
                                                double divisor) {
    const auto pb = std::exchange(rows->at(static_cast<size_t>(k)), PolicyBatch{});
    TeacherTargets targets;
    std::vector<at::Tensor> teacher_hidden;
    if (cache_ && pb.source == BatchSource::DATA && student_layers_.empty()) {
      targets = cached_teacher(windows->at(static_cast<size_t>(k)));
    } else {
      const auto where = places->empty() ? at::Tensor() : places->at(static_cast<size_t>(k));
      auto t = teacher_->forward(pb.inputs, teacher_layers_, where);
      targets.logits = t.logits;
      teacher_hidden = std::move(t.hidden_states);
    }
    const auto parts = objective(logits, targets, pb, divisors_of(pb, divisor));
    kd_sum_ += parts.kd.item<double>();
    ce_sum_ += parts.ce.item<double>();
    ++objectives_;
    at::Tensor loss = parts.loss;
    targets = {};
    if (!student_layers_.empty()) {
      const auto layer = layer_distillation_loss(hidden, teacher_hidden, pb.kd_mask, layer_loss_,
                                                 projections_->weights());
      layer_sum_ += layer.item<double>();
      loss = loss + layer_weight_ * layer;
    }
    return loss;
  };
  return out;
}

DistillObjective Distiller::objective(const at::Tensor& logits, const TeacherTargets& teacher,
                                      const PolicyBatch& batch,
                                      const TokenDivisors& divisors) const {
  if (!tp_group_) {
    return chunked_distillation_objective(logits, teacher, batch.targets, batch.kd_mask, options_,
                                          kd_ratio_, chunk_, divisors);
  }
  // This rank's columns of both: the teacher's logits are whole (it is not tensor parallel).
  FSDPP_CHECK(logits.size(-1) == columns_.size && teacher.logits.defined(),
              "[train] a tensor-parallel student's logits have {} columns, its share of the "
              "vocabulary {}; the teacher gave {}",
              logits.size(-1), columns_.size,
              teacher.logits.defined() ? "whole logits" : "a cache's top-K");
  return vocab_parallel_distillation_objective(
      logits, teacher.logits.narrow(-1, columns_.offset, columns_.size), batch.targets,
      batch.kd_mask, options_, kd_ratio_, columns_.offset, tp_group_, divisors);
}

namespace {

// What one pipeline microbatch holds of one accumulation batch: n rows, from its row `offset` on, and
// their weights in the step's loss.
struct Piece {
  int64_t offset = 0, n = 0;
  TeacherTargets teacher;
  at::Tensor kd_mask;
  BatchSource source = BatchSource::DATA;  // of its accumulation batch
  // These rows' share of the accumulation batch's KD positions (a mean per accumulation batch: sampled rows)
  // and of its rows (the metrics' count of accumulation batches).
  double kd_weight = 0, share = 0;
};

double kept(const at::Tensor& mask) { return static_cast<double>(mask.sum().item<int64_t>()); }

TeacherTargets rows_of(const TeacherTargets& t, int64_t begin, int64_t n) {
  auto cut = [&](const at::Tensor& x) { return x.defined() ? x.narrow(0, begin, n) : x; };
  return {cut(t.logits), cut(t.values), cut(t.ids)};
}

// Pipeline microbatch k holds the rows [k per, (k + 1) per) of the step (dim 0, equal parts),
// accumulation batch m the rows [m B, (m + 1) B): each k's pieces, one per accumulation batch it meets.
std::vector<std::vector<Piece>> pieces_of(const std::vector<PolicyBatch>& batches,
                                          const std::vector<TeacherTargets>& teacher,
                                          int microbatches) {
  const int64_t B = batches.front().inputs.size(0);
  const int64_t per = B * static_cast<int64_t>(batches.size()) / microbatches;
  std::vector<std::vector<Piece>> pieces(static_cast<size_t>(microbatches));
  for (int64_t k = 0; k < microbatches; ++k) {
    for (int64_t row = k * per; row < (k + 1) * per;) {
      const auto m = static_cast<size_t>(row / B);
      const int64_t begin = row % B;
      const int64_t n = std::min((k + 1) * per, (row / B + 1) * B) - row;
      Piece p{row - k * per, n, rows_of(teacher[m], begin, n),
              batches[m].kd_mask.narrow(0, begin, n), batches[m].source};
      p.kd_weight = kept(p.kd_mask) / std::max(1.0, kept(batches[m].kd_mask));
      p.share = static_cast<double>(n) / static_cast<double>(B);
      pieces[static_cast<size_t>(k)].push_back(std::move(p));
      row += n;
    }
  }
  return pieces;
}

}  // namespace

Distiller::StepRows Distiller::pipeline_rows(
    const std::vector<data::BatchLoader::Batch>& accumulation_batches, std::vector<PolicyBatch> batches,
    const std::vector<at::Tensor>& positions, int microbatches, bool last_stage) {
  FSDPP_CHECK(student_layers_.empty(),
              "[train] a pipelined student distils from the teacher's logits alone "
              "(distillation.layer_map is refused with pipeline_parallel_degree > 1)");
  // The teacher's side of every row, before the pipeline runs: the cache's for data
  // accumulation batches, else the live teacher's, one forward over all such rows (collective: on
  // every rank).
  std::vector<TeacherTargets> teacher(accumulation_batches.size());
  std::vector<at::Tensor> inputs, targets, live, live_positions;
  std::vector<bool> cached(batches.size());
  for (size_t m = 0; m < batches.size(); ++m) {
    const auto& pb = batches[m];
    cached[m] = cache_ && pb.source == BatchSource::DATA;
    if (cached[m] && last_stage) teacher[m] = cached_teacher(accumulation_batches[m]);
    if (!cached[m]) live.push_back(pb.inputs);
    if (!cached[m] && !positions.empty()) live_positions.push_back(positions[m]);
    inputs.push_back(pb.inputs);
    targets.push_back(pb.targets);
  }
  if (!live.empty()) {
    const auto logits = teacher_->forward(at::cat(live), {}, cat_positions(live_positions)).logits;
    int64_t row = 0;
    for (size_t m = 0; m < batches.size(); ++m) {
      if (cached[m]) continue;
      const int64_t n = batches[m].inputs.size(0);
      teacher[m].logits = logits.narrow(0, row, n);
      row += n;
    }
  }
  StepRows out{at::cat(inputs), at::cat(targets), {}, {}, cat_positions(positions)};
  if (!last_stage) return out;
  // Each piece's sums over the step's divisor, made for the pipeline's microbatches (the
  // cross-entropy, and the data's KD loss): the pipeline's mean over its microbatches is then
  // the global batch's token mean however its microbatches cut the accumulation batches. A sampled
  // accumulation batch's KD loss is its own mean: each piece's part of it weighted by its share of the
  // accumulation batch's KD positions, times microbatches / accumulation batches (`scale`), so that it counts
  // as one accumulation batch's mean. The metrics' sums are per accumulation batch: the divided parts times
  // 1 / scale.
  auto pieces = std::make_shared<std::vector<std::vector<Piece>>>(
      pieces_of(batches, teacher, microbatches));
  const double scale = static_cast<double>(microbatches) / static_cast<double>(batches.size());
  out.objective = [this, pieces, scale](const at::Tensor& logits, const at::Tensor& targets,
                                        int k, const std::vector<at::Tensor>&, double divisor) {
    at::Tensor loss;
    auto& mine = pieces->at(static_cast<size_t>(k));
    for (const auto& p : mine) {
      PolicyBatch rows{at::Tensor(), targets.narrow(0, p.offset, p.n), p.kd_mask, p.source};
      const auto d = divisors_of(rows, divisor);
      const auto parts = objective(logits.narrow(0, p.offset, p.n), p.teacher, rows, d);
      const double kd_weight = d.kd > 0 ? 1.0 : scale * p.kd_weight;
      const auto part = (1 - kd_ratio_) * parts.ce + kd_ratio_ * kd_weight * parts.kd;
      loss = loss.defined() ? loss + part : part;
      kd_sum_ += kd_weight / scale * parts.kd.item<double>();
      ce_sum_ += parts.ce.item<double>() / scale;
      objectives_ += p.share;
    }
    mine.clear();  // used once: the teacher's rows back before the next microbatch's
    return loss;
  };
  return out;
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

}  // namespace fsdpp::distill
