// A Hugging Face tokenizer.json run by fsdpp. See include/fsdpp/data/tokenizer_json.h.
#include "fsdpp/data/tokenizer_json.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "added_tokens.h"
#include "bpe_model.h"
#include "fsdpp/common/error.h"
#include "normalizers.h"
#include "post_processors.h"
#include "pre_tokenizers.h"
#include "token_decoders.h"
#include "tokenizer_config_reader.h"
#include "tokenizer_json_digest.h"
#include "unicode_text.h"

namespace fs = std::filesystem;

namespace fsdpp::data {
namespace {

std::optional<std::string> read_if_present(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  FSDPP_CHECK_AS(ConfigError, in.good(), "[data] cannot read '{}'", path.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// "dir/tokenizer.json" -> "dir/tokenizer_config.json"; another name gets the file name added.
std::string sibling(const std::string& where, const char* name) {
  const fs::path p(where);
  if (p.filename() == kTokenizerJsonFile) return (p.parent_path() / name).string();
  return where + " (" + name + ")";
}

}  // namespace

TokenizerJsonFiles TokenizerJsonFiles::read(const fs::path& path) {
  TokenizerJsonFiles files;
  auto json = read_if_present(path);
  FSDPP_CHECK_AS(ConfigError, json.has_value(), "[data] cannot read tokenizer.json '{}': no such file",
                 path.string());
  files.tokenizer_json = std::move(*json);
  files.tokenizer_config = read_if_present(path.parent_path() / kTokenizerConfigFile);
  files.chat_template = read_if_present(path.parent_path() / kChatTemplateFile);
  return files;
}

struct TokenizerJson::Impl {
  TokenizerJsonFiles files;
  std::string where;
  TokenizerConfig config;
  std::unique_ptr<Normalizer> normalizer;
  PreTokenizerSteps pre;
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<AddedTokens> added;
  SpecialTemplate with_special;
  std::unique_ptr<TokenDecoder> decoder;
  SpecialTokenIds special;
  int64_t vocab_size = 0;
  std::string name, identity;

  Impl(TokenizerJsonFiles f, std::string w);
  std::optional<int32_t> token_to_id(std::string_view token) const {
    if (auto id = added->id_of(token)) return id;
    return model->token_to_id(token);
  }
  // The id of a tokenizer_config.json token, which must be in the vocabulary.
  std::optional<int32_t> config_token_id(const std::optional<std::string>& token, const char* key) const;
  void encode(std::string_view text, std::vector<int32_t>& out) const;
  std::string decode(std::span<const int32_t> ids, bool skip_special) const;
};

TokenizerJson::Impl::Impl(TokenizerJsonFiles f, std::string w) : files(std::move(f)), where(std::move(w)) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(files.tokenizer_json);
  } catch (const nlohmann::json::exception& e) {
    FSDPP_THROW(ConfigError, "[data] '{}' is not valid JSON: {}", where, e.what());
  }
  FSDPP_CHECK_AS(ConfigError, j.is_object() && j.contains("model") && j["model"].is_object(),
                 "[data] '{}' has no \"model\" object; expected a Hugging Face tokenizer.json",
                 where);
  if (j.contains("version") && j["version"] != "1.0") {
    FSDPP_THROW(ConfigError, "[data] {}: version {} is not supported; supported: \"1.0\"", where,
                j["version"].dump());
  }
  auto section = [&](const char* key) { return JsonSection(j[key], where, key); };
  auto present = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  if (present("normalizer")) normalizer = make_normalizer(section("normalizer"));
  if (present("pre_tokenizer")) pre = make_pre_tokenizer(section("pre_tokenizer"));
  model = std::make_unique<BpeModel>(section("model"), pre.byte_level);
  added = std::make_unique<AddedTokens>(JsonSection(j, where, "tokenizer.json"),
                                        j.contains("added_tokens") ? j["added_tokens"] : nlohmann::json(),
                                        *model, normalizer.get());
  if (present("decoder")) decoder = make_decoder(section("decoder"));
  const SpecialTemplate from_file =
      present("post_processor") ? make_post_processor(section("post_processor")) : SpecialTemplate{{true, {}}};

