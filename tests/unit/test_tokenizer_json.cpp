// TokenizerJson (a Hugging Face tokenizer.json read by fsdpp) on small files written here, with
// ids worked out by hand from the tokenizers library's rules; the library itself is the reference
// of tests/data/tokenizer_parity.py on 10 MB per tokenizer. Also make_tokenizer's forms, the
// tokenizer in checkpoints, identities and exports, and the Tokenizer API of the other kinds.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "fsdpp/common/error.h"
#include "fsdpp/data/hf_tokenizer.h"
#include "fsdpp/data/tokenizer.h"
#include "fsdpp/data/tokenizer_files.h"
#include "fsdpp/data/tokenizer_identity.h"
#include "fsdpp/data/tokenizer_json.h"

using namespace fsdpp::data;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

void remove_tree(const fs::path& p) {  // not fs::remove_all (see test_data.cpp)
  std::error_code ec;
  if (fs::is_directory(fs::symlink_status(p, ec))) {
    for (const auto& e : fs::directory_iterator(p)) remove_tree(e.path());
  }
  fs::remove(p, ec);
}

std::string utf8(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xc0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    s += static_cast<char>(0xe0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  }
  return s;
}

// GPT-2's printable character for byte b.
std::string byte_char(int b) {
  auto prints = [](int x) { return (x >= '!' && x <= '~') || (x >= 0xa1 && x <= 0xac) || x >= 0xae; };
  if (prints(b)) return utf8(static_cast<char32_t>(b));
  char32_t next = 256;
  for (int x = 0; x < b; ++x) next += !prints(x);
  return utf8(next);
}

// A GPT-2-like byte-level BPE: ids 0..255 are the bytes, then Ġt (256), he (257), Ġthe (258),
// Ġxyz (259, no merges make it) and the added tokens <|endoftext|> (260, special) and <mask>
// (261, lstrip).
json byte_level_json() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  const std::string G = byte_char(' ');
  vocab[G + "t"] = 256;
  vocab["he"] = 257;
  vocab[G + "the"] = 258;
  vocab[G + "xyz"] = 259;
  auto added = [](int id, const char* content, bool special, bool lstrip) {
    return json{{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", lstrip},
                {"rstrip", false}, {"normalized", false}, {"special", special}};
  };
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", json::array({added(260, "<|endoftext|>", true, false),
                                        added(261, "<mask>", false, true)})},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                             {"use_regex", true}}},
          {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false},
                              {"use_regex", true}}},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true},
                       {"use_regex", true}}},
          {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                     {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                     {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
                     {"vocab", vocab},
                     {"merges", json::array({json::array({G, "t"}), json::array({"h", "e"}),
                                             json::array({G + "t", "he"})})}}}};
}

