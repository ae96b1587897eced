// fsdpp tokenizers -> Hugging Face tokenizer.json. See include/fsdpp/data/hf_tokenizer.h.
#include "fsdpp/data/hf_tokenizer.h"

#include <algorithm>
#include <cstring>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "byte_level_alphabet.h"
#include "fsdpp/common/error.h"
#include "fsdpp/data/tokenizer_json.h"
#include "unicode_text.h"

namespace fsdpp::data {
namespace {

using json = nlohmann::ordered_json;

// GPT-2's printable character for each byte (byte_level_alphabet.h).
std::vector<std::string> byte_level_chars() {
  std::vector<std::string> out(256);
  for (int b = 0; b < 256; ++b) out[b] = unicode::utf8(byte_level_char(static_cast<uint8_t>(b)));
  return out;
}

json byte_level() {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
}

json bpe(json vocab, json merges, json unk, bool fuse_unk, bool byte_fallback) {
  return {{"type", "BPE"},           {"dropout", nullptr},        {"unk_token", std::move(unk)},
          {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
          {"fuse_unk", fuse_unk},    {"byte_fallback", byte_fallback}, {"ignore_merges", false},
          {"vocab", std::move(vocab)}, {"merges", std::move(merges)}};
}

json tokenizer_json(json added, json normalizer, json pre_tokenizer, json decoder, json model) {
  return {{"version", "1.0"},       {"truncation", nullptr},  {"padding", nullptr},
          {"added_tokens", std::move(added)}, {"normalizer", std::move(normalizer)},
          {"pre_tokenizer", std::move(pre_tokenizer)}, {"post_processor", nullptr},
          {"decoder", std::move(decoder)}, {"model", std::move(model)}};
}

json tokenizer_config(const std::string& cls, int64_t model_max_length) {
  return {{"tokenizer_class", cls},
          {"model_max_length", model_max_length},
          {"add_bos_token", false},
          {"add_eos_token", false},
          {"clean_up_tokenization_spaces", false},
          {"legacy", false}};
}

// ---- the few fields of SentencePiece's ModelProto (sentencepiece_model.proto) we need. Debian
// ships no generated header for it, and the processor's API does not say a piece is
// user-defined or how the model normalises.
class ProtoReader {
 public:
  explicit ProtoReader(std::string_view b) : b_(b) {}
  bool done() const { return i_ >= b_.size(); }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      FSDPP_CHECK_AS(ConfigError, i_ < b_.size(), "[data] SentencePiece model: truncated varint");
      const auto c = static_cast<unsigned char>(b_[i_++]);
      v |= uint64_t{c & 0x7fu} << shift;
      if ((c & 0x80) == 0) return v;
    }
    FSDPP_THROW(ConfigError, "[data] SentencePiece model: varint longer than 10 bytes");
  }
  // (field, wire type); the value is read by one of the calls below.
  std::pair<uint32_t, uint32_t> tag() {
    const uint64_t t = varint();
    return {static_cast<uint32_t>(t >> 3), static_cast<uint32_t>(t & 7)};
  }
  std::string_view bytes() {
    const uint64_t n = varint();
    FSDPP_CHECK_AS(ConfigError, n <= b_.size() - i_, "[data] SentencePiece model: truncated field");
    auto s = b_.substr(i_, n);
    i_ += n;
    return s;
  }
  float fixed32() {
    FSDPP_CHECK_AS(ConfigError, b_.size() - i_ >= 4, "[data] SentencePiece model: truncated float");
    float f;
    std::memcpy(&f, b_.data() + i_, 4);
    i_ += 4;
    return f;
  }
  void skip(uint32_t wire) {
    switch (wire) {
      case 0: varint(); return;
      case 1: FSDPP_CHECK_AS(ConfigError, b_.size() - i_ >= 8, "[data] SentencePiece model: truncated"); i_ += 8; return;
      case 2: bytes(); return;
      case 5: fixed32(); return;
      default: FSDPP_THROW(ConfigError, "[data] SentencePiece model: unknown wire type {}", wire);
    }
  }

