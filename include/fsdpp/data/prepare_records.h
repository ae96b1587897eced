#pragma once
// A dataset of records (data_files.h: JSON Lines, Parquet, Arrow, ...; or a weighted mixture of
// several) prepared once into document shards (prepare.h) with a tokenizer and TRL's SFT options
// (document_maker.h): what `fsdpp-data prepare` writes and what fsdpp-train prepares into its
// cache on first use, the same spec and so the same directory name for both.
//
//   data::RecordSources src{.path = "chat.jsonl"};
//   auto spec = data::record_spec(src, *tok, maker);
//   auto manifest = data::prepare_records(src, maker, spec, out_dir, {.threads = 0});

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "fsdpp/data/document_maker.h"
#include "fsdpp/data/example.h"
#include "fsdpp/data/mixture_reader.h"
#include "fsdpp/data/prepare.h"
#include "fsdpp/data/tokenizer.h"

namespace fsdpp::data {

// data.path, or data.mixture (then path is empty) with its seed and stopping strategy.
struct RecordSources {
  std::string path;
  std::vector<MixtureSource> mixture;
  uint64_t seed = 0;
  StoppingStrategy stopping = StoppingStrategy::FIRST_EXHAUSTED;
  ExampleOptions examples;
};

// The files the sources read, identified by content, the tokenizer and every option that
// decides the documents. Reads every file once (XXH3).
PrepareSpec record_spec(const RecordSources& sources, const Tokenizer& tokenizer,
                        const DocumentMaker& maker);

// 16 hex digits naming a spec: fsdpp-train's cache directory is documents-<digest>.
std::string spec_digest(const PrepareSpec& spec);

// Prepares the sources' examples into `dir` (prepare_documents: resumable, every core).
PreparedManifest prepare_records(const RecordSources& sources, const DocumentMaker& maker,
                                 const PrepareSpec& spec, const std::filesystem::path& dir,
                                 const PrepareOptions& options);

// The options part of a spec that decides the loss masks ("completion_only_loss=..."), for
// messages comparing a prepared directory with what a run asks for.
std::string mask_options(const std::string& spec_options);

}  // namespace fsdpp::data
