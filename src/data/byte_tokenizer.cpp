#include <filesystem>

#include "fsdpp/common/error.h"
#include "fsdpp/data/tokenizer.h"

namespace fsdpp::data {

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    FSDPP_CHECK(ids[i] >= 0 && ids[i] < 256,
                "[data] byte tokenizer cannot decode id {} at position {}; expected 0 <= id < 256",
                ids[i], i);
    text[i] = static_cast<char>(ids[i]);
  }
  return text;
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec) {
  if (spec == "byte") return std::make_unique<ByteTokenizer>();
  FSDPP_CHECK_AS(ConfigError, std::filesystem::is_regular_file(spec),
                 "[data] tokenizer '{}' is neither \"byte\" nor an existing SentencePiece .model "
                 "file",
                 spec);
  return std::make_unique<SentencePieceTokenizer>(spec);
}

}  // namespace fsdpp::data