// A Llama-2-like SentencePiece BPE: <unk> <s> </s>, the 256 <0xXX> byte tokens (3..258), then
// ▁ (259), h (260), i (261), ▁h (262), ▁hi (263); Metaspace, byte fallback, BOS template.
json sentencepiece_json() {
  const std::string m = "\xe2\x96\x81";  // ▁
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = 3 + b;
  vocab[m] = 259;
  vocab["h"] = 260;
  vocab["i"] = 261;
  vocab[m + "h"] = 262;
  vocab[m + "hi"] = 263;
  auto special = [](int id, const char* content) {
    return json{{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
                {"rstrip", false}, {"normalized", false}, {"special", true}};
  };
  return {{"version", "1.0"},
          {"added_tokens", json::array({special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")})},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "Metaspace"}, {"replacement", m}, {"prepend_scheme", "first"},
                             {"split", false}}},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                    {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
            {"pair", json::array()},
            {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
          {"decoder",
           {{"type", "Sequence"},
            {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", m}}}, {"content", " "}},
                                      {{"type", "ByteFallback"}},
                                      {{"type", "Fuse"}},
                                      {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
          {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", "<unk>"}, {"fuse_unk", true},
                     {"byte_fallback", true}, {"ignore_merges", false}, {"vocab", vocab},
                     {"merges", json::array({m + " h", m + "h i"})}}}};
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const fsdpp::Error& e) {
    return e.what();
  }
  return "";
}

TokenizerJson from(const json& j) { return TokenizerJson({j.dump(), std::nullopt, std::nullopt}, "x/tokenizer.json"); }

class TokenizerJsonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("fsdpp_test_tokjson_{}_{}", ::getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    remove_tree(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { remove_tree(dir_); }
  fs::path save(const std::string& sub, const std::map<std::string, std::string>& files) {
    const fs::path d = dir_ / sub;
    fs::create_directories(d);
    for (const auto& [name, bytes] : files) std::ofstream(d / name, std::ios::binary) << bytes;
    return d;
  }
  fs::path dir_;
};

using V = std::vector<int32_t>;

}  // namespace

// GPT-2's regex splits "the the" into "the", " the"; merges go lowest rank first.
TEST(TokenizerJson, ByteLevelBpeMergesInRankOrder) {
  const auto tok = from(byte_level_json());
  EXPECT_EQ(tok.encode("the the"), (V{'t', 257, 258}));
  EXPECT_EQ(tok.decode(V{'t', 257, 258}), "the the");
  EXPECT_EQ(tok.encode("\xc3\xa9\n"), (V{0xc3, 0xa9, '\n'}));  // é: two byte tokens
  EXPECT_EQ(tok.vocab_size(), 262);
  EXPECT_EQ(tok.encode(""), V{});
  // A piece that is a token but that no merge reaches: only ignore_merges takes it whole.
  EXPECT_EQ(tok.encode(" xyz"), (V{' ', 'x', 'y', 'z'}));
  auto j = byte_level_json();
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(from(j).encode(" xyz"), V{259});
  // "a b" merges are the same merges as ["a", "b"].
  for (auto& merge : j["model"]["merges"]) merge = merge[0].get<std::string>() + " " + merge[1].get<std::string>();
  EXPECT_EQ(from(j).encode("the the"), (V{'t', 257, 258}));
  // Bytes that are not UTF-8 decode to U+FFFD, as the library's from_utf8_lossy does.
  EXPECT_EQ(tok.decode(V{0xc3}), "\xef\xbf\xbd");
}

// Added tokens are cut out before the pre-tokenizer; lstrip takes the space before; the longest
// token wins; special ones go with skip_special_tokens.
TEST(TokenizerJson, AddedTokens) {
  auto j = byte_level_json();
  j["added_tokens"].push_back({{"id", 262}, {"content", "<|end|>"}, {"single_word", false},
                               {"lstrip", false}, {"rstrip", true}, {"normalized", false}, {"special", true}});
  j["added_tokens"].push_back({{"id", 263}, {"content", "cat"}, {"single_word", true},
                               {"lstrip", false}, {"rstrip", false}, {"normalized", false}, {"special", false}});
  const auto tok = from(j);
  EXPECT_EQ(tok.encode("a<|endoftext|>b"), (V{'a', 260, 'b'}));
  EXPECT_EQ(tok.encode("a <mask>b"), (V{'a', 261, 'b'}));          // lstrip: the space goes
  EXPECT_EQ(tok.encode("a<|end|>  b"), (V{'a', 262, 'b'}));        // rstrip: both spaces go
  EXPECT_EQ(tok.encode("<|end|><|endoftext|>"), (V{262, 260}));
  EXPECT_EQ(tok.encode("cat concat"), (V{263, ' ', 'c', 'o', 'n', 'c', 'a', 't'}));  // single_word
  EXPECT_EQ(tok.decode(V{'a', 260, 'b'}), "a<|endoftext|>b");
  EXPECT_EQ(tok.decode_skipping_special_tokens(V{'a', 260, 'b', 261}), "ab<mask>");
  EXPECT_TRUE(tok.is_special(260));
  EXPECT_FALSE(tok.is_special(261));
  EXPECT_FALSE(tok.is_special('a'));
  EXPECT_EQ(tok.token_to_id("<mask>"), 261);
  EXPECT_EQ(tok.token_to_id(byte_char(' ') + "the"), 258);
  EXPECT_EQ(tok.id_to_token(257), "he");
  EXPECT_FALSE(tok.token_to_id("nope").has_value());
  EXPECT_EQ(tok.vocab_size(), 264);
  // No config and a post-processor that adds nothing: no BOS/EOS, encode_with_special = encode.
  EXPECT_EQ(tok.encode_with_special_tokens("a"), V{'a'});
  EXPECT_FALSE(tok.special_token_ids().bos.has_value());
}

// SentencePiece-style: Metaspace (prepend_scheme first), byte fallback, a fused unk, the BOS
// template, and the decoder chain back.
TEST(TokenizerJson, SentencePieceStyle) {
  const auto tok = from(sentencepiece_json());
  EXPECT_EQ(tok.encode("hi hi"), (V{263, 263}));
  EXPECT_EQ(tok.decode(V{263, 263}), "hi hi");
  EXPECT_EQ(tok.encode("h\xc3\xa9"), (V{262, 3 + 0xc3, 3 + 0xa9}));  // é as two byte tokens
  EXPECT_EQ(tok.decode(V{262, 3 + 0xc3, 3 + 0xa9}), "h\xc3\xa9");
  EXPECT_EQ(tok.decode(V{3 + 0xc3}), "\xef\xbf\xbd");  // a lone byte: U+FFFD
  EXPECT_EQ(tok.encode_with_special_tokens("hi"), (V{1, 263}));
  // "first": only the text's first piece gets "▁", not the one after an added token.
  EXPECT_EQ(tok.encode("hi</s>hi"), (V{263, 2, 260, 261}));
  EXPECT_EQ(tok.special_token_ids().bos, 1);
  EXPECT_FALSE(tok.special_token_ids().eos.has_value());
  EXPECT_EQ(tok.special_token_ids().unk, 0);
  EXPECT_EQ(tok.decode_skipping_special_tokens(V{1, 263, 2}), "hi");
  auto j = sentencepiece_json();
  j["model"]["byte_fallback"] = false;  // unknown characters: one <unk> for a run of them
  EXPECT_EQ(from(j).encode("h\xc3\xa9\xc3\xa9"), (V{262, 0}));
  j["model"]["fuse_unk"] = false;
  EXPECT_EQ(from(j).encode("h\xc3\xa9\xc3\xa9"), (V{262, 0, 0}));
  // A token with "▁" after another character: a merge may cross there, so the piece is not cut
  // into words before each "▁" (i▁ merges first; cut, each word would give ▁hi).
  j = sentencepiece_json();
  j["model"]["vocab"]["i\xe2\x96\x81"] = 264;
  j["model"]["merges"].insert(j["model"]["merges"].begin(), "i \xe2\x96\x81");
  EXPECT_EQ(from(j).encode("hi hi"), (V{262, 264, 260, 261}));
  // Llama 2's published form of the same: Prepend + Replace normalizers, no pre-tokenizer.
  j = sentencepiece_json();
  j["pre_tokenizer"] = nullptr;
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", "\xe2\x96\x81"}},
                                                  {{"type", "Replace"}, {"pattern", {{"String", " "}}},
                                                   {"content", "\xe2\x96\x81"}}})}};
  EXPECT_EQ(from(j).encode("hi hi"), (V{263, 263}));
  EXPECT_EQ(from(j).encode("hi</s>hi"), (V{263, 2, 263}));  // Prepend per piece, as the library
}

// Split's behaviors, seen through whole-word tokens (ignore_merges).
TEST(TokenizerJson, SplitBehaviorsAndDigits) {
  json vocab = {{"a", 0}, {"b", 1}, {"-", 2}, {"a-", 3}, {"-b", 4}, {"--", 5}, {"1", 6}, {"2", 7}, {"12", 8}};
  auto tok = [&](json pre) {
    return from({{"pre_tokenizer", pre},
                 {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}, {"ignore_merges", true}}}});
  };
  auto split = [&](const char* behavior, bool invert = false) {
    return tok({{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", invert}});
  };
  EXPECT_EQ(split("Removed").encode("a-b"), (V{0, 1}));
  EXPECT_EQ(split("Isolated").encode("a-b"), (V{0, 2, 1}));
  EXPECT_EQ(split("MergedWithPrevious").encode("a-b"), (V{3, 1}));
  EXPECT_EQ(split("MergedWithNext").encode("a-b"), (V{0, 4}));
  EXPECT_EQ(split("Contiguous").encode("a--b"), (V{0, 5, 1}));
  EXPECT_EQ(split("Removed", true).encode("a-b"), V{2});
  const json seq = {{"type", "Sequence"},
                    {"pretokenizers", json::array({{{"type", "Digits"}, {"individual_digits", true}}})}};
  EXPECT_EQ(tok(seq).encode("12"), (V{6, 7}));
  EXPECT_EQ(tok({{"type", "Digits"}, {"individual_digits", false}}).encode("12"), V{8});
}

// \s is White_Space as in Oniguruma: U+180E (which PCRE2's own \s takes) is not a space, so
// GPT-2's regex keeps it apart from the following space; NBSP is one.
TEST(TokenizerJson, RegexWhitespaceIsOniguruma) {
  const auto tok = from(byte_level_json());
  // "a\u180e b": a | \u180e (not space: [^\s\p{L}\p{N}]+) | " b"
  EXPECT_EQ(tok.encode("a\xe1\xa0\x8e b"), (V{'a', 0xe1, 0xa0, 0x8e, ' ', 'b'}));
  auto j = byte_level_json();
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", json::array({{{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}},
                                                        {"behavior", "Removed"}, {"invert", false}},
                                                       {{"type", "ByteLevel"}, {"add_prefix_space", false},
                                                        {"use_regex", false}}})}};
  EXPECT_EQ(from(j).encode("t\xc2\xa0he\xe1\xa0\x8e"), (V{'t', 257, 0xe1, 0xa0, 0x8e}));
}

