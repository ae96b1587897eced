#pragma once
// A smaller student made from a teacher by keeping some of its layers and, in Qwen3-MoE's sparse
// layers, the experts its router uses most on calibration text (fsdpp-ckpt compress).
//
//   fsdpp::models::CompressOptions o;
//   o.num_layers = 2;                     // or o.keep_layers = {0, 2, 3}
//   o.num_experts = 4;                    // per sparse layer, by measured router load
//   o.calibration_file = "data/tinyshakespeare.txt";
//   auto report = fsdpp::models::compress_checkpoint("runs/moe/checkpoint-400", "student/", o);
//   std::fputs(report.text().c_str(), stdout);   // what was kept, and why
//
// Every tensor the student keeps is the teacher's, bit for bit: the kept layers' whole (renumbered
// in order), and of a sparse layer the kept experts' slices of the stacked expert tensors with the
// router's (gate's) rows of the same experts, in the teacher's order. Dense and sparse layers
// stay what they were (the student's config lists its dense layers in mlp_only_layers with
// decoder_sparse_step 1). num_experts_per_tok becomes min(k, num_experts).
//
// Expert load: the calibration text, tokenized by the teacher's tokenizer, is cut into rows of
// calibration_seq_len tokens (the last row may be shorter), run through the whole teacher in
// float32 under no-grad, and each sparse layer's top-k choices (route_top_k on the router's
// logits, the model's own routing) are counted per expert. The num_experts most chosen are kept;
// equal counts keep the lower expert id.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "fsdpp/models/hf_checkpoint.h"
#include "fsdpp/models/qwen3_moe.h"

namespace fsdpp::models {

struct CompressOptions {
  std::vector<int64_t> keep_layers;  // teacher layer ids, increasing; empty: see num_layers
  int64_t num_layers = 0;            // > 0 (without keep_layers): evenly_spaced_layers; 0: all
  int64_t num_experts = 0;           // > 0: experts kept per sparse layer; 0: all
  std::filesystem::path calibration_file;  // required when experts are dropped
  int64_t calibration_tokens = 4096;       // the first this many tokens of the file
  int64_t calibration_seq_len = 0;         // 0: min(256, max_position_embeddings)
  std::string tokenizer;  // empty: the teacher's; else data::make_tokenizer's "byte" or a .model
};

struct CompressedLayerExperts {
  int64_t teacher_layer = 0, student_layer = 0;
  std::vector<int64_t> counts;   // top-k choices per teacher expert over the calibration tokens
  std::vector<int64_t> kept;     // teacher expert ids, increasing (the student's 0, 1, ...)
  std::vector<int64_t> dropped;  // increasing
};

struct CompressReport {
  Architecture architecture = Architecture::kLlama;
  std::string teacher, layer_rule;        // the path; how the layers were chosen
  int64_t teacher_layers = 0;
  std::vector<int64_t> kept_layers;       // teacher ids, the student's 0, 1, ...
  int64_t teacher_experts = 0, student_experts = 0;  // per sparse layer (Qwen3-MoE)
  int64_t teacher_top_k = 0, student_top_k = 0;
  int64_t calibration_tokens = 0;         // tokens routed (each makes top_k choices per layer)
  std::vector<int64_t> calibration_rows;  // lengths of the rows run
  std::vector<CompressedLayerExperts> experts;  // one per kept sparse layer
  int64_t teacher_parameters = 0, student_parameters = 0;

  std::string text() const;  // what fsdpp-ckpt compress prints
  std::string json() const;  // compress.json in the student's checkpoint
};

// Reads the teacher (an fsdpp checkpoint with model_config.json, or a Hugging Face directory),
// writes the student as an fsdpp FULL checkpoint (model.safetensors, index.json,
// model_config.json, the teacher's tokenizer files, compress.json) atomically. Throws ConfigError
// naming the option for layers out of range or not increasing, num_experts above the teacher's,
// experts asked of a Llama, or no calibration text when experts are dropped.
CompressReport compress_checkpoint(const std::filesystem::path& teacher,
                                   const std::filesystem::path& out, const CompressOptions& options);

// The pieces, for tests and for other front ends.

// n of `layers` ids spread evenly, first and last included: round(i * (layers-1) / (n-1)).
std::vector<int64_t> evenly_spaced_layers(int64_t layers, int64_t n);
// Top-k choices per expert (int64 (E,) per sparse layer, in layer order) of `model` on `rows`
// (each (T,) int64 tokens), run one row at a time.
std::vector<at::Tensor> router_load(Qwen3Moe& model, const std::vector<at::Tensor>& rows);
// The k experts with the most choices, ties to the lower id, returned in increasing id order.
std::vector<int64_t> most_loaded_experts(const at::Tensor& counts, int64_t k);

}  // namespace fsdpp::models
