#pragma once
// Tokenizers: text <-> token ids.
//
//   auto tok = fsdpp::data::make_tokenizer("byte");              // or "path/to/spm.model"
//   std::vector<int32_t> ids = tok->encode("hello");
//   std::string text = tok->decode(ids);

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace fsdpp::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Throws fsdpp::Error for an id outside [0, vocab_size()).
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  // Identifies the tokenizer and its vocabulary: a token cache made by one tokenizer is only
  // reused by a tokenizer of the same name.
  virtual std::string name() const = 0;
};

// One token per byte: vocabulary 256, exact round trip for any bytes.
class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override { return 256; }
  std::string name() const override { return "byte"; }
};

// A trained SentencePiece model (Debian's libsentencepiece).
class SentencePieceTokenizer final : public Tokenizer {
 public:
  // Throws ConfigError naming the path when the model cannot be read.
  explicit SentencePieceTokenizer(const std::string& model_path);
  ~SentencePieceTokenizer() override;

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override;
  // "sentencepiece:<XXH3-64 of the model file, hex>": two different models never share a cache.
  std::string name() const override { return name_; }
  // The model file's bytes (what the constructor read): to store the tokenizer with a model.
  const std::string& serialized_model() const { return proto_; }

  // Trains a BPE model on a text file (one sentence per line) and writes
  // <model_prefix>.model and <model_prefix>.vocab. Text is kept as written (identity
  // normalisation, whitespace kept) so that decode(encode(s)) == s for characters seen in
  // training; byte_fallback encodes unseen characters as bytes (needs vocab_size > 259).
  // Throws ConfigError with SentencePiece's reason, and before SentencePiece sees the text,
  // naming the file and the byte offset, for a NUL byte or bytes that are not UTF-8
  // (SentencePiece's own message is "Internal: ./src/trainer_interface.cc(428)").
  static void train(const std::string& corpus_path, const std::string& model_prefix,
                    int64_t vocab_size, bool byte_fallback = false);

  // Where a model trained on `corpus_path` with `vocab_size` is cached in `cache_dir`:
  // spm-bpe-<vocab_size>-<XXH3-64 of the corpus bytes, hex>.model. Keyed by the text itself,
  // not its name: a cache_dir shared by runs on different corpora (or a corpus edited in
  // place) never hands one run a tokenizer trained on other text. Reads the whole corpus
  // (as TokenDataset::open does to key its token cache).
  static std::filesystem::path cached_model_path(const std::filesystem::path& cache_dir,
                                                 const std::filesystem::path& corpus_path,
                                                 int64_t vocab_size);

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
  std::string name_;
  std::string proto_;
};

// "byte" gives a ByteTokenizer; anything else is the path of a SentencePiece .model file.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec);

}  // namespace fsdpp::data
