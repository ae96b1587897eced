// make_tokenizer: a tokenizer from what a user names. See include/fsdpp/data/tokenizer.h.
#include <filesystem>

#include "fsdpp/common/error.h"
#include "fsdpp/data/tokenizer.h"
#include "fsdpp/data/tokenizer_files.h"
#include "fsdpp/data/tokenizer_json.h"

namespace fs = std::filesystem;

namespace fsdpp::data {
namespace {

constexpr const char* kAccepted =
    "\"byte\", a SentencePiece .model file, a tokenizer.json file, or a directory holding one "
    "(a Hugging Face model directory) or an fsdpp checkpoint's tokenizer (fsdpp_tokenizer.json)";

}  // namespace

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec) {
  if (spec == "byte") return std::make_unique<ByteTokenizer>();
  std::error_code ec;
  const fs::path path(spec);
  if (fs::is_directory(path, ec)) {
    if (auto tok = load_tokenizer(path)) return tok;
    if (fs::is_regular_file(path / kTokenizerJsonFile, ec)) return TokenizerJson::from_file(path / kTokenizerJsonFile);
    if (fs::is_regular_file(path / kSentencePieceModelFile, ec)) {
      return std::make_unique<SentencePieceTokenizer>((path / kSentencePieceModelFile).string());
    }
    FSDPP_THROW(ConfigError,
                "[data] tokenizer '{}' is a directory without {}, {} or {}; expected {}", spec,
                kTokenizerFile, kTokenizerJsonFile, kSentencePieceModelFile, kAccepted);
  }
  FSDPP_CHECK_AS(ConfigError, fs::is_regular_file(path, ec),
                 "[data] tokenizer '{}' is not \"byte\" and no such file or directory exists; "
                 "expected {}",
                 spec, kAccepted);
  if (path.extension() == ".json") return TokenizerJson::from_file(path);
  try {
    return std::make_unique<SentencePieceTokenizer>(spec);
  } catch (const ConfigError& e) {
    FSDPP_THROW(ConfigError, "{}; a tokenizer is {}", e.what(), kAccepted);
  }
}

std::unique_ptr<Tokenizer> model_tokenizer(const fs::path& dir) {
  std::error_code ec;
  for (const char* file : {kTokenizerFile, kTokenizerJsonFile, kSentencePieceModelFile}) {
    if (fs::exists(dir / file, ec)) return make_tokenizer(dir.string());
  }
  return nullptr;
}

}  // namespace fsdpp::data
