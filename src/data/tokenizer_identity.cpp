// Which tokenizer a model speaks. See include/fsdpp/data/tokenizer_identity.h.
#include "fsdpp/data/tokenizer_identity.h"

#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fsdpp/common/error.h"
#include "fsdpp/data/hf_tokenizer.h"
#include "fsdpp/data/tokenizer_files.h"
#include "fsdpp/data/tokenizer_json.h"
#include "tokenizer_json_digest.h"

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

}  // namespace

std::string TokenizerIdentity::describe() const {
  if (kind == "byte") return "byte";
  const std::string head = kind == "sentencepiece" ? "model " : "";
  return where.empty() ? fmt::format("{} ({}{})", kind, head, digest)
                       : fmt::format("{} ({}{}, {})", kind, head, digest, where);
}

TokenizerIdentity identity_of(const Tokenizer& tok) {
  if (const auto* hf = dynamic_cast<const TokenizerJson*>(&tok)) {
    return {"tokenizer.json", hf->identity_digest(), ""};
  }
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
  // tokenizer.json before tokenizer.model: a Hugging Face directory with both (Llama 2's) is
  // read through its tokenizer.json, as make_tokenizer and transformers read it.
  if (fs::is_regular_file(dir / kTokenizerJsonFile)) {
    const fs::path path = dir / kTokenizerJsonFile;
    return TokenizerIdentity{"tokenizer.json", hf_json_digest(read_file(path), path.string()),
                             path.string()};
  }
  if (fs::is_regular_file(dir / kSentencePieceModelFile)) {
    return TokenizerIdentity{"sentencepiece",
                             hex_digest(read_file(dir / kSentencePieceModelFile)),
                             (dir / kSentencePieceModelFile).string()};
  }
  return std::nullopt;
}

bool same_tokenizer(const TokenizerIdentity& id, const Tokenizer& tok) {
  if (id.kind != "tokenizer.json" || dynamic_cast<const TokenizerJson*>(&tok) != nullptr) {
    const auto mine = identity_of(tok);
    return mine.kind == id.kind && mine.digest == id.digest;
  }
  // Through the tokenizer.json fsdpp exports for `tok` (none for a SentencePiece model trained
  // with settings the export cannot express: then it cannot be this one).
  const auto files = hf_tokenizer_files(tok, /*model_max_length=*/1);
  const auto it = files.find(kTokenizerJsonFile);
  return it != files.end() && hf_json_digest(it->second, "exported tokenizer.json") == id.digest;
}

}  // namespace fsdpp::data
