#pragma once
// A Hugging Face tokenizer.json, read and run by fsdpp: the ids of Hugging Face's `tokenizers`
// library for the same text, from what the file says, nothing hard-coded per model.
//
//   auto tok = fsdpp::data::TokenizerJson::from_file("Meta-Llama-3-8B/tokenizer.json");
//   tok->encode("Hello world");                       // [9906, 1917]
//   tok->encode_with_special_tokens("Hello world");   // [128000, 9906, 1917]
//   tok->decode(ids);                                 // tokenizers' decode(ids)
//
// The pipeline is the library's: added tokens are cut out of the raw text (those with
// "normalized": false), the rest is normalized, added tokens with "normalized": true are cut
// out of that, the pre-tokenizer splits the pieces, the model turns each piece into ids.
//
// Supported components (anything else is refused naming it and this list):
//   model           BPE: vocab, merges (["a", "b"] or "a b"), ignore_merges, byte_fallback,
//                   fuse_unk, unk_token, continuing_subword_prefix, end_of_word_suffix
//                   (dropout must be null or 0: fsdpp encodes deterministically)
//   normalizer      NFC, NFD, NFKC, NFKD (libutf8proc), Lowercase, Strip, StripAccents, Prepend,
//                   Replace, Sequence
//   pre_tokenizer   ByteLevel (last in a Sequence), Split, Metaspace, Digits, Sequence
//   post_processor  TemplateProcessing, RobertaProcessing, BertProcessing, ByteLevel, Sequence
//   decoder         ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, BPEDecoder, Sequence
// Regexes run on PCRE2 (pcre2_regex.h says how Oniguruma's syntax is carried over). "truncation"
// and "padding" are ignored, as transformers ignores them when it encodes one text.
//
// tokenizer_config.json, when it is beside the file, is read as transformers reads it: the
// bos/eos/pad/unk tokens, add_bos_token/add_eos_token (either one present replaces the file's
// post-processor with "[BOS] $A [EOS]", as transformers does), chat_template (a string, or a list
// of {name, template} of which "default" is taken; chat_template.jinja beside the file wins) and
// model_max_length.
//
// Thread-safe: encode and decode may run on several threads at once (a bounded word cache per
// instance behind sharded locks).

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "fsdpp/data/tokenizer.h"

namespace fsdpp::data {

inline constexpr const char* kTokenizerJsonFile = "tokenizer.json";
inline constexpr const char* kTokenizerConfigFile = "tokenizer_config.json";
inline constexpr const char* kChatTemplateFile = "chat_template.jinja";

// The files a TokenizerJson is made from, verbatim: what a checkpoint stores and an export writes.
struct TokenizerJsonFiles {
  std::string tokenizer_json;
  std::optional<std::string> tokenizer_config;  // tokenizer_config.json
  std::optional<std::string> chat_template;     // chat_template.jinja

  // `path` (a tokenizer.json) and the two others when they are beside it. ConfigError naming the
  // file when it cannot be read.
  static TokenizerJsonFiles read(const std::filesystem::path& path);
};

// What tokenizer_config.json says (what fsdpp reads of it).
struct TokenizerConfig {
  std::optional<std::string> bos_token, eos_token, pad_token, unk_token;
  std::optional<bool> add_bos_token, add_eos_token;
  std::optional<std::string> chat_template;
  // Absent, or transformers' "no limit" (1e30), when the file gives none.
  std::optional<int64_t> model_max_length;
};

class TokenizerJson final : public Tokenizer {
 public:
  // Reads `path` and the files beside it (TokenizerJsonFiles::read).
  static std::unique_ptr<TokenizerJson> from_file(const std::filesystem::path& path);
  // `where` names the files in errors ("[data] <where>: pre_tokenizer 'Whitespace' is not
  // supported; supported: ..."). Throws ConfigError for a malformed or unsupported file.
  explicit TokenizerJson(TokenizerJsonFiles files, std::string where = "tokenizer.json");
  ~TokenizerJson() override;

  // Throws fsdpp::Error naming the byte offset for text that is not UTF-8 (the tokenizers
  // library takes only valid strings).
  std::vector<int32_t> encode(std::string_view text) const override;
  std::vector<int32_t> encode_with_special_tokens(std::string_view text) const override;
  // tokenizers' decode(ids, skip_special_tokens=False). Ids inside [0, vocab_size()) that no
  // token has are left out, as the library leaves them out; ids outside it throw fsdpp::Error.
  std::string decode(std::span<const int32_t> ids) const override;
  std::string decode_skipping_special_tokens(std::span<const int32_t> ids) const override;
  // The largest id of the vocabulary and the added tokens, plus one: transformers' len(tokenizer)
  // (which counts tokens: the same for every published file, whose ids have no gaps).
  int64_t vocab_size() const override;
  // "tokenizer.json:<XXH3-64 of the file, hex>", as SentencePiece's name digests its model: a
  // token cache is reused only by the same file.
  std::string name() const override;
  // An added token with "special": true.
  bool is_special(int32_t id) const override;
  // tokenizer_config.json's tokens where it names them; otherwise BOS/EOS from the
  // post-processor (the one token before/after $A) and UNK from the model's unk_token.
  SpecialTokenIds special_token_ids() const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::optional<std::string> id_to_token(int32_t id) const override;
  std::optional<std::string> chat_template() const override;

  const TokenizerJsonFiles& files() const;
  const TokenizerConfig& config() const;
  // What tokenizer_identity.h compares: the digest of the vocabulary, merges and added tokens.
  const std::string& identity_digest() const;

 private:
  struct Impl;
  std::unique_ptr<const Impl> impl_;
};

}  // namespace fsdpp::data
