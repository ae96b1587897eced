#pragma once
// A tokenizer as files, so that it travels with the model: every fsdpp checkpoint holds the
// tokenizer its run trained with, and fsdpp-generate, fine-tuning and the Hugging Face export read
// it from there instead of from the run's cache directory.
//
//   fsdpp_tokenizer.json   {"type": "byte"}  or  {"type": "sentencepiece", "model": "tokenizer.model"}
//                          or {"type": "tokenizer.json", "tokenizer": "tokenizer.json",
//                              "config": "tokenizer_config.json", "chat_template": "chat_template.jinja"}
//   tokenizer.model        the SentencePiece model (sentencepiece only)
//   tokenizer.json, tokenizer_config.json, chat_template.jinja
//                          a Hugging Face tokenizer's files, verbatim (tokenizer.json only; the
//                          last two where the tokenizer came with them)

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "fsdpp/data/tokenizer.h"

namespace fsdpp::data {

inline constexpr const char* kTokenizerFile = "fsdpp_tokenizer.json";
inline constexpr const char* kSentencePieceModelFile = "tokenizer.model";

// File name -> contents for `tok`.
std::map<std::string, std::string> tokenizer_files(const Tokenizer& tok);

// The tokenizer whose files are in `dir`; nullptr when there is no fsdpp_tokenizer.json (a
// checkpoint written before tokenizers travelled, or a Hugging Face directory). Throws
// ConfigError naming the file when it is malformed.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& dir);

}  // namespace fsdpp::data
