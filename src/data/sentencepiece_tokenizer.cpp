#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <xxhash.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <vector>
#include <iterator>
#include <unordered_map>

#include "fsdpp/common/error.h"
#include "fsdpp/data/tokenizer.h"

namespace fsdpp::data {
namespace {

// The offset of the first NUL byte or of the first byte that does not start a well-formed UTF-8
// character (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF, no stray or
// missing continuation bytes), or nullopt for clean text.
std::optional<size_t> first_non_text_byte(std::string_view s) {
  const auto* b = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned c = b[i];
    if (c == 0) return i;
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned lo = 0x80, hi = 0xbf;  // the range of the second byte
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      if (c == 0xe0) lo = 0xa0;  // overlong
      if (c == 0xed) hi = 0x9f;  // surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      if (c == 0xf0) lo = 0x90;  // overlong
      if (c == 0xf4) hi = 0x8f;  // above U+10FFFF
    } else {
      return i;  // a continuation byte without a lead, or a lead that is never valid
    }
    if (i + 1 >= n || b[i + 1] < lo || b[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k) {
      if (i + k >= n || (b[i + k] & 0xc0) != 0x80) return i;
    }
    i += len;
  }
  return std::nullopt;
}

// Up to `count` bytes from `at`, as "0xc3 0x28".
std::string hex_bytes(std::string_view s, size_t at, size_t count) {
  std::string out;
  for (size_t i = at; i < s.size() && i < at + count; ++i) {
    out += fmt::format("{}0x{:02x}", out.empty() ? "" : " ", static_cast<unsigned char>(s[i]));
  }
  return out;
}

}  // namespace

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
  proto_ = std::move(proto);
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  auto status = processor_->Encode(text, &ids);
  FSDPP_CHECK(status.ok(), "[data] SentencePiece could not encode {} bytes of text: {}",
              text.size(), status.ToString());
  return {ids.begin(), ids.end()};
}

std::filesystem::path SentencePieceTokenizer::cached_model_path(const std::filesystem::path& cache_dir,
                                                               const std::filesystem::path& corpus_path,
                                                               int64_t vocab_size) {
  std::ifstream in(corpus_path, std::ios::binary);
  FSDPP_CHECK_AS(ConfigError, in.good(), "[data] cannot open SentencePiece training corpus '{}'",
                 corpus_path.string());
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  std::vector<char> buf(size_t{1} << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    XXH3_64bits_update(state, buf.data(), static_cast<size_t>(in.gcount()));
  }
  const uint64_t hash = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return cache_dir / fmt::format("spm-bpe-{}-{:016x}.model", vocab_size, hash);
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

bool SentencePieceTokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && (processor_->IsControl(id) || processor_->IsUnknown(id));
}

SpecialTokenIds SentencePieceTokenizer::special_token_ids() const {
  auto id = [this](int v) -> std::optional<int32_t> {
    if (v < 0 || v >= vocab_size()) return std::nullopt;
    return v;
  };
  return {id(processor_->bos_id()), id(processor_->eos_id()), id(processor_->pad_id()),
          id(processor_->unk_id())};
}

std::optional<int32_t> SentencePieceTokenizer::token_to_id(std::string_view token) const {
  // PieceToId answers unk_id for a piece it lacks: only an exact piece counts.
  const int id = processor_->PieceToId(token);
  if (id < 0 || id >= vocab_size() || processor_->IdToPiece(id) != token) return std::nullopt;
  return id;
}

std::optional<std::string> SentencePieceTokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return std::nullopt;
  return processor_->IdToPiece(id);
}

void SentencePieceTokenizer::train(const std::string& corpus_path, const std::string& model_prefix,
                                   int64_t vocab_size, bool byte_fallback) {
  std::ifstream probe(corpus_path, std::ios::binary);
  FSDPP_CHECK_AS(ConfigError, probe.good(), "[data] cannot open SentencePiece training corpus '{}'",
                 corpus_path);
  const std::string text((std::istreambuf_iterator<char>(probe)), std::istreambuf_iterator<char>());
  if (const auto bad = first_non_text_byte(text)) {
    FSDPP_THROW(ConfigError,
                "[data] '{}' is not UTF-8 text: {} at offset {}; SentencePiece trains on UTF-8 "
                "(convert the file, e.g. iconv -f latin1 -t utf-8, or use data.tokenizer=byte)",
                corpus_path,
                text[*bad] == '\0' ? std::string("a NUL byte") : "the bytes " + hex_bytes(text, *bad, 4) + " (not a UTF-8 character)",
                *bad);
  }
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
