#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "../support/error_of.h"
#include "fsdpp/common/error.h"
#include "fsdpp/data/sampler.h"
#include "fsdpp/data/token_dataset.h"
#include "fsdpp/data/hf_tokenizer.h"
#include "fsdpp/data/tokenizer.h"
#include "fsdpp/data/tokenizer_files.h"
#include "fsdpp/data/tokenizer_identity.h"

using namespace fsdpp::data;
using fsdpp::ConfigError;
using fsdpp::test::error_of;
namespace fs = std::filesystem;

namespace {

// Not std::filesystem::remove_all: libtorch.so exports its own copy of it, bound to weak
// libstdc++ internals that Debian 12's libstdc++ lacks, and calling it jumps to address 0.
void remove_tree(const fs::path& p) {
  std::error_code ec;
  if (fs::is_directory(fs::symlink_status(p, ec))) {
    for (const auto& e : fs::directory_iterator(p)) remove_tree(e.path());
  }
  fs::remove(p, ec);
}

class DataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           fmt::format("fsdpp_test_data_{}_{}", ::getpid(), info->name());
    remove_tree(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { remove_tree(dir_); }

  fs::path write(const std::string& name, const std::string& content) {
    auto path = dir_ / name;
    std::ofstream(path, std::ios::binary) << content;
    return path;
  }

  fs::path dir_;
};

// Sentences over a small word list: enough repetition for a BPE vocabulary to form.
std::string corpus(int lines) {
  const char* words[] = {"the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog",
                         "shard", "gather", "reduce", "scatter", "rank", "tensor", "2024"};
  std::string text;
  uint64_t s = 12345;
  for (int i = 0; i < lines; ++i) {
    const int n = 3 + static_cast<int>(i % 7);
    for (int w = 0; w < n; ++w) {
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      text += words[(s >> 33) % 15];
      text += w + 1 < n ? " " : ".\n";
    }
  }
  return text;
}

int64_t mtime_ns(const fs::path& p) {
  struct stat st {};
  ::stat(p.c_str(), &st);
  return int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
}

// A byte tokenizer that claims a vocabulary too big for uint16 tokens.
class WideByteTokenizer : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    auto ids = ByteTokenizer().encode(text);
    for (auto& id : ids) id += 65536;
    return ids;
  }
  std::string decode(std::span<const int32_t>) const override { return ""; }
  int64_t vocab_size() const override { return 70000; }
  std::string name() const override { return "wide-byte"; }
};

}  // namespace

TEST(ByteTokenizer, RoundTripsEveryByte) {
  ByteTokenizer tok;
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  all += "héllo wörld ✓";
  auto ids = tok.encode(all);
  EXPECT_EQ(ids.size(), all.size());
  EXPECT_EQ(ids[255], 255);
  EXPECT_EQ(tok.decode(ids), all);
  EXPECT_EQ(tok.vocab_size(), 256);
  std::vector<int32_t> bad = {65, 256};
  EXPECT_THROW(tok.decode(bad), fsdpp::Error);
  EXPECT_EQ(make_tokenizer("byte")->name(), "byte");
}

