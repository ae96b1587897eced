// A weighted mixture of sources (mixture_sampler.h, mixture_reader.h): the same draws for the same
// seed anywhere, the weights honoured within the stated binomial tolerance, and
// datasets.interleave_datasets' three stopping strategies.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "data_files_fixture.h"
#include "fsdpp/data/mixture_reader.h"
#include "fsdpp/data/mixture_sampler.h"

using namespace fsdpp::data;
using fsdpp_test::config_error;
using fsdpp_test::expect_message;

namespace {

class Mixture : public fsdpp_test::DataFilesTest {
 protected:
  // A JSON Lines source of n examples "<name><i>".
  std::string source(const std::string& name, int n) {
    std::string lines;
    for (int i = 0; i < n; ++i) lines += fmt::format("{{\"text\": \"{}{}\"}}\n", name, i);
    return write(name + ".jsonl", lines);
  }
};

TEST(MixtureSampler, TheSameSeedGivesTheSameDrawsAndAnyDrawCanBeLookedUp) {
  MixtureSampler a({2, 1, 1}, 7), b({2, 1, 1}, 7), c({2, 1, 1}, 8);
  std::vector<size_t> first, again;
  int differ = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    first.push_back(a.source_at(i));
    differ += a.source_at(i) != c.source_at(i);
  }
  for (int64_t i = 999; i >= 0; --i) again.insert(again.begin(), b.source_at(i));  // backwards
  EXPECT_EQ(first, again);
  EXPECT_GT(differ, 400);  // another seed, another sequence (about 5/8 of draws differ)
  EXPECT_DOUBLE_EQ(a.probabilities()[0], 0.5);
  EXPECT_DOUBLE_EQ(a.probabilities()[2], 0.25);
}

TEST(MixtureSampler, TheWeightsHoldWithinFourBinomialSigmas) {
  const std::vector<double> weights = {0.6, 0.3, 0.1};
  constexpr int64_t n = 100000;
  for (uint64_t seed : {0ULL, 1ULL, 42ULL, 123456789ULL}) {
    MixtureSampler mix(weights, seed);
    std::vector<int64_t> counts(3, 0);
    for (int64_t i = 0; i < n; ++i) ++counts[mix.source_at(i)];
    for (size_t k = 0; k < 3; ++k) {
      const double p = weights[k], share = static_cast<double>(counts[k]) / n;
      EXPECT_NEAR(share, p, 4 * std::sqrt(p * (1 - p) / n)) << "seed " << seed << " source " << k;
    }
    // And in every window of 10 000 draws (a stretch of training), within 4 sigmas of that window.
    for (int64_t start = 0; start < n; start += 10000) {
      int64_t first = 0;
      for (int64_t i = start; i < start + 10000; ++i) first += mix.source_at(i) == 0;
      EXPECT_NEAR(first / 10000.0, 0.6, 4 * std::sqrt(0.6 * 0.4 / 10000)) << "seed " << seed << " at " << start;
    }
  }
}

TEST(MixtureSampler, BadWeightsAreRefused) {
  expect_message(config_error([] { MixtureSampler({1, 0}, 0); }), {"data.mixture[1].weight", "> 0"});
  expect_message(config_error([] { MixtureSampler({-1}, 0); }), {"data.mixture[0].weight"});
  expect_message(config_error([] { MixtureSampler({NAN}, 0); }), {"finite"});
  expect_message(config_error([] { MixtureSampler({}, 0); }), {"at least one source"});
  expect_message(config_error([] { stopping_strategy_from_name("longest"); }), {"longest", "all_exhausted"});
}

TEST_F(Mixture, FirstExhaustedEndsAfterTheLastExampleOfTheFirstSourceToEnd) {
  const auto a = source("a", 3), b = source("b", 1000);
  MixtureReader mix({{a, 1}, {b, 1}}, {.seed = 3});
  Example ex;
  size_t s;
  std::vector<std::string> taken;
  while (mix.next(ex, s)) taken.push_back(ex.text);
  EXPECT_EQ(taken.back(), "a2");  // a's last example is taken, then the mixture ends
  EXPECT_EQ(mix.examples(0), 3);
  EXPECT_EQ(mix.examples(1), static_cast<int64_t>(taken.size()) - 3);
  // Each source in its own order.
  int next_b = 0;
  for (const auto& t : taken) {
    if (t[0] == 'b') EXPECT_EQ(t, fmt::format("b{}", next_b++));
  }
  // The same seed, the same interleaving.
  MixtureReader again({{a, 1}, {b, 1}}, {.seed = 3});
  for (const auto& t : taken) {
    ASSERT_TRUE(again.next(ex, s));
    EXPECT_EQ(ex.text, t);
  }
}

TEST_F(Mixture, AllExhaustedOversamplesUntilEverySourceEndedOnce) {
  const auto a = source("a", 5), b = source("b", 40);
  MixtureReader mix({{a, 1}, {b, 1}}, {.seed = 11, .stopping = StoppingStrategy::ALL_EXHAUSTED});
  Example ex;
  size_t s;
  std::map<std::string, int> seen;
  while (mix.next(ex, s)) ++seen[ex.text];
  for (int i = 0; i < 40; ++i) EXPECT_GE(seen[fmt::format("b{}", i)], 1) << i;
  EXPECT_EQ(mix.passes(1), 1);
  EXPECT_GT(mix.passes(0), 2);  // the small source went round several times
  EXPECT_EQ(mix.examples(0), seen["a0"] + seen["a1"] + seen["a2"] + seen["a3"] + seen["a4"]);
}

TEST_F(Mixture, WithoutReplacementTakesEveryExampleOnce) {
  const auto a = source("a", 30), b = source("b", 70), c = source("c", 5);
  MixtureReader mix({{a, 5}, {b, 1}, {c, 1}},
                    {.seed = 5, .stopping = StoppingStrategy::ALL_EXHAUSTED_WITHOUT_REPLACEMENT});
  Example ex;
  size_t s;
  std::map<std::string, int> seen;
  while (mix.next(ex, s)) ++seen[ex.text];
  EXPECT_EQ(seen.size(), 105u);
  for (const auto& [text, n] : seen) EXPECT_EQ(n, 1) << text;
}

TEST_F(Mixture, SourcesAreCheckedWhenTheMixtureIsMade) {
  const auto a = source("a", 2);
  write("corpus.txt", "plain text\n");
  expect_message(config_error([&] { MixtureReader({{a, 1}, {(dir_ / "corpus.txt").string(), 1}}); }),
                 {"data.mixture[1]", "plain text"});
  expect_message(config_error([&] { MixtureReader({{a, 1}, {(dir_ / "nope-*.jsonl").string(), 1}}); }),
                 {"data.mixture[1]", "matches no file"});
  const auto empty = write("empty.jsonl", "");
  MixtureReader mix({{a, 1}, {empty, 1}}, {.seed = 1});
  Example ex;
  size_t s;
  expect_message(config_error([&] { while (mix.next(ex, s)) {} }), {"empty.jsonl", "no records"});
}

}  // namespace
