// fsdpp's configuration keys: the schema of TrainConfig (config.h, docs/config.md) and its
// reading and writing through the schema engine (fsdpp/config/schema.h).
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "config_read.h"
#include "fsdpp/config/schema.h"
#include "fsdpp/common/error.h"
#include "fsdpp/distill/distillation_keys.h"
#include "fsdpp/train/config.h"

namespace fsdpp::train {
namespace {

using config::schema::key;
using config::schema::Key;
using config::schema::leaf;
using config::schema::Loc;
using config::schema::lower;
using config::schema::Schema;
using config::schema::section;
using config::schema::trim;
using config::schema::type_error;

constexpr std::string_view kStrategies =
    "full_shard, shard_grad_op, zero1, no_shard, hybrid_shard or hybrid_shard_zero2";

// training.fsdp: a strategy name, or Hugging Face's space-separated option list
// ("full_shard auto_wrap", "full_shard offload") or a list of those options.
Key fsdp_key() {
  auto read = [](TrainConfig& c, const YAML::Node& value, const Loc& loc) {
    const std::string expected = fmt::format(
        "one of {} (optionally with Hugging Face's 'auto_wrap' / 'offload')", kStrategies);
    std::vector<std::string> tokens;
    if (value.IsScalar()) {
      std::istringstream in(value.Scalar());
      for (std::string t; in >> t;) tokens.push_back(t);
    } else if (value.IsSequence()) {
      for (const auto& item : value) {
        if (!item.IsScalar()) type_error(loc, value, expected);
        tokens.push_back(trim(item.Scalar()));
      }
    } else {
      type_error(loc, value, expected);
    }
    int n_strategies = 0;
    for (const auto& t : tokens) {
      const std::string l = lower(t);
      if (l == "auto_wrap") continue;  // wrapping follows fsdp_config.fsdp_auto_wrap_policy
      if (l == "offload") {
        c.training.fsdp_config.offload_params = true;
        continue;
      }
      try {
        c.training.fsdp = parse_sharding_strategy(l);
      } catch (const ConfigError&) {
        type_error(loc, value, expected);
      }
      ++n_strategies;
    }
    if (n_strategies != 1) type_error(loc, value, expected + ", exactly one strategy");
  };
  auto emit = [](const TrainConfig& c, YAML::Emitter& out) {
    out << lower(to_string(c.training.fsdp));
  };
  return key<TrainConfig>("fsdp", read, emit);
}

// data.padding_free: true, false, or null / absent (TRL's rule: on for bfd packing, else off).
Key padding_free_key() {
  auto read = [](TrainConfig& c, const YAML::Node& value, const Loc& loc) {
    if (value.IsNull()) {
      c.data.padding_free.reset();
      return;
    }
    c.data.padding_free = config::schema::read_value<bool>(value, loc);
  };
  auto emit = [](const TrainConfig& c, YAML::Emitter& out) {
    if (c.data.padding_free) {
      config::schema::emit_value(out, *c.data.padding_free);
    } else {
      out << YAML::Null;
    }
  };
  return key<TrainConfig>("padding_free", read, emit);
}

// data.mixture: a list of {path, weight} maps (weight optional, 1).
Key mixture_key() {
  auto read = [](TrainConfig& c, const YAML::Node& value, const Loc& loc) {
    const std::string expected =
        "a list of {path: ..., weight: ...} maps (weight > 0, default 1), or null";
    c.data.mixture.clear();
    if (value.IsNull()) return;
    if (!value.IsSequence()) type_error(loc, value, expected);
    for (size_t i = 0; i < value.size(); ++i) {
      const YAML::Node item = value[i];
      const Loc at{fmt::format("{}[{}]", loc.path, i), loc.where};
      if (!item.IsMap()) type_error(at, item, expected);
      MixtureSource m;
      for (const auto& kv : item) {
        const std::string k = kv.first.Scalar();
        const Loc field{fmt::format("{}.{}", at.path, k), loc.where};
        if (k == "path") {
          m.path = config::schema::read_value<std::string>(kv.second, field);
        } else if (k == "weight") {
          m.weight = config::schema::read_value<double>(kv.second, field);
        } else {
          type_error(field, kv.second, "no such key: a mixture entry has path and weight");
        }
      }
      if (m.path.empty()) type_error(at, item, "a map with a non-empty path");
      c.data.mixture.push_back(std::move(m));
    }
  };
  auto emit = [](const TrainConfig& c, YAML::Emitter& out) {
    if (c.data.mixture.empty()) {
      out << YAML::Null;
      return;
    }
    out << YAML::BeginSeq;
    for (const auto& m : c.data.mixture) {
      out << YAML::BeginMap << YAML::Key << "path" << YAML::Value;
      config::schema::emit_value(out, m.path);
      out << YAML::Key << "weight" << YAML::Value;
      config::schema::emit_value(out, m.weight);
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
  };
  return key<TrainConfig>("mixture", read, emit);
}

// Names (Choice fields) are read and written by their tables in config_enums.h.
#define FSDPP_KEY(sec, member) \
  leaf<TrainConfig>(#member, [](auto& c) -> auto& { return c.sec.member; })
#define FSDPP_FSDP_KEY(member)                                                                  \
  leaf<TrainConfig>("fsdp_" #member,                                                            \
                    [](auto& c) -> auto& { return c.training.fsdp_config.member; }, #member)

const Schema& train_schema() {
  static const Schema s{section(
      "",
      {
          section("model",
                  {
                      FSDPP_KEY(model, architecture),
                      FSDPP_KEY(model, vocab_size),
                      FSDPP_KEY(model, dim),
                      FSDPP_KEY(model, n_layers),
                      FSDPP_KEY(model, n_heads),
                      FSDPP_KEY(model, n_kv_heads),
                      FSDPP_KEY(model, ffn_hidden),
                      FSDPP_KEY(model, multiple_of),
                      FSDPP_KEY(model, max_seq_len),
                      FSDPP_KEY(model, norm_eps),
                      FSDPP_KEY(model, rope_theta),
                      FSDPP_KEY(model, init_std),
                      FSDPP_KEY(model, tie_embeddings),
                      FSDPP_KEY(model, head_dim),
                      FSDPP_KEY(model, num_experts),
                      FSDPP_KEY(model, num_experts_per_tok),
                      FSDPP_KEY(model, moe_intermediate_size),
                      FSDPP_KEY(model, norm_topk_prob),
                      FSDPP_KEY(model, router_aux_loss_coef),
                      FSDPP_KEY(model, decoder_sparse_step),
                      FSDPP_KEY(model, mlp_only_layers),
                      FSDPP_KEY(model, init_from),
                      FSDPP_KEY(model, deferred_init),
                  }),
          section("data",
                  {
                      FSDPP_KEY(data, path),
                      FSDPP_KEY(data, tokenizer),
                      FSDPP_KEY(data, tokenizer_model),
                      FSDPP_KEY(data, tokenizer_vocab_size),
                      FSDPP_KEY(data, seq_len),
                      FSDPP_KEY(data, val_fraction),
                      FSDPP_KEY(data, train_fraction),
                      FSDPP_KEY(data, cache_dir),
                      FSDPP_KEY(data, dataset_text_field),
                      FSDPP_KEY(data, completion_only_loss),
                      FSDPP_KEY(data, assistant_only_loss),
                      FSDPP_KEY(data, packing),
                      FSDPP_KEY(data, packing_strategy),
                      padding_free_key(),
                      FSDPP_KEY(data, long_documents),
                      mixture_key(),
                  }),
          section("training",
                  {
                      fsdp_key(),
                      section("fsdp_config",
                              {
                                  FSDPP_FSDP_KEY(auto_wrap_policy),
                                  FSDPP_FSDP_KEY(transformer_layer_cls_to_wrap),
                                  FSDPP_FSDP_KEY(min_num_params),
                                  FSDPP_FSDP_KEY(backward_prefetch),
                                  FSDPP_FSDP_KEY(forward_prefetch),
                                  FSDPP_FSDP_KEY(sync_module_states),
                                  FSDPP_FSDP_KEY(limit_all_gathers),
                                  FSDPP_FSDP_KEY(keep_ends_gathered),
                                  FSDPP_FSDP_KEY(reduce_bucket_size),
                                  FSDPP_FSDP_KEY(state_dict_type),
                                  FSDPP_FSDP_KEY(offload_params),
                                  FSDPP_FSDP_KEY(offload_optimizer_state_dir),
                                  FSDPP_FSDP_KEY(hybrid_shard_group_size),
                              }),
                      FSDPP_KEY(training, gradient_checkpointing),
                      FSDPP_KEY(training, gradient_checkpointing_every),
                      FSDPP_KEY(training, gradient_checkpointing_mode),
                      FSDPP_KEY(training, bf16),
                      FSDPP_KEY(training, fp16),
                      FSDPP_KEY(training, fp8),
                      FSDPP_KEY(training, fp8_filter),
                      FSDPP_KEY(training, per_device_train_batch_size),
                      FSDPP_KEY(training, per_device_eval_batch_size),
                      FSDPP_KEY(training, gradient_accumulation_steps),
                      FSDPP_KEY(training, dataloader_num_workers),
                      FSDPP_KEY(training, dataloader_prefetch_factor),
                      FSDPP_KEY(training, dataloader_pin_memory),
                      FSDPP_KEY(training, learning_rate),
                      FSDPP_KEY(training, warmup_steps),
                      FSDPP_KEY(training, warmup_ratio),
                      FSDPP_KEY(training, weight_decay),
                      FSDPP_KEY(training, adam_beta1),
                      FSDPP_KEY(training, adam_beta2),
                      FSDPP_KEY(training, adam_epsilon),
                      FSDPP_KEY(training, max_grad_norm),
                      FSDPP_KEY(training, max_steps),
                      FSDPP_KEY(training, num_train_epochs),
                      FSDPP_KEY(training, logging_steps),
                      FSDPP_KEY(training, eval_steps),
                      FSDPP_KEY(training, eval_max_batches),
                      FSDPP_KEY(training, save_strategy),
                      FSDPP_KEY(training, save_steps),
                      FSDPP_KEY(training, save_only_model),
                      FSDPP_KEY(training, save_total_limit),
                      FSDPP_KEY(training, async_save),
                      FSDPP_KEY(training, resume_from_checkpoint),
                      FSDPP_KEY(training, seed),
                      FSDPP_KEY(training, output_dir),
                      FSDPP_KEY(training, overwrite_output_dir),
                      FSDPP_KEY(training, skip_memory_check),
                      FSDPP_KEY(training, use_cpu),
                      FSDPP_KEY(training, no_cuda),
                      FSDPP_KEY(training, optim),
                      FSDPP_KEY(training, report_to),
                      FSDPP_KEY(training, logging_dir),
                      FSDPP_KEY(training, lr_scheduler_type),
                      FSDPP_KEY(training, min_lr_ratio),
                      FSDPP_KEY(training, sample_tokens),
                      FSDPP_KEY(training, sample_prompt),
                      FSDPP_KEY(training, sample_temperature),
                      FSDPP_KEY(training, sample_top_k),
                      FSDPP_KEY(training, malloc_mmap_threshold),
                      FSDPP_KEY(training, profile_steps),
                  }),
          distill::distillation_keys<TrainConfig>([](auto& c) -> auto& { return c.distillation; }),
          section("parallelism",
                  {
                      FSDPP_KEY(parallelism, data_parallel_replicate_degree),
                      FSDPP_KEY(parallelism, data_parallel_shard_degree),
                      FSDPP_KEY(parallelism, tensor_parallel_degree),
                      FSDPP_KEY(parallelism, enable_sequence_parallel),
                      FSDPP_KEY(parallelism, expert_parallel_degree),
                      FSDPP_KEY(parallelism, pipeline_parallel_degree),
                      FSDPP_KEY(parallelism, pipeline_parallel_schedule),
                      FSDPP_KEY(parallelism, pipeline_parallel_microbatch_size),
                      FSDPP_KEY(parallelism, pipeline_parallel_layers_per_stage),
                  }),
      }),
      // Other frameworks' names for our keys (Hugging Face's LlamaConfig, nanoGPT, ...).
      {
          {"lr", "training.learning_rate"},
          {"epochs", "training.num_train_epochs"},
          {"batch_size", "training.per_device_train_batch_size"},
          {"block_size", "data.seq_len"},
          {"context_length", "data.seq_len"},
          {"n_embd", "model.dim"},
          {"hidden_size", "model.dim"},
          {"num_hidden_layers", "model.n_layers"},
          {"n_layer", "model.n_layers"},
          {"num_attention_heads", "model.n_heads"},
          {"n_head", "model.n_heads"},
          {"num_key_value_heads", "model.n_kv_heads"},
          {"intermediate_size", "model.ffn_hidden"},
          {"rms_norm_eps", "model.norm_eps"},
          {"max_position_embeddings", "model.max_seq_len"},
          {"tie_word_embeddings", "model.tie_embeddings"},
          {"initializer_range", "model.init_std"},
          {"dataset", "data.path"},
      },
      "a YAML map with the sections model:, data:, training: and parallelism:",
      // The Hydra group of the distillation guide's launch scripts: distillation.training.X=v.
      {"distillation"}};
  return s;
}

#undef FSDPP_KEY
#undef FSDPP_FSDP_KEY

}  // namespace

TrainConfig detail::read_config(const std::string& yaml, const std::vector<std::string>& overrides,
                                const std::string& source_name) {
  TrainConfig cfg;
  config::schema::read_document(train_schema(), &cfg, yaml, overrides, source_name);
  return cfg;
}

TrainConfig TrainConfig::from_yaml_string(const std::string& yaml,
                                          const std::vector<std::string>& overrides,
                                          const std::string& source_name) {
  TrainConfig cfg = detail::read_config(yaml, overrides, source_name);
  cfg.validate();
  return cfg;
}

TrainConfig TrainConfig::from_file(const std::string& path,
                                   const std::vector<std::string>& overrides) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto st = fs::status(path, ec);
  FSDPP_CHECK_AS(ConfigError, fs::exists(st),
                 "[config] config file '{}' does not exist; expected a YAML file", path);
  FSDPP_CHECK_AS(ConfigError, fs::is_regular_file(st),
                 "[config] config file '{}' is not a regular file; expected a YAML file", path);
  std::ifstream in(path, std::ios::binary);
  FSDPP_CHECK_AS(ConfigError, static_cast<bool>(in), "[config] cannot open config file '{}': {}",
                 path, std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  FSDPP_CHECK_AS(ConfigError, !in.bad(), "[config] cannot read config file '{}'", path);
  return from_yaml_string(text.str(), overrides, path);
}

std::string TrainConfig::to_yaml() const {
  return config::schema::write_document(
      train_schema(), this, "fsdpp effective configuration (docs/config.md describes every key)");
}

std::vector<std::string> TrainConfig::keys_set_in(const std::string& section) const {
  std::vector<std::string> out;
  // Through the written document, so that every key of the section counts, whatever its type.
  const YAML::Node mine = YAML::Load(to_yaml())[section];
  const YAML::Node defaults = YAML::Load(TrainConfig{}.to_yaml())[section];
  for (const auto& kv : mine) {
    const auto key = kv.first.as<std::string>();
    const std::string value = YAML::Dump(kv.second);
    if (value != YAML::Dump(defaults[key])) out.push_back(fmt::format("{}.{}={}", section, key, value));
  }
  return out;
}

std::vector<std::string> TrainConfig::unused_keys() const {
  if (distillation.enabled()) return {};
  return keys_set_in("distillation");
}

}  // namespace fsdpp::train