 private:
  std::string_view b_;
  size_t i_ = 0;
};

enum PieceType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

struct SpmModel {
  struct Piece {
    std::string text;
    float score = 0;
    int type = kNormal;
  };
  std::vector<Piece> pieces;
  int model_type = 1;  // UNIGRAM = 1, BPE = 2
  bool treat_whitespace_as_suffix = false;
  std::string normalizer = "nmt_nfkc";
  bool add_dummy_prefix = true, remove_extra_whitespaces = true, escape_whitespaces = true;
  // TrainerSpec's special ids (its defaults; -1: none).
  int unk_id = 0, bos_id = 1, eos_id = 2, pad_id = -1;
};

SpmModel parse_spm(std::string_view proto) {
  SpmModel m;
  ProtoReader r(proto);
  while (!r.done()) {
    const auto [field, wire] = r.tag();
    if (field == 1 && wire == 2) {  // repeated SentencePiece pieces
      ProtoReader p(r.bytes());
      SpmModel::Piece piece;
      while (!p.done()) {
        const auto [f, w] = p.tag();
        if (f == 1 && w == 2) piece.text = std::string(p.bytes());
        else if (f == 2 && w == 5) piece.score = p.fixed32();
        else if (f == 3 && w == 0) piece.type = static_cast<int>(p.varint());
        else p.skip(w);
      }
      m.pieces.push_back(std::move(piece));
    } else if (field == 2 && wire == 2) {  // TrainerSpec
      ProtoReader t(r.bytes());
      while (!t.done()) {
        const auto [f, w] = t.tag();
        if (f == 3 && w == 0) m.model_type = static_cast<int>(t.varint());
        else if (f == 24 && w == 0) m.treat_whitespace_as_suffix = t.varint() != 0;
        else if (f >= 40 && f <= 43 && w == 0) {
          const int id = static_cast<int32_t>(t.varint());  // int32: -1 is ten bytes
          (f == 40 ? m.unk_id : f == 41 ? m.bos_id : f == 42 ? m.eos_id : m.pad_id) = id;
        }
        else t.skip(w);
      }
    } else if (field == 3 && wire == 2) {  // NormalizerSpec
      ProtoReader n(r.bytes());
      while (!n.done()) {
        const auto [f, w] = n.tag();
        if (f == 1 && w == 2) m.normalizer = std::string(n.bytes());
        else if (f == 3 && w == 0) m.add_dummy_prefix = n.varint() != 0;
        else if (f == 4 && w == 0) m.remove_extra_whitespaces = n.varint() != 0;
        else if (f == 5 && w == 0) m.escape_whitespaces = n.varint() != 0;
        else n.skip(w);
      }
    } else {
      r.skip(wire);
    }
  }
  return m;
}

// Lengths of the UTF-8 characters of s, to split pieces only between characters.
std::vector<size_t> char_starts(const std::string& s) {
  std::vector<size_t> out;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xc0) != 0x80) out.push_back(i);
  }
  return out;
}

std::string spm_tokenizer_json(const SpmModel& m) {
  json vocab = json::object();
  std::unordered_map<std::string, size_t> id_of;
  bool has_bytes = false;
  std::string unk;
  json added = json::array();
  for (size_t id = 0; id < m.pieces.size(); ++id) {
    const auto& p = m.pieces[id];
    vocab[p.text] = id;
    id_of.emplace(p.text, id);
    if (p.type == kByte) has_bytes = true;
    if (p.type == kUnknown) unk = p.text;
    // User-defined pieces are plain text; the unknown and control pieces (<s>, </s>) are
    // special, as transformers' own conversion makes them: decode(skip_special_tokens=True)
    // drops them as SentencePiece's decoding does.
    if (p.type == kUserDefined || p.type == kUnknown || p.type == kControl) {
      added.push_back({{"id", id}, {"content", p.text}, {"single_word", false}, {"lstrip", false},
                       {"rstrip", false}, {"normalized", false}, {"special", p.type != kUserDefined}});
    }
  }
  // SentencePiece's BPE merges the adjacent pair whose union is the best-scored piece. Every way
  // of cutting a normal piece into two pieces is a merge, ranked by the score of what it makes.
  std::vector<std::tuple<float, size_t, size_t, size_t>> merges;  // (-score, made, left, right)
  for (size_t id = 0; id < m.pieces.size(); ++id) {
    const auto& p = m.pieces[id];
    if (p.type != kNormal) continue;
    for (size_t cut : char_starts(p.text)) {
      if (cut == 0) continue;
      auto l = id_of.find(p.text.substr(0, cut)), r = id_of.find(p.text.substr(cut));
      if (l == id_of.end() || r == id_of.end()) continue;
      if (m.pieces[l->second].type != kNormal || m.pieces[r->second].type != kNormal) continue;
      merges.emplace_back(-p.score, id, l->second, r->second);
    }
  }
  std::sort(merges.begin(), merges.end());
  json merge_list = json::array();
  for (const auto& [s, made, l, r] : merges) merge_list.push_back({m.pieces[l].text, m.pieces[r].text});
  const std::string ws = "\xe2\x96\x81";  // "▁"
  json normalizer = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", ws}};
  json decoders = json::array();
  // SentencePiece decodes the unknown piece as " ⁇ " (its unk_surface), not as "<unk>".
  if (!unk.empty()) {
    decoders.push_back({{"type", "Replace"}, {"pattern", {{"String", unk}}}, {"content", " \xe2\x81\x87 "}});
  }
  decoders.push_back({{"type", "Replace"}, {"pattern", {{"String", ws}}}, {"content", " "}});
  decoders.push_back({{"type", "ByteFallback"}});
  decoders.push_back({{"type", "Fuse"}});
  json decoder = {{"type", "Sequence"}, {"decoders", std::move(decoders)}};
  return tokenizer_json(std::move(added), std::move(normalizer), nullptr, std::move(decoder),
                        bpe(std::move(vocab), std::move(merge_list),
                            unk.empty() ? json(nullptr) : json(unk), /*fuse_unk=*/true, has_bytes))
             .dump(1) + "\n";
}