TEST_F(DataTest, SentencePieceTrainsAndRoundTrips) {
  auto text = write("corpus.txt", corpus(400));
  const auto prefix = (dir_ / "spm").string();
  SentencePieceTokenizer::train(text.string(), prefix, 120);
  ASSERT_TRUE(fs::exists(prefix + ".model"));
  auto tok = make_tokenizer(prefix + ".model");
  EXPECT_EQ(tok->vocab_size(), 120);
  EXPECT_EQ(tok->name().rfind("sentencepiece:", 0), 0u) << tok->name();

  // Leading, doubled and trailing spaces and newlines come back as written.
  const std::string sample = " the lazy dog jumps over  the fox.\nshard gather 2024\n\nreduce ";
  auto ids = tok->encode(sample);
  EXPECT_LT(ids.size(), sample.size());  // merges happened
  EXPECT_EQ(tok->decode(ids), sample);

  // A dataset encoded through it decodes to the whole text.
  auto data = TokenDataset::open(text, *tok);
  auto all = data.slice(0, data.size());
  std::vector<int32_t> back(all.data_ptr<int64_t>(), all.data_ptr<int64_t>() + all.numel());
  std::ifstream in(text);
  std::string original((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(tok->decode(back), original);

  std::vector<int32_t> bad = {1, 120};
  EXPECT_THROW(tok->decode(bad), fsdpp::Error);
  auto e = error_of([&] { SentencePieceTokenizer((dir_ / "none.model").string()); });
  EXPECT_NE(e.find("none.model"), std::string::npos) << e;
  e = error_of([&] { SentencePieceTokenizer(text.string()); });
  EXPECT_NE(e.find("is not a SentencePiece model"), std::string::npos) << e;
  e = error_of([&] { SentencePieceTokenizer::train((dir_ / "missing.txt").string(), prefix, 50); });
  EXPECT_NE(e.find("missing.txt"), std::string::npos) << e;
}

TEST_F(DataTest, CacheIsReusedAndRebuiltOnChange) {
  ByteTokenizer tok;
  auto text = write("a.txt", "hello world\nsecond line\n");
  auto first = TokenDataset::open(text, tok);
  EXPECT_FALSE(first.reused_cache());
  EXPECT_EQ(first.size(), 24);
  EXPECT_EQ(first.cache_path().parent_path(), dir_ / ".fsdpp-cache");
  const auto written = mtime_ns(first.cache_path());

  auto second = TokenDataset::open(text, tok);
  EXPECT_TRUE(second.reused_cache());
  EXPECT_EQ(mtime_ns(second.cache_path()), written);
  EXPECT_TRUE(torch::equal(second.slice(0, 24), first.slice(0, 24)));
  EXPECT_EQ(second.token(0), 'h');

  // New content of the same size: the hash differs, so it is encoded again.
  write("a.txt", "HELLO world\nsecond line\n");
  auto third = TokenDataset::open(text, tok);
  EXPECT_FALSE(third.reused_cache());
  EXPECT_EQ(third.token(0), 'H');
  EXPECT_EQ(first.token(0), 'h');  // the old mapping stays valid after the rename

  // Another tokenizer gets a token file of its own, in a cache directory of the caller's.
  auto wide = TokenDataset::open(text, WideByteTokenizer(), {.cache_dir = dir_ / "c"});
  EXPECT_FALSE(wide.reused_cache());
  EXPECT_EQ(wide.cache_path().parent_path(), dir_ / "c");
  EXPECT_EQ(wide.token(0), 65536 + 'H');  // stored as uint32
  EXPECT_EQ(wide.vocab_size(), 70000);
  EXPECT_GE(fs::file_size(wide.cache_path()), 24u * 4);
  EXPECT_TRUE(TokenDataset::open(text, tok).reused_cache());
  // No temporary files are left behind.
  for (const auto& e : fs::directory_iterator(dir_ / ".fsdpp-cache")) {
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
  }
}

TEST_F(DataTest, LargeTextIsEncodedInChunks) {
  std::string big;
  while (big.size() < 2'500'000) big += corpus(50);
  auto text = write("big.txt", big);
  auto data = TokenDataset::open(text, ByteTokenizer());
  ASSERT_EQ(data.size(), static_cast<int64_t>(big.size()));
  auto all = data.slice(0, data.size());
  auto expected = torch::from_blob(big.data(), {static_cast<int64_t>(big.size())}, torch::kUInt8)
                      .to(torch::kLong);
  EXPECT_TRUE(torch::equal(all, expected));
}

TEST_F(DataTest, SplitTakesValidationFromTheTail) {
  auto data = TokenDataset::open(write("s.txt", std::string(1000, 'x') + "0123456789"),
                                 ByteTokenizer());
  auto [train, val] = data.split(0.01);
  EXPECT_EQ(train.size(), 1000);
  EXPECT_EQ(val.size(), 10);
  EXPECT_EQ(val.token(0), '0');
  EXPECT_EQ(val.token(9), '9');
  EXPECT_EQ(data.split(0.0).second.size(), 0);
  EXPECT_THROW(data.split(1.0), ConfigError);
  EXPECT_THROW(val.token(10), fsdpp::Error);
}

TEST_F(DataTest, BadInputNamesThePath) {
  ByteTokenizer tok;
  auto missing = dir_ / "missing.txt";
  auto e = error_of([&] { TokenDataset::open(missing, tok); });
  EXPECT_NE(e.find(fmt::format("[data] text file '{}' does not exist", missing.string())),
            std::string::npos)
      << e;
  auto empty = write("empty.txt", "");
  e = error_of([&] { TokenDataset::open(empty, tok); });
  EXPECT_NE(e.find(fmt::format("[data] text file '{}' is empty", empty.string())),
            std::string::npos)
      << e;
  auto binary = write("model.bin", std::string("abc\0def", 7));
  e = error_of([&] { TokenDataset::open(binary, tok); });
  EXPECT_NE(e.find(fmt::format("[data] '{}' is not a text file: it has a NUL byte at offset 3",
                               binary.string())),
            std::string::npos)
      << e;
  e = error_of([&] { TokenDataset::open(dir_, tok); });
  EXPECT_NE(e.find("is not a regular file"), std::string::npos) << e;
}

namespace {
// A dataset whose token i is i % 256 for easy checking of windows: `windows` windows of T.
TokenDataset counting_dataset(const fs::path& dir, int64_t windows, int64_t T, int64_t extra = 1) {
  std::string text;
  for (int64_t i = 0; i < windows * T + extra; ++i) text.push_back(static_cast<char>(1 + i % 200));
  auto path = dir / fmt::format("count_{}_{}_{}.txt", windows, T, extra);
  std::ofstream(path, std::ios::binary) << text;
  return TokenDataset::open(path, ByteTokenizer());
}
}  // namespace

TEST_F(DataTest, EachWindowGoesToExactlyOneRankPerEpoch) {
  const int64_t T = 8;
  for (int64_t n_windows : {12, 13}) {
    auto data = counting_dataset(dir_, n_windows, T);
    for (int world = 1; world <= 4; ++world) {
      for (int64_t epoch : {0, 1}) {
        std::multiset<int64_t> seen;
        for (int rank = 0; rank < world; ++rank) {
          DistributedSampler s(data, {.seq_len = T, .share = {.rank = rank, .world_size = world, .seed = 5}});
          EXPECT_EQ(s.num_windows(), n_windows);
          EXPECT_EQ(s.windows_per_rank(), n_windows / world);
          for (int64_t start : s.window_starts(epoch)) seen.insert(start);
        }
        const auto kept = static_cast<size_t>(n_windows / world * world);
        ASSERT_EQ(seen.size(), kept) << "world " << world;
        EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), kept) << "world " << world;
        for (int64_t start : seen) {
          EXPECT_EQ(start % T, 0);
          EXPECT_LE(start + T + 1, data.size());
        }
        // 12 windows divide by 1..4: then every window is seen.
        if (n_windows == 12) EXPECT_EQ(*seen.rbegin(), 11 * T);
      }
    }
  }
}

