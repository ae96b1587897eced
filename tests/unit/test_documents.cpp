// Document shards, row plans and the document sampler (data/document_store.h, row_plan.h,
// document_sampler.h), each checked against what the documents themselves say: every target a
// document has appears exactly once over an epoch's rows (nothing lost, nothing twice), each
// (input, target) pair is two consecutive tokens of one document, masks and positions follow.
#include <gtest/gtest.h>
#include <unistd.h>

#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <tuple>

#include "fsdpp/common/error.h"
#include "fsdpp/data/document_sampler.h"
#include "fsdpp/data/document_store.h"
#include "fsdpp/data/prepare.h"
#include "fsdpp/data/row_plan.h"

using namespace fsdpp::data;
namespace fs = std::filesystem;

namespace {

void remove_tree(const fs::path& p) {  // not fs::remove_all (libtorch's copy crashes here)
  std::error_code ec;
  if (fs::is_directory(fs::symlink_status(p, ec))) {
    for (const auto& e : fs::directory_iterator(p)) remove_tree(e.path());
  }
  fs::remove(p, ec);
}

struct Doc {
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;  // empty: every token counts
};

// Documents whose tokens say where they are: token k of document d is (d * 37 + k * 7) % vocab,
// lengths 1 .. max_len, every third with a loss mask (its first half masked out).
std::vector<Doc> make_docs(int n, int max_len, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Doc> docs(n);
  for (int d = 0; d < n; ++d) {
    const int len = 1 + static_cast<int>(rng() % max_len);
    for (int k = 0; k < len; ++k) docs[d].ids.push_back(static_cast<int32_t>((d * 37 + k * 7) % vocab));
    if (d % 3 == 0) {
      for (int k = 0; k < len; ++k) docs[d].mask.push_back(k >= len / 2 ? 1 : 0);
    }
  }
  return docs;
}

class DocumentsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / fmt::format("fsdpp_test_docs_{}_{}", ::getpid(), info->name());
    remove_tree(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { remove_tree(dir_); }

  // The documents in shards of `per_shard`.
  std::shared_ptr<const DocumentStore> store(const std::vector<Doc>& docs, int per_shard,
                                             int64_t vocab) {
    shards_.clear();
    for (size_t i = 0; i < docs.size(); i += per_shard) {
      DocumentShardWriter w(dir_ / fmt::format("shard-{:05d}.docs", shards_.size()), vocab);
      for (size_t d = i; d < std::min(docs.size(), i + per_shard); ++d) w.add(docs[d].ids, docs[d].mask);
      shards_.push_back(w.commit());
    }
    return std::make_shared<const DocumentStore>(DocumentStore::open(dir_, shards_));
  }

  fs::path dir_;
  std::vector<ShardInfo> shards_;
};

bool counts(const Doc& d, size_t k) { return d.mask.empty() || d.mask[k] != 0; }

// Every (input, target) of every row checked against the documents; returns the targets seen as
// (document, index of the target token) -> times.
std::map<std::pair<int64_t, int64_t>, int> check_rows(const std::vector<Doc>& docs,
                                                      const DocumentSampler& s, int64_t T,
                                                      bool padding_free) {
  std::vector<int64_t> all(s.plan().num_rows());
  std::iota(all.begin(), all.end(), 0);
  const auto b = s.load_batch(all);
  EXPECT_EQ(b.inputs.sizes(), (std::vector<int64_t>{s.plan().num_rows(), T}));
  EXPECT_EQ(b.positions.defined(), padding_free);
  std::map<std::pair<int64_t, int64_t>, int> seen;
  for (int64_t r = 0; r < s.plan().num_rows(); ++r) {
    int64_t at = 0;
    for (const auto& p : s.plan().row(r)) {
      const Doc& doc = docs[p.doc];
      for (int64_t k = p.begin; k < p.end; ++k, ++at) {
        EXPECT_EQ(b.inputs[r][at].item<int64_t>(), doc.ids[k]) << "row " << r << " pos " << at;
        if (padding_free) EXPECT_EQ(b.positions[r][at].item<int64_t>(), k - p.begin);
        const int64_t t = b.targets[r][at].item<int64_t>();
        if (k + 1 < static_cast<int64_t>(doc.ids.size())) {
          EXPECT_EQ(t, counts(doc, k + 1) ? doc.ids[k + 1] : -100) << "row " << r << " pos " << at;
          if (counts(doc, k + 1)) ++seen[{p.doc, k + 1}];
        } else if (!s.plan().stream()) {
          EXPECT_EQ(t, -100) << "a document's last token predicts nothing";
        }
      }
    }
    for (; at < T; ++at) {
      EXPECT_EQ(b.targets[r][at].item<int64_t>(), -100);
      EXPECT_EQ(b.inputs[r][at].item<int64_t>(), 0);
    }
  }
  return seen;
}

// Every target a document has (its tokens 1.., where its mask counts them).
std::map<std::pair<int64_t, int64_t>, int> all_targets(const std::vector<Doc>& docs) {
  std::map<std::pair<int64_t, int64_t>, int> out;
  for (size_t d = 0; d < docs.size(); ++d) {
    for (size_t k = 1; k < docs[d].ids.size(); ++k) {
      if (counts(docs[d], k)) out[{static_cast<int64_t>(d), static_cast<int64_t>(k)}] = 1;
    }
  }
  return out;
}

}  // namespace