TEST(TokenizerJson, RefusesWhatItDoesNotSupport) {
  auto j = byte_level_json();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  EXPECT_EQ(error_of([&] { from(j); }),
            "[data] x/tokenizer.json: pre_tokenizer 'Whitespace' is not supported; supported: "
            "ByteLevel, Split, Metaspace, Digits, Sequence");
  j = byte_level_json();
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "Precompiled"}}})}};
  EXPECT_NE(error_of([&] { from(j); }).find("normalizer.normalizers[0] 'Precompiled' is not supported; supported: NFC"),
            std::string::npos);
  j = byte_level_json();
  j["model"]["type"] = "WordPiece";
  EXPECT_NE(error_of([&] { from(j); }).find("model 'WordPiece' is not supported; supported: BPE"), std::string::npos);
  j = byte_level_json();
  j["model"]["dropout"] = 0.1;
  EXPECT_NE(error_of([&] { from(j); }).find("has dropout 0.1; supported: null"), std::string::npos);
  j = byte_level_json();
  j["decoder"] = {{"type", "CTC"}};
  EXPECT_NE(error_of([&] { from(j); }).find("decoder 'CTC' is not supported; supported: ByteLevel"), std::string::npos);
  j = byte_level_json();
  j["post_processor"] = {{"type", "Nope"}};
  EXPECT_NE(error_of([&] { from(j); }).find("post_processor 'Nope' is not supported"), std::string::npos);
  j = byte_level_json();
  j["model"]["merges"].push_back(json::array({"q", "zz"}));
  EXPECT_NE(error_of([&] { from(j); }).find("model merges[3] ('q', 'zz'): 'zz' is not in the vocabulary"),
            std::string::npos);
  j = byte_level_json();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  EXPECT_NE(error_of([&] { from(j); }).find("regex '(unclosed' does not compile"), std::string::npos);
  j["pre_tokenizer"]["pattern"] = {{"Regex", "[a-z&&[^aeiou]]"}};
  EXPECT_NE(error_of([&] { from(j); }).find("class intersection (&&)"), std::string::npos);
  j = byte_level_json();
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", json::array({{{"type", "ByteLevel"}}, {{"type", "Digits"}}})}};
  EXPECT_NE(error_of([&] { from(j); }).find("'Digits' comes after ByteLevel"), std::string::npos);
  EXPECT_NE(error_of([] { TokenizerJson({"{not json", {}, {}}, "y/tokenizer.json"); })
                .find("'y/tokenizer.json' is not valid JSON"),
            std::string::npos);
  EXPECT_NE(error_of([] { TokenizerJson({"{}", {}, {}}, "y/tokenizer.json"); }).find("has no \"model\" object"),
            std::string::npos);
  // Text that is not UTF-8: the byte offset.
  EXPECT_NE(error_of([] { from(byte_level_json()).encode("ab\xff"); }).find("not UTF-8 at byte offset 2 (0xff)"),
            std::string::npos);
  // Ids outside the vocabulary.
  EXPECT_NE(error_of([] { from(byte_level_json()).decode(V{262}); }).find("cannot decode id 262"), std::string::npos);
}