TEST_F(DataTest, BatchesAreShiftedWindowsAndDeterministic) {
  const int64_t T = 8;
  auto data = counting_dataset(dir_, 20, T);
  SamplerOptions opts{.seq_len = T, .share = {.rank = 1, .world_size = 2, .seed = 3}};
  DistributedSampler a(data, opts), b(data, opts);
  auto [x, y] = a.next_batch(4);
  EXPECT_EQ(x.sizes(), (std::vector<int64_t>{4, T}));
  EXPECT_EQ(x.scalar_type(), torch::kLong);
  const auto starts = a.window_starts(0);
  for (int64_t i = 0; i < 4; ++i) {
    auto window = data.slice(starts[i], starts[i] + T + 1);
    EXPECT_TRUE(torch::equal(x[i], window.narrow(0, 0, T)));
    EXPECT_TRUE(torch::equal(y[i], window.narrow(0, 1, T)));
  }
  auto [bx, by] = b.next_batch(4);
  EXPECT_TRUE(torch::equal(x, bx));
  // Epochs and seeds reorder; shuffle=false keeps file order.
  EXPECT_NE(a.window_starts(0), a.window_starts(1));
  opts.share.seed = 4;
  EXPECT_NE(DistributedSampler(data, opts).window_starts(0), starts);
  opts.share.shuffle = false;
  EXPECT_EQ(DistributedSampler(data, opts).window_starts(0),
            (std::vector<int64_t>{8, 24, 40, 56, 72, 88, 104, 120, 136, 152}));

  // 10 windows per rank: the third batch of 4 crosses into epoch 1.
  a.next_batch(4);
  auto [cx, cy] = a.next_batch(4);
  EXPECT_EQ(a.state(), (SamplerState{.epoch = 1, .position = 2}));
  EXPECT_TRUE(torch::equal(cx[2], data.slice(a.window_starts(1)[0], a.window_starts(1)[0] + T)));
}

