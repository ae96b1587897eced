#include "fsdpp/data/tokenizer_files.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "fsdpp/common/error.h"

namespace fs = std::filesystem;

namespace fsdpp::data {

std::map<std::string, std::string> tokenizer_files(const Tokenizer& tok) {
  if (dynamic_cast<const ByteTokenizer*>(&tok) != nullptr) {
    return {{kTokenizerFile, nlohmann::json{{"type", "byte"}}.dump(2) + "\n"}};
  }
  const auto* spm = dynamic_cast<const SentencePieceTokenizer*>(&tok);
  FSDPP_CHECK(spm != nullptr, "[data] tokenizer '{}' cannot be written to files", tok.name());
  return {{kTokenizerFile,
           nlohmann::json{{"type", "sentencepiece"}, {"model", kSentencePieceModelFile}}.dump(2) +
               "\n"},
          {kSentencePieceModelFile, spm->serialized_model()}};
}

std::unique_ptr<Tokenizer> load_tokenizer(const fs::path& dir) {
  const fs::path meta = dir / kTokenizerFile;
  if (!fs::exists(meta)) return nullptr;
  std::ifstream in(meta);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    FSDPP_THROW(ConfigError, "[data] '{}' is not valid JSON: {}", meta.string(), e.what());
  }
  const std::string type = j.is_object() && j.contains("type") && j["type"].is_string()
                               ? j["type"].get<std::string>()
                               : std::string();
  if (type == "byte") return std::make_unique<ByteTokenizer>();
  if (type == "sentencepiece") {
    const std::string model = j.contains("model") && j["model"].is_string()
                                  ? j["model"].get<std::string>()
                                  : std::string(kSentencePieceModelFile);
    FSDPP_CHECK_AS(ConfigError, model.find('/') == std::string::npos && model != "..",
                   "[data] '{}': model '{}' must be a file name inside the directory",
                   meta.string(), model);
    return std::make_unique<SentencePieceTokenizer>((dir / model).string());
  }
  FSDPP_THROW(ConfigError, "[data] '{}': type '{}' is not a tokenizer; expected byte or sentencepiece",
              meta.string(), type);
}

}  // namespace fsdpp::data