TEST_F(DocumentsTest, ShardsRoundTripTokensMasksAndBothWidths) {
  for (int64_t vocab : {int64_t{300}, int64_t{70000}}) {
    auto docs = make_docs(50, 40, vocab, 1);
    docs[7].ids = {static_cast<int32_t>(vocab - 1)};  // the largest id survives the narrow width
    auto s = store(docs, 16, vocab);
    ASSERT_EQ(s->num_documents(), 50);
    ASSERT_EQ(shards_.size(), 4u);
    int64_t tokens = 0, loss = 0;
    for (size_t d = 0; d < docs.size(); ++d) {
      const int64_t n = static_cast<int64_t>(docs[d].ids.size());
      ASSERT_EQ(s->length(d), n);
      std::vector<int64_t> t(n);
      std::vector<uint8_t> m(n);
      s->read(d, 0, n, t.data(), m.data());
      for (int64_t k = 0; k < n; ++k) {
        EXPECT_EQ(t[k], docs[d].ids[k]);
        EXPECT_EQ(m[k], counts(docs[d], k) ? 1 : 0);
        loss += counts(docs[d], k);
      }
      tokens += n;
      if (n >= 3) {  // a middle slice
        std::vector<int64_t> mid(n - 2);
        s->read(d, 1, n - 1, mid.data(), nullptr);
        EXPECT_EQ(mid[0], docs[d].ids[1]);
      }
    }
    EXPECT_EQ(s->num_tokens(), tokens);
    int64_t listed = 0;
    for (const auto& i : shards_) {
      listed += i.loss_tokens;
      EXPECT_EQ(i.xxh3, file_xxh3(dir_ / i.file));
      EXPECT_EQ(i.bytes, fs::file_size(dir_ / i.file));
    }
    EXPECT_EQ(listed, loss);
  }
}

TEST_F(DocumentsTest, AShardChangedAfterItsManifestIsRefusedNamingIt) {
  auto docs = make_docs(10, 20, 100, 2);
  store(docs, 10, 100);
  auto info = shards_;
  fs::resize_file(dir_ / info[0].file, info[0].bytes - 3);
  try {
    DocumentStore::open(dir_, info);
    FAIL() << "a truncated shard opened";
  } catch (const fsdpp::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(info[0].file), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("prepare the data again"), std::string::npos) << e.what();
  }
  fs::remove(dir_ / info[0].file);
  EXPECT_THROW(DocumentStore::open(dir_, info), fsdpp::ConfigError);
}

TEST_F(DocumentsTest, OneDocumentARowSplitsOrTruncatesLongOnes) {
  const std::vector<int64_t> lengths = {5, 1, 12, 9, 10};  // T = 4: inputs are length - 1
  RowPlan split(lengths, {.seq_len = 4});
  // 4 | (none) | 4 4 3 | 4 4 | 4 4 1
  EXPECT_EQ(split.num_rows(), 1 + 3 + 2 + 3);
  EXPECT_EQ(split.split_documents(), 3);
  EXPECT_EQ(split.row(1)[0], (RowPiece{2, 0, 4}));
  EXPECT_EQ(split.row(3)[0], (RowPiece{2, 8, 11}));
  RowPlan cut(lengths, {.seq_len = 4, .long_documents = LongDocuments::TRUNCATE});
  EXPECT_EQ(cut.num_rows(), 4);
  EXPECT_EQ(cut.truncated_documents(), 3);
  EXPECT_EQ(cut.dropped_tokens(), (11 - 4) + (8 - 4) + (9 - 4));
}