TEST_F(DataTest, ResumeFromStateGivesTheSameNextBatch) {
  auto data = counting_dataset(dir_, 30, 4);
  SamplerOptions opts{.seq_len = 4, .share = {.rank = 0, .world_size = 3, .seed = 11}};
  DistributedSampler run(data, opts);
  for (int i = 0; i < 5; ++i) run.next_batch(3);  // 15 windows: into the second epoch
  const auto saved = run.state();
  EXPECT_EQ(saved, (SamplerState{.epoch = 1, .position = 5}));
  auto [x, y] = run.next_batch(3);

  DistributedSampler resumed(data, opts);
  resumed.load_state(saved);
  auto [rx, ry] = resumed.next_batch(3);
  EXPECT_TRUE(torch::equal(x, rx));
  EXPECT_TRUE(torch::equal(y, ry));
  EXPECT_THROW(resumed.load_state({.epoch = 0, .position = 11}), ConfigError);
}

TEST_F(DataTest, SamplerRejectsTooLittleData) {
  auto data = counting_dataset(dir_, 3, 8);
  auto e = error_of([&] { DistributedSampler(data, {.seq_len = 8, .share = {.world_size = 4}}); });
  EXPECT_NE(e.find("[data] 25 tokens make 3 windows of seq_len+1=9 tokens, fewer than "
                   "world_size=4"),
            std::string::npos)
      << e;
  e = error_of([&] { DistributedSampler(data, {.seq_len = 8, .share = {.rank = 2, .world_size = 2}}); });
  EXPECT_NE(e.find("rank=2 is out of range"), std::string::npos) << e;
  EXPECT_THROW(DistributedSampler(data, {.seq_len = 0}), ConfigError);
}

// SentencePiece's own message for such text is "Internal: ./src/trainer_interface.cc(428)".
TEST_F(DataTest, SentencePieceRefusesTextThatIsNotUtf8NamingFileAndOffset) {
  const auto prefix = (dir_ / "spm").string();
  struct Case {
    std::string tail;  // appended to good text
    size_t at;         // the offset in `tail` the error must name
    std::string expected;
  };
  const std::string good = corpus(50);
  const std::vector<Case> cases = {
      {"caf\xe9 au lait\n", 3, "the bytes 0xe9 0x20 0x61 0x75"},  // latin-1
      {"\xc0\xaf\n", 0, "the bytes 0xc0 0xaf 0x0a"},         // overlong '/'
      {"\xed\xa0\x80\n", 0, "the bytes 0xed 0xa0 0x80 0x0a"},  // a UTF-16 surrogate
      {"x\x80y\n", 1, "the bytes 0x80 0x79 0x0a"},            // stray continuation byte
      {"\xe2\x82", 0, "the bytes 0xe2 0x82"},                 // cut at the end
      {std::string("a\0b\n", 4), 1, "a NUL byte"},
  };
  for (const auto& c : cases) {
    const auto text = write("bad.txt", good + c.tail);
    const auto e = error_of([&] { SentencePieceTokenizer::train(text.string(), prefix, 60); });
    const std::string where =
        fmt::format("[data] '{}' is not UTF-8 text: {}{} at offset {}", text.string(), c.expected,
                    c.expected == "a NUL byte" ? "" : " (not a UTF-8 character)", good.size() + c.at);
    EXPECT_NE(e.find(where), std::string::npos) << e << "\nexpected: " << where;
    EXPECT_FALSE(fs::exists(prefix + ".model"));
  }
  // Every kind of well-formed character passes: 2, 3 and 4 bytes, and the largest code point.
  const auto text = write("good.txt", good + "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf\n");
  SentencePieceTokenizer::train(text.string(), prefix, 60);
  EXPECT_TRUE(fs::exists(prefix + ".model"));
}

