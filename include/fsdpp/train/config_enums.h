#pragma once
// The choices of TrainConfig and the names the YAML spells them with (Hugging Face's where it
// has one): the one table the config reader accepts, to_yaml writes and error messages list.

#include <array>
#include <string_view>
#include <utility>

#include <cstddef>
#include <iterator>
#include <optional>
#include <string>

#include "fsdpp/data/row_plan.h"
#include "fsdpp/fsdp/float8_linear.h"
#include "fsdpp/fsdp/fully_shard.h"
#include "fsdpp/pipeline/schedule_traits.h"
#include "fsdpp/state/state_dict.h"
#include "fsdpp/config/choice.h"

namespace fsdpp::train {

// model.architecture: fsdpp's Llama, or Hugging Face's Qwen3-MoE (docs/moe.md#fsdpp-train).
enum class ModelArchitecture { LLAMA, QWEN3_MOE };
// The class of its decoder layers: what fsdp_transformer_layer_cls_to_wrap names to make each
// one an FSDP unit.
constexpr const char* decoder_layer_class(ModelArchitecture a) {
  return a == ModelArchitecture::QWEN3_MOE ? "Qwen3MoeDecoderLayer" : "TransformerBlock";
}
// training.fsdp_config.fsdp_auto_wrap_policy: one unit per transformer_layer_cls_to_wrap module,
// one per subtree of min_num_params parameters, or only the root.
enum class AutoWrapPolicy { TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP, NO_WRAP };
// training.save_strategy: every save_steps, at the end of each epoch, never.
enum class SaveStrategy { STEPS, EPOCH, NO };
// training.gradient_checkpointing_mode: what a checkpointed block keeps (fsdp/kept_linear.h).
enum class CheckpointingMode { FULL, SELECTIVE };
// training.lr_scheduler_type (see LrSchedule).
enum class LrSchedulerType { COSINE, LINEAR, CONSTANT };
// model.deferred_init: the model made without storage and each rank's shards given the values
// of the whole model (EXACT) or counter-based ones (PER_SHARD); OFF: every rank builds the
// whole model, then shards it (fsdpp/fsdp/deferred_init.h).
enum class DeferredInit { EXACT, PER_SHARD, OFF };
// parallelism.pipeline_parallel_schedule: a row of pipeline/schedule_traits.h's table, by its
// index there; the names are the table's (pipeline::kScheduleTraits).
enum class PipelineScheduleName : size_t {};

}  // namespace fsdpp::train

