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

std::optional<int32_t> ByteTokenizer::token_to_id(std::string_view token) const {
  if (token.size() != 1) return std::nullopt;
  return static_cast<unsigned char>(token[0]);
}

std::optional<std::string> ByteTokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= 256) return std::nullopt;
  return std::string(1, static_cast<char>(id));
}

}  // namespace fsdpp::data
