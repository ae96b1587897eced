#include "fsdpp/data/tokenizer_files.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "fsdpp/common/error.h"
#include "fsdpp/data/tokenizer_json.h"

namespace fs = std::filesystem;

namespace fsdpp::data {

namespace {

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  FSDPP_CHECK_AS(ConfigError, in.good(), "[data] cannot read '{}'", path.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A file named in fsdpp_tokenizer.json: a name inside the directory.
fs::path member(const fs::path& dir, const fs::path& meta, const nlohmann::json& j, const char* key,
                const char* fallback) {
  const std::string name = j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : fallback;
  FSDPP_CHECK_AS(ConfigError, !name.empty() && name.find('/') == std::string::npos && name != "..",
                 "[data] '{}': {} '{}' must be a file name inside the directory", meta.string(), key,
                 name);
  return dir / name;
}

}  // namespace

std::map<std::string, std::string> tokenizer_files(const Tokenizer& tok) {
  if (dynamic_cast<const ByteTokenizer*>(&tok) != nullptr) {
    return {{kTokenizerFile, nlohmann::json{{"type", "byte"}}.dump(2) + "\n"}};
  }
  if (const auto* hf = dynamic_cast<const TokenizerJson*>(&tok)) {
    // The Hugging Face files verbatim, under their own names: a checkpoint directory is then also
    // a Hugging Face tokenizer directory.
    const auto& f = hf->files();
    nlohmann::ordered_json meta = {{"type", "tokenizer.json"}, {"tokenizer", kTokenizerJsonFile}};
    std::map<std::string, std::string> out = {{kTokenizerJsonFile, f.tokenizer_json}};
    if (f.tokenizer_config) {
      meta["config"] = kTokenizerConfigFile;
      out[kTokenizerConfigFile] = *f.tokenizer_config;
    }
    if (f.chat_template) {
      meta["chat_template"] = kChatTemplateFile;
      out[kChatTemplateFile] = *f.chat_template;
    }
    out[kTokenizerFile] = meta.dump(2) + "\n";
    return out;
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
    return std::make_unique<SentencePieceTokenizer>(
        member(dir, meta, j, "model", kSentencePieceModelFile).string());
  }
  if (type == "tokenizer.json") {
    const fs::path json = member(dir, meta, j, "tokenizer", kTokenizerJsonFile);
    TokenizerJsonFiles files;
    files.tokenizer_json = read_file(json);
    if (j.contains("config")) files.tokenizer_config = read_file(member(dir, meta, j, "config", ""));
    if (j.contains("chat_template")) {
      files.chat_template = read_file(member(dir, meta, j, "chat_template", ""));
    }
    return std::make_unique<TokenizerJson>(std::move(files), json.string());
  }
  FSDPP_THROW(ConfigError,
              "[data] '{}': type '{}' is not a tokenizer; expected byte, sentencepiece or "
              "tokenizer.json",
              meta.string(), type);
}

}  // namespace fsdpp::data