  if (files.tokenizer_config) {
    config = read_tokenizer_config(*files.tokenizer_config, sibling(where, kTokenizerConfigFile));
  }
  if (files.chat_template) config.chat_template = files.chat_template;  // transformers prefers the file
  const auto bos = config_token_id(config.bos_token, "bos_token");
  const auto eos = config_token_id(config.eos_token, "eos_token");
  // transformers replaces the file's post-processor when the config says add_bos/eos_token, or
  // when the file has none (TokenizersBackend.update_post_processor).
  if (config.add_bos_token || config.add_eos_token || !present("post_processor")) {
    with_special = template_around(config.add_bos_token.value_or(false) ? bos : std::nullopt,
                                   config.add_eos_token.value_or(false) ? eos : std::nullopt);
  } else {
    with_special = from_file;
  }
  special.bos = config.bos_token ? bos : single_id_before(with_special);
  special.eos = config.eos_token ? eos : single_id_after(with_special);
  special.pad = config_token_id(config.pad_token, "pad_token");
  special.unk = config.unk_token ? config_token_id(config.unk_token, "unk_token")
                                 : (model->unk_token() ? token_to_id(*model->unk_token()) : std::nullopt);
  vocab_size = int64_t{std::max(model->max_id(), added->max_id())} + 1;
  FSDPP_CHECK_AS(ConfigError, vocab_size > 0, "[data] {}: the vocabulary is empty", where);
  name = "tokenizer.json:" + hex_digest(files.tokenizer_json);
  identity = hf_json_digest(j, where);
}

std::optional<int32_t> TokenizerJson::Impl::config_token_id(const std::optional<std::string>& token,
                                                            const char* key) const {
  if (!token) return std::nullopt;
  const auto id = token_to_id(*token);
  FSDPP_CHECK_AS(ConfigError, id.has_value(),
                 "[data] {}: {} '{}' is not in the vocabulary of {} nor one of its added tokens",
                 sibling(where, kTokenizerConfigFile), key, *token, where);
  return id;
}

void TokenizerJson::Impl::encode(std::string_view text, std::vector<int32_t>& out) const {
  FSDPP_CHECK(text.size() < (size_t{1} << 32), "[data] {}: cannot encode {} bytes at once; at most 4 GiB",
              where, text.size());
  if (const auto bad = unicode::first_invalid_utf8(text)) {
    std::string bytes;
    for (size_t i = *bad; i < text.size() && i < *bad + 4; ++i) {
      bytes += fmt::format("{}0x{:02x}", bytes.empty() ? "" : " ", static_cast<unsigned char>(text[i]));
    }
    FSDPP_THROW(Error, "[data] {}: the text is not UTF-8 at byte offset {} ({}); expected UTF-8 text",
                where, *bad, bytes);
  }
  PieceArena arena;
  std::vector<TextSegment> raw, normalized;
  std::vector<TextPiece> pieces, next;
  added->split(text, /*normalized_pass=*/false, raw);
  for (const TextSegment& seg : raw) {
    if (seg.token >= 0) {
      out.push_back(seg.token);
      continue;
    }
    // The leading bytes that stand for the input's first character (Metaspace "first").
    uint32_t at_start =
        seg.text.data() == text.data() ? static_cast<uint32_t>(unicode::char_length(static_cast<unsigned char>(text[0]))) : 0;
    std::string_view norm = seg.text;
    if (normalizer) {
      std::string& s = arena.make();
      normalizer->normalize(seg.text, s, at_start);
      norm = s;
    }
    normalized.clear();
    added->split(norm, /*normalized_pass=*/true, normalized);
    for (const TextSegment& sub : normalized) {
      if (sub.token >= 0) {
        out.push_back(sub.token);
        continue;
      }
      const auto offset = static_cast<uint32_t>(sub.text.data() - norm.data());
      pieces.assign(1, TextPiece{sub.text, at_start > offset ? at_start - offset : 0});
      for (const auto& step : pre.steps) {
        next.clear();
        for (const TextPiece& p : pieces) step->split(p, next, arena);
        pieces.swap(next);
      }
      for (const TextPiece& p : pieces) model->tokenize(p.text, out);
    }
  }
}

std::string TokenizerJson::Impl::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    FSDPP_CHECK(id >= 0 && id < vocab_size,
                "[data] {}: cannot decode id {} at position {}; expected 0 <= id < {}", where, id, i,
                vocab_size);
    const std::string* token = nullptr;
    if (const AddedToken* a = added->find(id)) {
      token = &a->matched;
    } else {
      token = model->id_to_token(id);
    }
    if (token == nullptr) continue;  // a gap in the ids: the library skips it
    if (skip_special && added->is_special_content(*token)) continue;
    tokens.push_back(*token);
  }
  if (!decoder) {  // the library joins the tokens with spaces
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  decoder->decode_chain(tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

std::unique_ptr<TokenizerJson> TokenizerJson::from_file(const fs::path& path) {
  return std::make_unique<TokenizerJson>(TokenizerJsonFiles::read(path), path.string());
}

TokenizerJson::TokenizerJson(TokenizerJsonFiles files, std::string where)
    : impl_(std::make_unique<const Impl>(std::move(files), std::move(where))) {}

TokenizerJson::~TokenizerJson() = default;

std::vector<int32_t> TokenizerJson::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  impl_->encode(text, ids);
  return ids;
}

std::vector<int32_t> TokenizerJson::encode_with_special_tokens(std::string_view text) const {
  return apply_template(impl_->with_special, encode(text));
}

std::string TokenizerJson::decode(std::span<const int32_t> ids) const { return impl_->decode(ids, false); }

std::string TokenizerJson::decode_skipping_special_tokens(std::span<const int32_t> ids) const {
  return impl_->decode(ids, true);
}

int64_t TokenizerJson::vocab_size() const { return impl_->vocab_size; }
std::string TokenizerJson::name() const { return impl_->name; }

bool TokenizerJson::is_special(int32_t id) const {
  const AddedToken* a = impl_->added->find(id);
  return a != nullptr && a->special;
}

SpecialTokenIds TokenizerJson::special_token_ids() const { return impl_->special; }

std::optional<int32_t> TokenizerJson::token_to_id(std::string_view token) const {
  return impl_->token_to_id(token);
}

std::optional<std::string> TokenizerJson::id_to_token(int32_t id) const {
  if (const AddedToken* a = impl_->added->find(id)) return a->matched;
  if (const std::string* t = impl_->model->id_to_token(id)) return *t;
  return std::nullopt;
}

std::optional<std::string> TokenizerJson::chat_template() const { return impl_->config.chat_template; }
const TokenizerJsonFiles& TokenizerJson::files() const { return impl_->files; }
const TokenizerConfig& TokenizerJson::config() const { return impl_->config; }
const std::string& TokenizerJson::identity_digest() const { return impl_->identity; }

}  // namespace fsdpp::data
