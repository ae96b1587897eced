#pragma once
// fsdpp-data's preparing side (docs/your-data.md#preparing-once):
//   fsdpp-data prepare chat.jsonl --tokenizer Qwen3-dir/ --out prepared/ --assistant-only-loss
//   fsdpp-data documents prepared/ --limit 3        the documents' ids and loss masks
// `prepare` writes the document shards fsdpp-train reads as data.path (the same ones it would
// prepare into its cache); `documents` prints what a prepared directory holds.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "fsdpp/data/mixture_reader.h"

namespace fsdpp_data_tool {

struct PrepareArgs {
  std::string path;
  std::vector<std::string> mix;  // PATH=WEIGHT
  std::string tokenizer;
  std::string out;
  std::string text_field = "text";
  bool completion_only_loss = true;
  bool assistant_only_loss = false;
  int threads = 0;
  uint64_t seed = 0;
  std::string stopping = "first_exhausted";
};

struct DocumentsArgs {
  std::string dir;
  int64_t limit = std::numeric_limits<int64_t>::max();
  int64_t skip = 0;
  bool text = false;  // also decode each document with the tokenizer it was prepared with
  std::string tokenizer;
};

// --mix PATH=WEIGHT (the last '=' splits: paths may hold one).
fsdpp::data::MixtureSource parse_mix(const std::string& arg);

void add_prepare(CLI::App& app, PrepareArgs& args);
int run_prepare(const PrepareArgs& args);
void add_documents(CLI::App& app, DocumentsArgs& args);
int run_documents(const DocumentsArgs& args);

}  // namespace fsdpp_data_tool