// tokenizer_config.json: its special tokens, add_bos/eos_token (which replace the file's
// post-processor, as transformers does), the chat template ("default" of a list;
// chat_template.jinja wins), model_max_length.
TEST_F(TokenizerJsonTest, ConfigBesideTheFile) {
  const json config = {{"bos_token", "<s>"},
                       {"eos_token", {{"__type", "AddedToken"}, {"content", "</s>"}}},
                       {"pad_token", nullptr},
                       {"add_bos_token", true},
                       {"add_eos_token", true},
                       {"chat_template", json::array({{{"name", "tool_use"}, {"template", "T"}},
                                                      {{"name", "default"}, {"template", "{{ x }}"}}})},
                       {"model_max_length", 1000000000000000019884624838656.0}};
  const auto d = save("hf", {{"tokenizer.json", sentencepiece_json().dump()}, {"tokenizer_config.json", config.dump()}});
  auto tok = TokenizerJson::from_file(d / "tokenizer.json");
  EXPECT_EQ(tok->encode_with_special_tokens("hi"), (V{1, 263, 2}));
  EXPECT_EQ(tok->special_token_ids().eos, 2);
  EXPECT_FALSE(tok->special_token_ids().pad.has_value());
  EXPECT_EQ(tok->chat_template(), "{{ x }}");
  EXPECT_FALSE(tok->config().model_max_length.has_value());
  std::ofstream(d / "chat_template.jinja") << "J";
  EXPECT_EQ(TokenizerJson::from_file(d / "tokenizer.json")->chat_template(), "J");
  // A token the vocabulary lacks is refused, naming the config.
  save("hf", {{"tokenizer_config.json", json{{"eos_token", "<eos>"}}.dump()}});
  EXPECT_NE(error_of([&] { TokenizerJson::from_file(d / "tokenizer.json"); })
                .find("hf/tokenizer_config.json: eos_token '<eos>' is not in the vocabulary"),
            std::string::npos);
}