// The model fsdpp trains into a shared cache_dir is keyed by the corpus's bytes: another
// corpus (or the same one edited) gets another file; the same text under another name the same.
TEST_F(DataTest, SentencePieceCachePathIsKeyedByTheCorpusContent) {
  const auto a = write("a.txt", corpus(40));
  const auto b = write("b.txt", corpus(41));
  const auto a2 = write("a2.txt", corpus(40));
  const auto pa = SentencePieceTokenizer::cached_model_path(dir_ / "cache", a, 512);
  EXPECT_EQ(pa.parent_path(), dir_ / "cache");
  EXPECT_EQ(pa.filename().string().rfind("spm-bpe-512-", 0), 0u) << pa;
  EXPECT_EQ(pa.extension(), ".model");
  EXPECT_NE(pa, SentencePieceTokenizer::cached_model_path(dir_ / "cache", b, 512));
  EXPECT_EQ(pa, SentencePieceTokenizer::cached_model_path(dir_ / "cache", a2, 512));
  EXPECT_NE(pa, SentencePieceTokenizer::cached_model_path(dir_ / "cache", a, 256));
  const auto e = error_of([&] { SentencePieceTokenizer::cached_model_path(dir_, dir_ / "none.txt", 512); });
  EXPECT_NE(e.find("none.txt"), std::string::npos) << e;
}

// The token cache was memory-mapped: truncating it under a running job (another job rebuilding
// a shared cache_dir, a full disk) made the next batch a SIGBUS. Now the read says so.
TEST_F(DataTest, TokenCacheTruncatedWhileOpenIsAnErrorNamingIt) {
  // Not a ConfigError: the data was fine when the job started.
  auto read_error = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const fsdpp::Error& e) {
      return e.what();
    }
    return "";
  };
  ByteTokenizer tok;
  auto text = write("t.txt", corpus(200));
  auto data = TokenDataset::open(text, tok);
  const auto first = data.slice(0, 64);
  const auto size = fs::file_size(data.cache_path());
  // Cut to a quarter: the last tokens lie on pages wholly beyond the new end, which a mapping
  // turned into SIGBUS (a cut within the last page reads zeros instead).
  const auto cut = size / 4;
  fs::resize_file(data.cache_path(), cut);
  EXPECT_TRUE(torch::equal(data.slice(0, 64), first));     // what is still there reads
  const auto e = read_error([&] { data.slice(data.size() - 64, data.size()); });
  EXPECT_NE(e.find("[data] token cache '" + data.cache_path().string() + "' ended reading tokens"),
            std::string::npos) << e;
  EXPECT_NE(e.find(fmt::format("the file is now {} bytes, its header says {}", cut, size)),
            std::string::npos) << e;
  EXPECT_NE(read_error([&] { data.token(data.size() - 1); }).find("truncated"), std::string::npos);
  // Opening it again finds the size wrong and rebuilds it.
  auto again = TokenDataset::open(text, tok);
  EXPECT_FALSE(again.reused_cache());
  EXPECT_TRUE(torch::equal(again.slice(0, 64), first));
}

// slice() is what every training batch reads: 65-token windows (seq_len 64) at random places.
TEST_F(DataTest, SliceSpeed) {
  ByteTokenizer tok;
  auto text = write("s.txt", corpus(20000));
  auto data = TokenDataset::open(text, tok);
  const int64_t n = 200000, span = data.size() - 65;
  int64_t sum = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t at = (i * 7919) % span;
    sum += data.slice(at, at + 65).data_ptr<int64_t>()[64];
  }
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / n;
  std::printf("slice of 65 tokens: %.3f us (checksum %lld)\n", us, static_cast<long long>(sum));
  EXPECT_LT(us, 50.0);  // a batch of 32 windows under 2 ms even on a loaded machine
}

