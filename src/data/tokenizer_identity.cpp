// Which tokenizer a model speaks. See include/fsdpp/data/tokenizer_identity.h.
#include "fsdpp/data/tokenizer_identity.h"

#include <xxhash.h>

#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fsdpp/common/error.h"
#include "fsdpp/data/hf_tokenizer.h"
#include "fsdpp/data/tokenizer_files.h"

namespace fs = std::filesystem;

namespace fsdpp::data {
namespace {

constexpr const char* kHfTokenizerFile = "tokenizer.json";

std::string hex_digest(const std::string& bytes) {
  return fmt::format("{:016x}", XXH3_64bits(bytes.data(), bytes.size()));
}

// What decides the ids of a tokenizer.json: its model's kind, vocabulary (sorted: a JSON object),
// merges (as "a b", the form both of the tokenizers library's spellings ["a", "b"] and "a b"
// mean) and byte fallback, and the added tokens' ids and contents. Not the fields a re-save by
// a newer tokenizers library may add or reorder.
std::string hf_json_digest(const std::string& text, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    FSDPP_THROW(ConfigError, "[data] '{}' is not valid JSON: {}", where, e.what());
  }
  FSDPP_CHECK_AS(ConfigError, j.is_object() && j.contains("model") && j["model"].is_object(),
                 "[data] '{}' has no \"model\" object; expected a Hugging Face tokenizer.json",
                 where);
  const auto& m = j["model"];
  nlohmann::json key;
  for (const char* field : {"type", "vocab", "byte_fallback", "unk_token"}) {
    if (m.contains(field)) key["model"][field] = m[field];
  }
  if (m.contains("merges") && m["merges"].is_array()) {
    auto& merges = key["model"]["merges"] = nlohmann::json::array();
    for (const auto& merge : m["merges"]) {
      if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
        merges.push_back(merge[0].get<std::string>() + " " + merge[1].get<std::string>());
      } else {
        merges.push_back(merge);
      }
    }
  }
  auto& added = key["added_tokens"] = nlohmann::json::array();
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const auto& t : j["added_tokens"]) {
      if (t.is_object()) added.push_back({t.value("id", -1), t.value("content", std::string())});
    }
  }
  return hex_digest(key.dump());
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  FSDPP_CHECK_AS(ConfigError, in.good(), "[data] cannot read '{}'", path.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

std::string TokenizerIdentity::describe() const {
  if (kind == "byte") return "byte";
  const std::string head = kind == "sentencepiece" ? "model " : "";
  return where.empty() ? fmt::format("{} ({}{})", kind, head, digest)
                       : fmt::format("{} ({}{}, {})", kind, head, digest, where);
}

TokenizerIdentity identity_of(const Tokenizer& tok) {
  if (const auto* spm = dynamic_cast<const SentencePieceTokenizer*>(&tok)) {
    return {"sentencepiece", hex_digest(spm->serialized_model()), ""};
  }
  FSDPP_CHECK(dynamic_cast<const ByteTokenizer*>(&tok) != nullptr,
              "[data] tokenizer '{}' has no identity", tok.name());
  return {"byte", "", ""};
}

std::optional<TokenizerIdentity> read_tokenizer_identity(const fs::path& dir) {
  if (auto tok = load_tokenizer(dir)) {
    auto id = identity_of(*tok);
    id.where = (dir / kTokenizerFile).string();
    return id;
  }
  if (fs::is_regular_file(dir / kSentencePieceModelFile)) {
    return TokenizerIdentity{"sentencepiece",
                             hex_digest(read_file(dir / kSentencePieceModelFile)),
                             (dir / kSentencePieceModelFile).string()};
  }
  if (fs::is_regular_file(dir / kHfTokenizerFile)) {
    const fs::path path = dir / kHfTokenizerFile;
    return TokenizerIdentity{"tokenizer.json", hf_json_digest(read_file(path), path.string()),
                             path.string()};
  }
  return std::nullopt;
}

bool same_tokenizer(const TokenizerIdentity& id, const Tokenizer& tok) {
  if (id.kind != "tokenizer.json") {
    const auto mine = identity_of(tok);
    return mine.kind == id.kind && mine.digest == id.digest;
  }
  // Through the tokenizer.json fsdpp exports for `tok` (none for a SentencePiece model trained
  // with settings the export cannot express: then it cannot be this one).
  const auto files = hf_tokenizer_files(tok, /*model_max_length=*/1);
  const auto it = files.find(kHfTokenizerFile);
  return it != files.end() && hf_json_digest(it->second, "exported tokenizer.json") == id.digest;
}

}  // namespace fsdpp::data