// tokenizer_config's unk/bos/eos/pad_token: the pieces TrainerSpec names, where it has them.
void add_special_token_names(const SpmModel& m, json& config) {
  const std::pair<const char*, int> names[] = {
      {"unk_token", m.unk_id}, {"bos_token", m.bos_id}, {"eos_token", m.eos_id}, {"pad_token", m.pad_id}};
  for (const auto& [key, id] : names) {
    if (id >= 0 && static_cast<size_t>(id) < m.pieces.size()) config[key] = m.pieces[id].text;
  }
}

// A tokenizer.json's own files; a tokenizer_config.json written for it when it came without one.
std::map<std::string, std::string> tokenizer_json_files(const TokenizerJson& tok, int64_t model_max_length) {
  const auto& f = tok.files();
  std::map<std::string, std::string> out = {{kTokenizerJsonFile, f.tokenizer_json}};
  if (f.chat_template) out[kChatTemplateFile] = *f.chat_template;
  if (f.tokenizer_config) {
    out[kTokenizerConfigFile] = *f.tokenizer_config;
    return out;
  }
  // No add_bos_token / add_eos_token: either would make transformers replace the file's
  // post-processor; the special tokens by name, as transformers reports them.
  json config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                 {"model_max_length", model_max_length},
                 {"clean_up_tokenization_spaces", false}};
  const auto ids = tok.special_token_ids();
  const std::pair<const char*, std::optional<int32_t>> named[] = {
      {"bos_token", ids.bos}, {"eos_token", ids.eos}, {"pad_token", ids.pad}, {"unk_token", ids.unk}};
  for (const auto& [key, id] : named) {
    if (id) {
      if (auto t = tok.id_to_token(*id)) config[key] = *t;
    }
  }
  out[kTokenizerConfigFile] = config.dump(2) + "\n";
  return out;
}

}  // namespace

std::map<std::string, std::string> hf_tokenizer_files(const Tokenizer& tok, int64_t model_max_length) {
  if (const auto* hf = dynamic_cast<const TokenizerJson*>(&tok)) return tokenizer_json_files(*hf, model_max_length);
  if (dynamic_cast<const ByteTokenizer*>(&tok) != nullptr) {
    const auto chars = byte_level_chars();
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) vocab[chars[b]] = b;
    const json j = tokenizer_json(json::array(), nullptr, byte_level(), byte_level(),
                                  bpe(std::move(vocab), json::array(), nullptr, false, false));
    return {{"tokenizer.json", j.dump(1) + "\n"},
            {"tokenizer_config.json", tokenizer_config("PreTrainedTokenizerFast", model_max_length).dump(2) + "\n"}};
  }
  const auto* spm = dynamic_cast<const SentencePieceTokenizer*>(&tok);
  FSDPP_CHECK(spm != nullptr, "[data] tokenizer '{}' has no Hugging Face form", tok.name());
  const SpmModel m = parse_spm(spm->serialized_model());
  std::map<std::string, std::string> out = {{"tokenizer.model", spm->serialized_model()}};
  const bool as_fsdpp_trains = m.model_type == 2 && m.normalizer == "identity" && !m.add_dummy_prefix &&
                               !m.remove_extra_whitespaces && m.escape_whitespaces &&
                               !m.treat_whitespace_as_suffix;
  json config = tokenizer_config(as_fsdpp_trains ? "PreTrainedTokenizerFast" : "LlamaTokenizer",
                                 model_max_length);
  add_special_token_names(m, config);
  if (as_fsdpp_trains) out["tokenizer.json"] = spm_tokenizer_json(m);
  out["tokenizer_config.json"] = config.dump(2) + "\n";
  return out;
}

}  // namespace fsdpp::data