// Tokenizer identity (tokenizer_identity.h): a SentencePiece model is not the byte tokenizer
// whatever their vocabulary sizes; the same model is itself in memory, in a checkpoint's files
// and in a Hugging Face directory; a tokenizer.json matches the student it was exported from,
// whichever spelling of merges it uses, and no other.
TEST_F(DataTest, TokenizerIdentityTellsKindAndContentApart) {
  auto text = write("corpus.txt", corpus(400));
  const auto prefix = (dir_ / "spm").string();
  // (This corpus holds too few pieces for 256; faults.third_pass_jobs trains a 256-piece one
  // against the byte tokenizer.)
  SentencePieceTokenizer::train(text.string(), prefix, 150);
  SentencePieceTokenizer spm(prefix + ".model");
  ByteTokenizer bytes;
  EXPECT_EQ(identity_of(bytes).describe(), "byte");
  EXPECT_EQ(identity_of(spm).kind, "sentencepiece");
  EXPECT_EQ(identity_of(spm).digest.size(), 16u);
  EXPECT_EQ(identity_of(spm).describe(), "sentencepiece (model " + identity_of(spm).digest + ")");

  // Written as a checkpoint carries it.
  auto save = [&](const fs::path& d, const std::map<std::string, std::string>& files) {
    fs::create_directories(d);
    for (const auto& [name, bytes_of] : files) std::ofstream(d / name, std::ios::binary) << bytes_of;
  };
  save(dir_ / "ck_spm", tokenizer_files(spm));
  save(dir_ / "ck_byte", tokenizer_files(bytes));
  const auto from_spm = read_tokenizer_identity(dir_ / "ck_spm");
  const auto from_byte = read_tokenizer_identity(dir_ / "ck_byte");
  ASSERT_TRUE(from_spm && from_byte);
  EXPECT_TRUE(same_tokenizer(*from_spm, spm));
  EXPECT_FALSE(same_tokenizer(*from_spm, bytes));
  EXPECT_TRUE(same_tokenizer(*from_byte, bytes));
  EXPECT_FALSE(same_tokenizer(*from_byte, spm));
  EXPECT_EQ(from_spm->where, (dir_ / "ck_spm" / kTokenizerFile).string());
  EXPECT_FALSE(read_tokenizer_identity(dir_ / "nothing").has_value());

  // A Hugging Face directory with tokenizer.json only (what export-hf writes, less fsdpp's file).
  auto hf = hf_tokenizer_files(bytes, 32);
  save(dir_ / "hf_byte", {{"tokenizer.json", hf.at("tokenizer.json")}});
  const auto from_hf = read_tokenizer_identity(dir_ / "hf_byte");
  ASSERT_TRUE(from_hf);
  EXPECT_EQ(from_hf->kind, "tokenizer.json");
  EXPECT_TRUE(same_tokenizer(*from_hf, bytes));
  EXPECT_FALSE(same_tokenizer(*from_hf, spm));
  // The tokenizers library's older spelling of merges ("a b" for ["a", "b"], which fsdpp
  // writes) is the same tokenizer.
  auto spm_hf = nlohmann::json::parse(hf_tokenizer_files(spm, 32).at("tokenizer.json"));
  ASSERT_FALSE(spm_hf["model"]["merges"].empty());
  for (auto& m : spm_hf["model"]["merges"]) {
    ASSERT_TRUE(m.is_array()) << m.dump();
    m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  }
  save(dir_ / "hf_spm", {{"tokenizer.json", spm_hf.dump()}});
  const auto from_hf_spm = read_tokenizer_identity(dir_ / "hf_spm");
  ASSERT_TRUE(from_hf_spm);
  EXPECT_TRUE(same_tokenizer(*from_hf_spm, spm));
  EXPECT_FALSE(same_tokenizer(*from_hf_spm, bytes));
  // One vocabulary entry changed: another tokenizer.
  spm_hf["model"]["vocab"]["zzz"] = 9999;
  save(dir_ / "hf_other", {{"tokenizer.json", spm_hf.dump()}});
  EXPECT_FALSE(same_tokenizer(*read_tokenizer_identity(dir_ / "hf_other"), spm));
  save(dir_ / "hf_bad", {{"tokenizer.json", "{not json"}});
  const auto e = error_of([&] { (void)read_tokenizer_identity(dir_ / "hf_bad"); });
  EXPECT_NE(e.find("hf_bad/tokenizer.json' is not valid JSON"), std::string::npos) << e;
}