// make_tokenizer's forms; a tokenizer.json in a checkpoint (verbatim) and back; identities; the
// Hugging Face export carries the original files.
TEST_F(TokenizerJsonTest, MakeStoreIdentifyExport) {
  const std::string config = json{{"eos_token", "</s>"}, {"model_max_length", 77}}.dump();
  const auto hf = save("hf", {{"tokenizer.json", sentencepiece_json().dump()}, {"tokenizer_config.json", config},
                              {"tokenizer.model", "not a model: tokenizer.json comes first"}});
  const auto from_dir = make_tokenizer(hf.string());
  const auto from_file = make_tokenizer((hf / "tokenizer.json").string());
  ASSERT_NE(dynamic_cast<const TokenizerJson*>(from_dir.get()), nullptr);
  EXPECT_EQ(from_dir->encode("hi hi"), (V{263, 263}));
  EXPECT_EQ(from_dir->name(), from_file->name());
  EXPECT_EQ(from_dir->name().rfind("tokenizer.json:", 0), 0u);
  EXPECT_EQ(from_dir->special_token_ids().eos, 2);
  EXPECT_EQ(dynamic_cast<const TokenizerJson&>(*from_dir).config().model_max_length, 77);

  // identity_of(a loaded tokenizer.json) == read_tokenizer_identity(its directory).
  const auto id = read_tokenizer_identity(hf);
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(id->kind, "tokenizer.json");
  EXPECT_EQ(identity_of(*from_dir).digest, id->digest);
  EXPECT_TRUE(same_tokenizer(*id, *from_dir));
  EXPECT_FALSE(same_tokenizer(*id, ByteTokenizer()));
  const auto other = make_tokenizer(save("other", {{"tokenizer.json", byte_level_json().dump()}}).string());
  EXPECT_FALSE(same_tokenizer(*id, *other));

  // In a checkpoint: the files verbatim, and fsdpp_tokenizer.json naming them.
  const auto files = tokenizer_files(*from_dir);
  EXPECT_EQ(files.at("tokenizer.json"), sentencepiece_json().dump());
  EXPECT_EQ(files.at("tokenizer_config.json"), config);
  EXPECT_EQ(json::parse(files.at(kTokenizerFile))["type"], "tokenizer.json");
  const auto ck = save("ck", files);
  const auto loaded = load_tokenizer(ck);
  ASSERT_NE(loaded, nullptr);
  EXPECT_EQ(loaded->name(), from_dir->name());
  EXPECT_EQ(loaded->encode_with_special_tokens("hi hi"), from_dir->encode_with_special_tokens("hi hi"));
  EXPECT_EQ(read_tokenizer_identity(ck)->digest, id->digest);
  EXPECT_EQ(make_tokenizer(ck.string())->name(), from_dir->name());

  // Exported: the original files, not fsdpp's own form.
  const auto exported = hf_tokenizer_files(*from_dir, 4096);
  EXPECT_EQ(exported.at("tokenizer.json"), sentencepiece_json().dump());
  EXPECT_EQ(exported.at("tokenizer_config.json"), config);
  // Without a config, one naming the special tokens is written.
  const auto bare = hf_tokenizer_files(from(sentencepiece_json()), 4096);
  const auto written = json::parse(bare.at("tokenizer_config.json"));
  EXPECT_EQ(written["bos_token"], "<s>");
  EXPECT_EQ(written["unk_token"], "<unk>");
  EXPECT_EQ(written["model_max_length"], 4096);
  EXPECT_FALSE(written.contains("add_bos_token"));

  // What make_tokenizer refuses lists what it accepts.
  const auto e = error_of([&] { make_tokenizer((dir_ / "missing").string()); });
  EXPECT_NE(e.find("expected \"byte\", a SentencePiece .model file, a tokenizer.json file, or a directory"),
            std::string::npos)
      << e;
  const auto empty = save("empty", {});
  EXPECT_NE(error_of([&] { make_tokenizer(empty.string()); }).find("is a directory without"), std::string::npos);
  const auto junk = save("junk", {{"x.model", "junk"}});
  EXPECT_NE(error_of([&] { make_tokenizer((junk / "x.model").string()); }).find("a tokenizer is \"byte\""),
            std::string::npos);
}

