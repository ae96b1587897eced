// The timeline recorder (include/fsdpp/dist/trace.h): step lists, recording only in profiled
// steps, the file's shape, and auto_step's counting for programs without a trainer.
// tests/train/trace.sh checks a trainer's traces against its counters and metrics.jsonl.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "fsdpp/common/error.h"
#include "fsdpp/dist/trace.h"

using fsdpp::dist::TraceOptions;
using fsdpp::dist::TraceRecorder;
using fsdpp::dist::TraceSpan;

namespace {

// Not std::filesystem::remove_all: libtorch.so exports its own copy of it, which crashes.
void remove_tree(const std::filesystem::path& p) {
  std::error_code ec;
  if (std::filesystem::is_directory(std::filesystem::symlink_status(p, ec))) {
    for (const auto& e : std::filesystem::directory_iterator(p)) remove_tree(e.path());
  }
  std::filesystem::remove(p, ec);
}

std::filesystem::path temp_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() /
           ("fsdpp-trace-" + name + "-" + std::to_string(::getpid()));
  remove_tree(d);
  return d;
}

std::string read(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (auto i = text.find(part); i != std::string::npos; i = text.find(part, i + 1)) ++n;
  return n;
}

}  // namespace

TEST(TraceRecorder, ParsesStepLists) {
  EXPECT_EQ(TraceRecorder::parse_steps("10,11", "x"), (std::vector<int64_t>{10, 11}));
  EXPECT_EQ(TraceRecorder::parse_steps(" 3-5, 9 ", "x"), (std::vector<int64_t>{3, 4, 5, 9}));
  EXPECT_TRUE(TraceRecorder::parse_steps("", "x").empty());
  for (const char* bad : {"a", "0", "5-3", "-2", "1,,x"}) {
    try {
      TraceRecorder::parse_steps(bad, "FSDPP_PROFILE_STEPS");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const fsdpp::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("[trace] FSDPP_PROFILE_STEPS="), std::string::npos)
          << e.what();
    }
  }
}

TEST(TraceRecorder, RecordsOnlyProfiledStepsAndWritesAfterTheLast) {
  const auto dir = temp_dir("steps");
  TraceRecorder trace(TraceOptions{3, {2, 3}, dir});
  for (int64_t step = 1; step <= 4; ++step) {
    trace.begin_step(step);
    EXPECT_EQ(trace.active(), step == 2 || step == 3);
    {
      TraceSpan outer(&trace, "forward");
      TraceSpan inner(&trace, "inner");
    }
    trace.complete(trace.named_track("comm default"), "all_gather", TraceRecorder::Clock::now(),
                   TraceRecorder::Clock::now(), {{"bytes_sent", int64_t{8}}, {"module", "a\"b"}});
    // complete() records whatever it is given: callers test active() first.
    if (step == 2) EXPECT_FALSE(std::filesystem::exists(trace.path()));
    trace.end_step(step);
  }
  ASSERT_TRUE(std::filesystem::exists(dir / "rank3.trace.json"));
  const std::string text = read(dir / "rank3.trace.json");
  EXPECT_EQ(count(text, "\"name\": \"step 2\""), 1u);
  EXPECT_EQ(count(text, "\"name\": \"step 3\""), 1u);
  EXPECT_EQ(count(text, "\"name\": \"step 1\""), 0u);
  EXPECT_EQ(count(text, "\"name\": \"forward\""), 2u);
  EXPECT_EQ(count(text, "\"name\": \"inner\""), 2u);
  EXPECT_NE(text.find("\"name\": \"comm default\""), std::string::npos);
  EXPECT_NE(text.find("\"name\": \"main\""), std::string::npos);
  EXPECT_NE(text.find("\"module\": \"a\\\"b\""), std::string::npos);
  EXPECT_NE(text.find("\"pid\": 3"), std::string::npos);
  EXPECT_NE(text.find("\"displayTimeUnit\": \"ms\""), std::string::npos);
  remove_tree(dir);
}

TEST(TraceRecorder, AutoStepCountsTrainingForwardsUntilDriven) {
  const auto dir = temp_dir("auto");
  {
    TraceRecorder trace(TraceOptions{0, {2}, dir});
    trace.auto_step();  // step 1
    EXPECT_FALSE(trace.active());
    trace.auto_step();  // step 2
    EXPECT_TRUE(trace.active());
    { TraceSpan s(&trace, "work"); }
    trace.auto_step();  // step 3 ends step 2 and writes
    EXPECT_FALSE(trace.active());
    EXPECT_TRUE(std::filesystem::exists(dir / "rank0.trace.json"));
    trace.begin_step(2);  // driven from now on: auto_step does nothing
    trace.auto_step();
    EXPECT_TRUE(trace.active());
  }  // the destructor writes the unfinished step
  EXPECT_EQ(count(read(dir / "rank0.trace.json"), "\"name\": \"work\""), 1u);
  remove_tree(dir);
}
