#pragma once
// fsdpp checkpoints <-> Hugging Face save_pretrained directories, whatever the architecture
// (fsdpp-ckpt import-hf / export-hf): the architecture is read from the files, then the model's
// own converter (hf_llama.h, hf_qwen3_moe.h) renames the tensors.
//
//   auto r = fsdpp::models::import_hf_checkpoint("Qwen3-30B-A3B/", "ckpt/");   // FULL checkpoint
//   fsdpp::models::export_hf_checkpoint("runs/moe/checkpoint-400", "hf/", {},
//                                       {.max_shard_bytes = 5'000'000'000});  // indexed shards
//
// Which architecture:
//   a Hugging Face config.json   its "architectures" (LlamaForCausalLM, Qwen3MoeForCausalLM),
//                                else its "model_type" ("llama", "qwen3_moe");
//   an fsdpp model_config.json   {"format": "fsdpp.llama_config", ...} is the Llama; Qwen3-MoE's
//                                is Hugging Face's config.json itself (models::CausalLM's
//                                config_json), told by its model_type.
// Anything else is a ConfigError naming the file and what it holds.

#include <cstdint>
#include <filesystem>
#include <string>

namespace fsdpp::models {

enum class Architecture { kLlama, kQwen3Moe };
// model.architecture's spelling: "llama", "qwen3_moe".
const char* architecture_name(Architecture a);

Architecture architecture_of_hf_config(const std::string& config_json, const std::string& source);
Architecture architecture_of_model_config(const std::string& model_config_json,
                                          const std::string& source);

// A few lines for fsdpp-ckpt inspect: the architecture, its shape and parameter counts (for
// Qwen3-MoE also the experts and the parameters active per token: embeddings, attention, norms,
// dense MLPs, the routers and top-k experts of each sparse layer, the head).
std::string describe_model_config(const std::string& model_config_json, const std::string& source);

struct HfExportOptions {
  // > 0: tensors spread over model-0000k-of-0000n.safetensors files of at most this many bytes
  // each (a tensor larger than that gets a file of its own) with model.safetensors.index.json,
  // as transformers' save_pretrained(max_shard_size=) writes them; 0: one model.safetensors.
  int64_t max_shard_bytes = 0;
};

struct HfConversion {
  Architecture architecture = Architecture::kLlama;
  int64_t tensors = 0;     // written, under the output's names
  int64_t files = 0;       // safetensors files written
  bool tokenizer = false;  // tokenizer files came along
};

// HF directory (config.json + model.safetensors or indexed shards) -> an fsdpp FULL checkpoint
// (model.safetensors, index.json, model_config.json) that load_state_dict loads on any number of
// ranks; fsdpp's tokenizer files come along when the directory holds them (one export wrote).
HfConversion import_hf_checkpoint(const std::filesystem::path& hf_dir,
                                  const std::filesystem::path& out);
// An fsdpp checkpoint (SHARDED or FULL, e.g. fsdpp-train's checkpoint-<step>) -> an HF directory,
// atomically. The model's config comes from `model_config` when given, else from the
// checkpoint's model_config.json. The checkpoint's tokenizer comes twice: transformers' files
// (data/hf_tokenizer.h) and fsdpp's own (fsdpp-generate, model.init_from, import_hf_checkpoint).
HfConversion export_hf_checkpoint(const std::filesystem::path& ckpt,
                                  const std::filesystem::path& out,
                                  const std::filesystem::path& model_config = {},
                                  const HfExportOptions& options = {});

}  // namespace fsdpp::models
