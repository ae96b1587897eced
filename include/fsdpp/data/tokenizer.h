#pragma once
// Tokenizers: text <-> token ids.
//
//   auto tok = fsdpp::data::make_tokenizer("byte");   // or "spm.model", "tokenizer.json", "hf_dir/"
//   std::vector<int32_t> ids = tok->encode("hello");
//   std::string text = tok->decode(ids);
//   auto with_bos = tok->encode_with_special_tokens("hello");   // what the model was trained on
//   if (auto eos = tok->special_token_ids().eos) ...
//
// Three kinds: ByteTokenizer, SentencePieceTokenizer (here) and TokenizerJson (a Hugging Face
// tokenizer.json, tokenizer_json.h).

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace fsdpp::data {

// The ids of a tokenizer's special tokens; nothing where it has none.
struct SpecialTokenIds {
  std::optional<int32_t> bos, eos, pad, unk;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // The ids of `text`, no special tokens added (Hugging Face's encode(add_special_tokens=False)).
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Throws fsdpp::Error for an id outside [0, vocab_size()).
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  // Every id is below this (the rows of the model's embedding the tokenizer can reach).
  virtual int64_t vocab_size() const = 0;
  // Identifies the tokenizer and its vocabulary: a token cache made by one tokenizer is only
  // reused by a tokenizer of the same name.
  virtual std::string name() const = 0;

  // What training and generation need besides text <-> ids. The defaults suit a tokenizer
  // without special tokens (byte): encode as encode(), no token special, no names.

  // The ids with the special tokens the tokenizer adds around a text (BOS, EOS, as its
  // post-processor says): Hugging Face's encode(text, add_special_tokens=True).
  virtual std::vector<int32_t> encode_with_special_tokens(std::string_view text) const {
    return encode(text);
  }
  // decode() without the special tokens (Hugging Face's skip_special_tokens=True).
  virtual std::string decode_skipping_special_tokens(std::span<const int32_t> ids) const {
    return decode(ids);
  }
  virtual bool is_special(int32_t /*id*/) const { return false; }
  virtual SpecialTokenIds special_token_ids() const { return {}; }
  // A token's id and an id's token, as the vocabulary spells them (byte-level vocabularies in
  // GPT-2's printable alphabet, SentencePiece with "▁"); nothing for what the vocabulary lacks.
  virtual std::optional<int32_t> token_to_id(std::string_view /*token*/) const {
    return std::nullopt;
  }
  virtual std::optional<std::string> id_to_token(int32_t /*id*/) const { return std::nullopt; }
  // The Jinja source of the chat template that came with the tokenizer, if any.
  virtual std::optional<std::string> chat_template() const { return std::nullopt; }
};

// One token per byte: vocabulary 256, exact round trip for any bytes, no special tokens.
class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override { return 256; }
  std::string name() const override { return "byte"; }
  // The one-byte string <-> its byte.
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::optional<std::string> id_to_token(int32_t id) const override;
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
  // SentencePiece's own unknown, control (<s>, </s>) pieces are special; decode() already
  // leaves the control pieces out, as SentencePiece does. fsdpp adds no BOS or EOS: its models
  // are trained without them (encode_with_special_tokens is encode).
  bool is_special(int32_t id) const override;
  // The model's unk/bos/eos/pad ids (TrainerSpec's), those it has.
  SpecialTokenIds special_token_ids() const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::optional<std::string> id_to_token(int32_t id) const override;
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

// The tokenizer `spec` names:
//   "byte"                   ByteTokenizer
//   a file                   a tokenizer.json (a name ending in .json) -> TokenizerJson, with
//                            tokenizer_config.json beside it when there is one; anything else a
//                            SentencePiece .model file
//   a directory              an fsdpp checkpoint's tokenizer (fsdpp_tokenizer.json), else a
//                            Hugging Face model directory's tokenizer.json, else its
//                            tokenizer.model
// Anything else is a ConfigError that lists these forms.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec);

// A model directory's own tokenizer, read as make_tokenizer(dir) reads it (an fsdpp checkpoint's
// files, else tokenizer.json with tokenizer_config.json, else tokenizer.model); nothing when the
// directory holds none of them. What model.init_from, a teacher, fsdpp-generate, fsdpp-ckpt
// compress and import-hf read, so a model's tokenizer is found the same way by all.
std::unique_ptr<Tokenizer> model_tokenizer(const std::filesystem::path& dir);

}  // namespace fsdpp::data