TEST_F(DocumentsTest, BestFitDecreasingFillsRowsWithoutCuttingDocuments) {
  std::vector<int64_t> lengths;
  std::mt19937 rng(3);
  for (int i = 0; i < 500; ++i) lengths.push_back(2 + rng() % 60);
  const int64_t T = 64;
  RowPlan plan(lengths, {.seq_len = T, .packing = true});
  std::set<int64_t> docs;
  int64_t filled = 0;
  for (int64_t r = 0; r < plan.num_rows(); ++r) {
    int64_t used = 0;
    for (const auto& p : plan.row(r)) {
      EXPECT_EQ(p.begin, 0);
      EXPECT_EQ(p.end, lengths[p.doc] - 1) << "a document is whole in its row";
      EXPECT_TRUE(docs.insert(p.doc).second);
      used += p.end - p.begin;
    }
    EXPECT_LE(used, T);
    filled += used;
  }
  EXPECT_EQ(docs.size(), lengths.size());
  EXPECT_EQ(filled, plan.filled_positions());
  // Best fit decreasing stays within a few rows of the tokens' lower bound.
  const int64_t lower = (filled + T - 1) / T;
  EXPECT_LE(plan.num_rows(), lower + lower / 50 + 1) << filled << " positions";
  // The same lengths give the same plan.
  RowPlan again(lengths, {.seq_len = T, .packing = true});
  ASSERT_EQ(again.num_rows(), plan.num_rows());
  for (int64_t r = 0; r < plan.num_rows(); ++r) {
    EXPECT_TRUE(std::ranges::equal(again.row(r), plan.row(r)));
  }
}