namespace fsdpp::config {

template <>
struct ChoiceNames<train::ModelArchitecture> {
  static constexpr std::string_view kWhat = "model architecture";
  static constexpr bool kAnyCase = false;
  static constexpr std::array<std::pair<train::ModelArchitecture, std::string_view>, 2> kNames{{
      {train::ModelArchitecture::LLAMA, "llama"},
      {train::ModelArchitecture::QWEN3_MOE, "qwen3_moe"},
  }};
};

// data.packing_strategy: TRL's names.
template <>
struct ChoiceNames<data::PackingStrategy> {
  static constexpr std::string_view kWhat = "packing strategy";
  static constexpr bool kAnyCase = false;
  static constexpr std::array<std::pair<data::PackingStrategy, std::string_view>, 2> kNames{{
      {data::PackingStrategy::BFD, "bfd"},
      {data::PackingStrategy::WRAPPED, "wrapped"},
  }};
};

// data.long_documents: what a document longer than seq_len becomes.
template <>
struct ChoiceNames<data::LongDocuments> {
  static constexpr std::string_view kWhat = "long documents";
  static constexpr bool kAnyCase = false;
  static constexpr std::array<std::pair<data::LongDocuments, std::string_view>, 2> kNames{{
      {data::LongDocuments::SPLIT, "split"},
      {data::LongDocuments::TRUNCATE, "truncate"},
  }};
};

template <>
struct ChoiceNames<train::CheckpointingMode> {
  static constexpr std::string_view kWhat = "activation checkpointing mode";
  static constexpr bool kAnyCase = false;
  static constexpr std::array<std::pair<train::CheckpointingMode, std::string_view>, 2> kNames{{
      {train::CheckpointingMode::FULL, "full"},
      {train::CheckpointingMode::SELECTIVE, "selective"},
  }};
};

// training.fp8 and training.fp8_filter (fsdp/float8_linear.h; torchao's recipe names).
template <>
struct ChoiceNames<Float8Recipe> {
  static constexpr std::string_view kWhat = "float8 recipe";
  static constexpr bool kAnyCase = false;
  static constexpr std::array<std::pair<Float8Recipe, std::string_view>, 3> kNames{{
      {Float8Recipe::OFF, "off"},
      {Float8Recipe::TENSORWISE, "tensorwise"},
      {Float8Recipe::ROWWISE, "rowwise"},
  }};
};

template <>
struct ChoiceNames<Float8Filter> {
  static constexpr std::string_view kWhat = "float8 filter";
  static constexpr bool kAnyCase = false;
  static constexpr std::array<std::pair<Float8Filter, std::string_view>, 2> kNames{{
      {Float8Filter::AUTO, "auto"},
      {Float8Filter::ALL, "all"},
  }};
};

template <>
struct ChoiceNames<train::AutoWrapPolicy> {
  static constexpr std::string_view kWhat = "auto wrap policy";
  static constexpr bool kAnyCase = true;
  static constexpr std::array<std::pair<train::AutoWrapPolicy, std::string_view>, 3> kNames{{
      {train::AutoWrapPolicy::TRANSFORMER_BASED_WRAP, "TRANSFORMER_BASED_WRAP"},
      {train::AutoWrapPolicy::SIZE_BASED_WRAP, "SIZE_BASED_WRAP"},
      {train::AutoWrapPolicy::NO_WRAP, "NO_WRAP"},
  }};
};

// Hugging Face's spelling of fully_shard's BackwardPrefetch, from its table (fsdp/prefetch.h:
// NONE is NO_PREFETCH, and YAML's null, which Accelerate takes as None: no prefetch).
template <>
struct ChoiceNames<BackwardPrefetch> {
  static constexpr std::string_view kWhat = "backward prefetch";
  static constexpr bool kAnyCase = true;
  static constexpr BackwardPrefetch kNull = BackwardPrefetch::NONE;
  static constexpr auto kNames = [] {
    std::array<std::pair<BackwardPrefetch, std::string_view>, std::size(kBackwardPrefetchNames)> out;
    for (size_t i = 0; i < out.size(); ++i) {
      out[i] = {kBackwardPrefetchNames[i].value, kBackwardPrefetchNames[i].hf_name};
    }
    return out;
  }();
};

// PyTorch FSDP's StateDictType names of fsdpp::state's layouts.
template <>
struct ChoiceNames<state::StateDictType> {
  static constexpr std::string_view kWhat = "state dict type";
  static constexpr bool kAnyCase = true;
  static constexpr std::array<std::pair<state::StateDictType, std::string_view>, 3> kNames{{
      {state::StateDictType::FULL, "FULL_STATE_DICT"},
      {state::StateDictType::SHARDED, "SHARDED_STATE_DICT"},
      {state::StateDictType::LOCAL, "LOCAL_STATE_DICT"},
  }};
};

template <>
struct ChoiceNames<train::SaveStrategy> {
  static constexpr std::string_view kWhat = "save strategy";
  static constexpr bool kAnyCase = false;
  static constexpr std::array<std::pair<train::SaveStrategy, std::string_view>, 3> kNames{{
      {train::SaveStrategy::STEPS, "steps"},
      {train::SaveStrategy::EPOCH, "epoch"},
      {train::SaveStrategy::NO, "no"},
  }};
};

template <>
struct ChoiceNames<train::LrSchedulerType> {
  static constexpr std::string_view kWhat = "learning-rate schedule";
  static constexpr bool kAnyCase = false;
  static constexpr std::array<std::pair<train::LrSchedulerType, std::string_view>, 3> kNames{{
      {train::LrSchedulerType::COSINE, "cosine"},
      {train::LrSchedulerType::LINEAR, "linear"},
      {train::LrSchedulerType::CONSTANT, "constant"},
  }};
};

// The pipeline's table of schedules, read as the pipeline reads a name (schedule_traits.h: any
// case, '-', '_' and a "Schedule" prefix ignored; "zbv"); written as the table spells it.
template <>
struct ChoiceNames<train::PipelineScheduleName> {
  using Name = train::PipelineScheduleName;
  static constexpr std::string_view kWhat = "pipeline schedule";
  static constexpr bool kAnyCase = false;
  static constexpr auto kNames = [] {
    std::array<std::pair<Name, std::string_view>, std::size(pipeline::kScheduleTraits)> names{};
    for (size_t i = 0; i < names.size(); ++i) names[i] = {Name{i}, pipeline::kScheduleTraits[i].name};
    return names;
  }();
  static std::optional<Name> lookup(std::string_view text) {
    const pipeline::ScheduleTraits* row = pipeline::find_schedule_traits(text);
    if (row == nullptr) return std::nullopt;
    return Name{static_cast<size_t>(row - pipeline::kScheduleTraits)};
  }
  static std::string unknown(std::string_view key, std::string_view text) {
    return fmt::format("[config] {}='{}' is not a schedule; expected {} (PyTorch's names; case "
                       "and a 'Schedule' prefix are ignored)",
                       key, text, pipeline::schedule_list());
  }
};


template <>
struct ChoiceNames<train::DeferredInit> {
  static constexpr std::string_view kWhat = "deferred initialisation";
  static constexpr bool kAnyCase = false;
  static constexpr std::array<std::pair<train::DeferredInit, std::string_view>, 3> kNames{{
      {train::DeferredInit::EXACT, "exact"},
      {train::DeferredInit::PER_SHARD, "per_shard"},
      {train::DeferredInit::OFF, "off"},
  }};
};

}  // namespace fsdpp::config

