#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <xxhash.h>

#include <fstream>
#include <iterator>
#include <unordered_map>

#include "fsdpp/common/error.h"
#include "fsdpp/data/tokenizer.h"

namespace fsdpp::data {

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_path)
    : processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  // Read the file ourselves: its bytes both load the model and name it.
  std::ifstream in(model_path, std::ios::binary);
  FSDPP_CHECK_AS(ConfigError, in.good(), "[data] cannot open SentencePiece model '{}'",
                 model_path);
  std::string proto((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto status = processor_->LoadFromSerializedProto(proto);
  FSDPP_CHECK_AS(ConfigError, status.ok(),
                 "[data] '{}' is not a SentencePiece model: {}", model_path, status.ToString());
  name_ = fmt::format("sentencepiece:{:016x}", XXH3_64bits(proto.data(), proto.size()));
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  auto status = processor_->Encode(text, &ids);
  FSDPP_CHECK(status.ok(), "[data] SentencePiece could not encode {} bytes of text: {}",
              text.size(), status.ToString());
  return {ids.begin(), ids.end()};
}

std::string SentencePieceTokenizer::decode(std::span<const int32_t> ids) const {
  const int64_t n = vocab_size();
  for (size_t i = 0; i < ids.size(); ++i) {
    FSDPP_CHECK(ids[i] >= 0 && ids[i] < n,
                "[data] SentencePiece cannot decode id {} at position {}; expected 0 <= id < {}",
                ids[i], i, n);
  }
  std::string text;
  auto status = processor_->Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  FSDPP_CHECK(status.ok(), "[data] SentencePiece could not decode {} ids: {}", ids.size(),
              status.ToString());
  return text;
}

int64_t SentencePieceTokenizer::vocab_size() const { return processor_->GetPieceSize(); }

void SentencePieceTokenizer::train(const std::string& corpus_path, const std::string& model_prefix,
                                   int64_t vocab_size, bool byte_fallback) {
  std::ifstream probe(corpus_path);
  FSDPP_CHECK_AS(ConfigError, probe.good(), "[data] cannot open SentencePiece training corpus '{}'",
                 corpus_path);
  const std::unordered_map<std::string, std::string> args = {
      {"input", corpus_path},
      {"model_prefix", model_prefix},
      {"vocab_size", std::to_string(vocab_size)},
      {"model_type", "bpe"},
      {"character_coverage", "1.0"},
      {"byte_fallback", byte_fallback ? "true" : "false"},
      // Keep text as written so that decoding gives back the same bytes.
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      // No "▁" put before the text: encoding a file chunk by chunk then equals encoding it
      // whole, and decode gives back leading spaces exactly.
      {"add_dummy_prefix", "false"},
      {"split_digits", "true"},
      // Lines are training sentences, so no piece ever holds a newline; a user-defined symbol
      // gives newlines in encoded documents a token of their own.
      {"user_defined_symbols", "\n"},
      {"num_threads", "1"},
      {"minloglevel", "2"},  // training logs would drown the caller's output
  };
  auto status = sentencepiece::SentencePieceTrainer::Train(args);
  FSDPP_CHECK_AS(ConfigError, status.ok(),
                 "[data] SentencePiece training on '{}' (vocab_size={}) failed: {}", corpus_path,
                 vocab_size, status.ToString());
}

}  // namespace fsdpp::data