TEST_F(DocumentsTest, EveryTargetOnceInEveryLayout) {
  const int64_t vocab = 500, T = 16;
  const auto docs = make_docs(120, 50, vocab, 4);
  auto s = store(docs, 40, vocab);
  const auto expected = all_targets(docs);
  struct Case {
    const char* name;
    RowPlanOptions plan;
  };
  const std::vector<Case> cases = {
      {"rows, split", {.seq_len = T}},
      {"bfd, split, padding free", {.seq_len = T, .packing = true, .padding_free = true}},
      {"bfd, split", {.seq_len = T, .packing = true}},
      {"wrapped, padding free",
       {.seq_len = T, .packing = true, .strategy = PackingStrategy::WRAPPED, .padding_free = true}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    DocumentSampler sampler(s, {0, s->num_documents()}, c.plan, {});
    const auto seen = check_rows(docs, sampler, T, c.plan.padding_free);
    EXPECT_EQ(seen, expected);
  }
}

TEST_F(DocumentsTest, TheWrappedStreamPredictsAcrossDocumentsAndRows) {
  const int64_t vocab = 500, T = 8;
  std::vector<Doc> docs = {{{1, 2, 3}, {}}, {{4, 5, 6, 7, 8, 9, 10}, {}}, {{11, 12}, {}}};
  auto s = store(docs, 2, vocab);
  DocumentSampler sampler(s, {0, 3}, {.seq_len = T, .packing = true, .strategy = PackingStrategy::WRAPPED}, {});
  ASSERT_EQ(sampler.plan().num_rows(), 2);  // 12 tokens in rows of 8
  const auto b = sampler.load_batch({0, 1});
  EXPECT_TRUE(at::equal(b.inputs[0], torch::tensor({1, 2, 3, 4, 5, 6, 7, 8}, at::kLong)));
  EXPECT_TRUE(at::equal(b.targets[0], torch::tensor({2, 3, 4, 5, 6, 7, 8, 9}, at::kLong)));
  EXPECT_TRUE(at::equal(b.inputs[1], torch::tensor({9, 10, 11, 12, 0, 0, 0, 0}, at::kLong)));
  EXPECT_TRUE(at::equal(b.targets[1], torch::tensor({10, 11, 12, -100, -100, -100, -100, -100}, at::kLong)));
  EXPECT_FALSE(b.positions.defined());
}

TEST_F(DocumentsTest, ShuffledByEpochSplitOverRanksAndResumable) {
  const int64_t vocab = 500, T = 16;
  const auto docs = make_docs(90, 14, vocab, 5);
  auto s = store(docs, 30, vocab);
  const RowPlanOptions plan{.seq_len = T};
  std::multiset<int64_t> epoch0;
  int64_t rows = 0;
  for (int rank = 0; rank < 3; ++rank) {
    DocumentSampler r(s, {0, 90}, plan, {.share = {.rank = rank, .world_size = 3, .seed = 9}});
    for (int64_t row : r.rows(0)) epoch0.insert(row);
    rows = r.plan().num_rows();
    EXPECT_NE(r.rows(0), r.rows(1)) << "each epoch its own order";
  }
  EXPECT_EQ(static_cast<int64_t>(epoch0.size()), rows / 3 * 3);
  EXPECT_EQ(std::set<int64_t>(epoch0.begin(), epoch0.end()).size(), epoch0.size());
  // A resume at the state after 7 batches gives the batches an uninterrupted run gives.
  const DocumentSamplerOptions o{.share = {.rank = 1, .world_size = 3, .seed = 9}};
  DocumentSampler run(s, {0, 90}, plan, o), resumed(s, {0, 90}, plan, o);
  for (int i = 0; i < 7; ++i) run.plan_batch(4);
  resumed.load_state(run.state());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(resumed.plan_batch(4), run.plan_batch(4));
  // Too few rows for the ranks is refused before any batch.
  EXPECT_THROW(DocumentSampler(s, {0, 2}, plan, {.share = {.rank = 0, .world_size = 3}}), fsdpp::ConfigError);
}

TEST_F(DocumentsTest, ARangeOfDocumentsIsPlannedAlone) {
  const int64_t vocab = 500, T = 16;
  const auto docs = make_docs(60, 20, vocab, 6);
  auto s = store(docs, 25, vocab);
  DocumentSampler val(s, {50, 60}, {.seq_len = T}, {.share = {.shuffle = false}});
  std::vector<Doc> tail(docs.begin() + 50, docs.end());
  const auto seen = check_rows(tail, val, T, false);
  EXPECT_EQ(seen, all_targets(tail));
}

namespace {

// Records 0 .. n-1; record i makes a document of (i % 7) + 1 tokens, every 10th is skipped as
// empty, every 4th has its first token masked out.
PreparedDocument make_doc(const int64_t& i) {
  PreparedDocument d;
  if (i % 10 == 9) {
    d.skipped = "empty text";
    return d;
  }
  for (int64_t k = 0; k <= i % 7; ++k) d.ids.push_back(static_cast<int32_t>((i * 13 + k) % 300));
  if (i % 4 == 0) {
    d.mask.assign(d.ids.size(), 1);
    d.mask[0] = 0;
  }
  return d;
}

std::function<bool(int64_t&)> counter(int64_t n, int64_t fail_at = -1) {
  auto next = std::make_shared<int64_t>(0);
  return [=](int64_t& r) {
    if (*next == fail_at) throw std::runtime_error("interrupted");
    if (*next >= n) return false;
    r = (*next)++;
    return true;
  };
}

PrepareSpec spec_of(int64_t records_per_shard) {
  return {.sources = {{"/data/x.jsonl", 10, 0x1234}}, .tokenizer = "test", .vocab_size = 300,
          .options = "text_field=text", .records_per_shard = records_per_shard};
}

}  // namespace

TEST_F(DocumentsTest, PreparedShardsAreTheSameOnAnyNumberOfThreads) {
  const std::function<PreparedDocument(const int64_t&)> make = make_doc;
  const auto one = prepare_documents<int64_t>(dir_ / "one", spec_of(100), counter(1234), make, {.threads = 1});
  const auto four = prepare_documents<int64_t>(dir_ / "four", spec_of(100), counter(1234), make, {.threads = 4});
  ASSERT_TRUE(one.complete);
  EXPECT_EQ(one.records, 1234);
  EXPECT_EQ(one.skipped().at("empty text"), 123);
  EXPECT_EQ(one.documents(), 1234 - 123);
  ASSERT_EQ(one.shards.size(), 13u);
  for (size_t k = 0; k < one.shards.size(); ++k) EXPECT_EQ(one.shards[k].xxh3, four.shards[k].xxh3);
  // The store holds the documents in record order, masks included.
  const auto read = read_manifest(dir_ / "four");
  ASSERT_TRUE(read.has_value());
  const auto store = open_prepared(dir_ / "four", *read);
  int64_t doc = 0;
  for (int64_t i = 0; i < 1234; ++i) {
    const auto d = make_doc(i);
    if (!d.skipped.empty()) continue;
    std::vector<int64_t> t(d.ids.size());
    std::vector<uint8_t> m(d.ids.size());
    store.read(doc, 0, static_cast<int64_t>(t.size()), t.data(), m.data());
    for (size_t k = 0; k < t.size(); ++k) {
      ASSERT_EQ(t[k], d.ids[k]) << "record " << i;
      ASSERT_EQ(m[k], d.mask.empty() ? 1 : d.mask[k]) << "record " << i;
    }
    ++doc;
  }
  EXPECT_EQ(doc, store.num_documents());
}

TEST_F(DocumentsTest, AnInterruptedPreparationResumesAtItsFirstUnfinishedShard) {
  const std::function<PreparedDocument(const int64_t&)> make = make_doc;
  const auto whole = prepare_documents<int64_t>(dir_ / "whole", spec_of(100), counter(1000), make, {});
  EXPECT_THROW(prepare_documents<int64_t>(dir_ / "cut", spec_of(100), counter(1000, 555), make, {}),
               std::runtime_error);
  const auto partial = read_manifest(dir_ / "cut");
  ASSERT_TRUE(partial.has_value());
  EXPECT_FALSE(partial->complete);
  EXPECT_EQ(partial->shards.size(), 5u);  // records 0..499 were written
  EXPECT_THROW(open_prepared(dir_ / "cut", *partial), fsdpp::ConfigError);
  // The resume makes only the shards after those (a maker that fails on an earlier record
  // shows it is not called for them), and ends with the uninterrupted run's bytes.
  const std::function<PreparedDocument(const int64_t&)> late_only = [](const int64_t& i) {
    if (i < 500) throw std::logic_error("record made again");
    return make_doc(i);
  };
  const auto resumed = prepare_documents<int64_t>(dir_ / "cut", spec_of(100), counter(1000), late_only, {});
  ASSERT_EQ(resumed.shards.size(), whole.shards.size());
  for (size_t k = 0; k < whole.shards.size(); ++k) EXPECT_EQ(resumed.shards[k].xxh3, whole.shards[k].xxh3);
  EXPECT_EQ(resumed.skipped(), whole.skipped());
  // A shard damaged since is made again; another spec starts over.
  {
    std::fstream f(dir_ / "cut" / "shard-00007.docs", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');
  }
  const std::function<PreparedDocument(const int64_t&)> from7 = [](const int64_t& i) {
    if (i < 700) throw std::logic_error("record made again");
    return make_doc(i);
  };
  const auto mended = prepare_documents<int64_t>(dir_ / "cut", spec_of(100), counter(1000), from7, {});
  EXPECT_EQ(mended.shards[7].xxh3, whole.shards[7].xxh3);
  EXPECT_EQ(mended.skipped(), whole.skipped());
  auto other = spec_of(100);
  other.options = "text_field=content";
  EXPECT_THROW(prepare_documents<int64_t>(dir_ / "cut", other, counter(1000), late_only, {}), std::logic_error);
}

TEST_F(DocumentsTest, APreparationWithoutDocumentsIsRefused) {
  const std::function<PreparedDocument(const int64_t&)> none = [](const int64_t&) {
    return PreparedDocument{{}, {}, "empty text"};
  };
  try {
    prepare_documents<int64_t>(dir_ / "p", spec_of(100), counter(30), none, {});
    FAIL();
  } catch (const fsdpp::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("30 empty text"), std::string::npos) << e.what();
  }
}