// Encoding from several threads at once gives what one thread gives (the word cache is shared).
TEST(TokenizerJson, ThreadsShareOneTokenizer) {
  const auto tok = from(byte_level_json());
  std::string text;
  for (int i = 0; i < 2000; ++i) text += fmt::format("the {} the{} <|endoftext|> ", i, i % 7);
  const auto expected = tok.encode(text);
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back([&, t] { got[t] = tok.encode(text); });
  for (auto& t : threads) t.join();
  for (const auto& g : got) EXPECT_EQ(g, expected);
}

// The Tokenizer API of the byte tokenizer: no special tokens, tokens are the bytes.
TEST(TokenizerApi, ByteTokenizer) {
  ByteTokenizer tok;
  EXPECT_EQ(tok.encode_with_special_tokens("ab"), (V{'a', 'b'}));
  EXPECT_EQ(tok.decode_skipping_special_tokens(V{'a'}), "a");
  EXPECT_FALSE(tok.special_token_ids().bos.has_value());
  EXPECT_FALSE(tok.is_special(0));
  EXPECT_EQ(tok.token_to_id("a"), 'a');
  EXPECT_FALSE(tok.token_to_id("ab").has_value());
  EXPECT_EQ(tok.id_to_token(255), std::string(1, '\xff'));
  EXPECT_FALSE(tok.chat_template().has_value());
}
