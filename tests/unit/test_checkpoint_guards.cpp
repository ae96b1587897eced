// What the offline checkpoint tools (fsdpp-ckpt's library half) refuse: an output that exists
// (unless overwriting is asked for), an output inside its input or holding it (always), a world
// size that cannot be meant, and an index.json that is not what fsdpp writes (an unknown
// version, a data file outside the checkpoint, a directory or a FIFO where a file belongs).
// Every refusal is a CheckpointError naming the path, and leaves the input byte for byte as it
// was.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <future>
#include <sstream>

#include "fsdpp/common/error.h"
#include "fsdpp/state/atomic_dir.h"
#include "fsdpp/state/consolidate.h"
#include "fsdpp/state/output_path.h"

using namespace fsdpp;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
}

// Every file's bytes under `dir`, by relative path: what "left as it was" is checked against.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) files[fs::relative(e.path(), dir).string()] = slurp(e.path());
  }
  return files;
}

// The message of the CheckpointError `fn` throws ("" and a test failure when it throws none).
template <typename F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const CheckpointError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no CheckpointError";
  return "";
}

class CheckpointGuards : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            fmt::format("fsdpp-guards-{}-{}", ::getpid(),
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    state::remove_tree(root_);
    fs::create_directories(root_);
    ckpt_ = root_ / "ckpt";
    torch::manual_seed(0);
    state::write_full_checkpoint(ckpt_, {{"w", torch::randn({6, 4})}, {"b", torch::randn({4})}});
  }
  void TearDown() override { state::remove_tree(root_); }

  fs::path root_, ckpt_;
};

TEST_F(CheckpointGuards, ConsolidateRefusesAnExistingOutputUnlessOverwrite) {
  const fs::path out = root_ / "model.safetensors";
  write_text(out, "keep me");
  const auto msg = error_of([&] { state::consolidate_checkpoint(ckpt_, out); });
  EXPECT_NE(msg.find("[state] consolidate: the output '" + out.string() + "' exists"),
            std::string::npos) << msg;
  EXPECT_NE(msg.find("--force"), std::string::npos) << msg;
  EXPECT_EQ(slurp(out), "keep me");
  EXPECT_EQ(state::consolidate_checkpoint(ckpt_, out, /*overwrite=*/true), 2);
  EXPECT_NE(slurp(out), "keep me");
}

TEST_F(CheckpointGuards, NoToolWritesInsideItsInputEvenWhenOverwriting) {
  const auto before = snapshot(ckpt_);
  // The checkpoint's own data file, spelled directly, through "..", and through a symlink.
  fs::create_symlink(ckpt_ / "model.safetensors", root_ / "link.safetensors");
  for (const fs::path& out : {ckpt_ / "model.safetensors", ckpt_ / ".." / "ckpt" / "model.safetensors",
                              root_ / "link.safetensors", ckpt_ / "new.safetensors"}) {
    const auto msg = error_of([&] { state::consolidate_checkpoint(ckpt_, out, /*overwrite=*/true); });
    EXPECT_NE(msg.find("[state] consolidate: the output '" + out.string() + "' is"), std::string::npos) << msg;
    EXPECT_NE(msg.find("the input '" + ckpt_.string() + "'"), std::string::npos) << msg;
  }
  // reshard into itself, into a directory inside it, and over the directory that holds it.
  for (const fs::path& out : {ckpt_, ckpt_ / "sub", root_}) {
    const auto msg = error_of([&] { state::reshard_checkpoint(ckpt_, out, 2, /*overwrite=*/true); });
    EXPECT_NE(msg.find("[state] reshard:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("refused even with --force"), std::string::npos) << msg;
  }
  EXPECT_EQ(snapshot(ckpt_), before);
  EXPECT_FALSE(fs::exists(ckpt_ / "sub"));
  // Nothing was left beside the outputs either (no temporary directories or files).
  for (const auto& e : fs::directory_iterator(root_)) {
    EXPECT_TRUE(e.path() == ckpt_ || e.path() == root_ / "link.safetensors") << e.path();
  }
}

TEST_F(CheckpointGuards, OutputOfTheOtherKindIsNeverReplaced) {
  write_text(root_ / "file", "a file");
  const auto msg = error_of([&] {
    state::check_output_path("export-hf", root_ / "file", {ckpt_}, state::OutputKind::kDirectory, true);
  });
  EXPECT_NE(msg.find("'" + (root_ / "file").string() + "' exists and is not a directory"), std::string::npos)
      << msg;
  fs::create_directory(root_ / "dir");
  const auto msg2 = error_of([&] { state::consolidate_checkpoint(ckpt_, root_ / "dir", true); });
  EXPECT_NE(msg2.find("is a directory"), std::string::npos) << msg2;
  EXPECT_EQ(slurp(root_ / "file"), "a file");
}

TEST_F(CheckpointGuards, ReshardRefusesAnExistingOutputUnlessOverwrite) {
  fs::create_directory(root_ / "old");
  write_text(root_ / "old" / "x", "old");
  const auto msg = error_of([&] { state::reshard_checkpoint(ckpt_, root_ / "old", 2); });
  EXPECT_NE(msg.find("the output '" + (root_ / "old").string() + "' exists"), std::string::npos) << msg;
  EXPECT_TRUE(fs::exists(root_ / "old" / "x"));
  EXPECT_EQ(state::reshard_checkpoint(ckpt_, root_ / "old", 2, /*overwrite=*/true).files, 2);
  EXPECT_FALSE(fs::exists(root_ / "old" / "x"));
  EXPECT_TRUE(fs::exists(root_ / "old" / "shard-1.safetensors"));
}

TEST_F(CheckpointGuards, PathWithinComparesComponentsAfterResolving) {
  EXPECT_TRUE(state::path_is_within(root_ / "a" / "b", root_ / "a"));
  EXPECT_TRUE(state::path_is_within(root_ / "a/", root_ / "a"));
  EXPECT_TRUE(state::path_is_within(root_ / "a" / ".." / "a" / "x", root_ / "a"));
  EXPECT_FALSE(state::path_is_within(root_ / "ab", root_ / "a"));
  EXPECT_FALSE(state::path_is_within(root_, root_ / "a"));
}

TEST_F(CheckpointGuards, ReshardWorldSizeIsBoundedBeforeAnythingIsSized) {
  // Used to end in std::bad_alloc (a vector of 10^11 writers).
  const auto msg = error_of([&] { state::reshard_checkpoint(ckpt_, root_ / "out", 99999999999); });
  EXPECT_NE(msg.find("between 1 and 65536; got 99999999999"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(root_ / "out"));
  EXPECT_EQ(state::kMaxReshardWorldSize, 65536);
}

TEST_F(CheckpointGuards, UnknownIndexVersionIsRefusedNamingBoth) {
  std::string index = slurp(ckpt_ / "index.json");
  const auto at = index.find("\"version\": 1");
  ASSERT_NE(at, std::string::npos) << index;
  index.replace(at, 12, "\"version\": 99");
  write_text(ckpt_ / "index.json", index);
  const auto msg = error_of([&] { state::describe_checkpoint(ckpt_); });
  EXPECT_NE(msg.find("'" + (ckpt_ / "index.json").string() + "' has version 99"), std::string::npos) << msg;
  EXPECT_NE(msg.find("reads version 1 only"), std::string::npos) << msg;
}

TEST_F(CheckpointGuards, DataFileOutsideTheCheckpointIsRefused) {
  // A copy of the checkpoint beside it: a piece path may not reach it.
  fs::create_directories(root_ / "other");
  fs::copy_file(ckpt_ / "model.safetensors", root_ / "other" / "model.safetensors");
  const std::string good = slurp(ckpt_ / "index.json");
  for (const std::string& name :
       {std::string("../other/model.safetensors"), (root_ / "other" / "model.safetensors").string(),
        std::string("sub/../../other/model.safetensors")}) {
    std::string index = good;
    for (size_t at; (at = index.find("\"model.safetensors\"")) != std::string::npos;) {
      index.replace(at, 19, "\"" + name + "\"");
    }
    write_text(ckpt_ / "index.json", index);
    const auto msg = error_of([&] { state::describe_checkpoint(ckpt_); });
    EXPECT_NE(msg.find("names the data file '" + name + "'; expected a file name inside the checkpoint"),
              std::string::npos) << msg;
    const auto msg2 = error_of([&] { state::consolidate_checkpoint(ckpt_, root_ / "c.safetensors"); });
    EXPECT_NE(msg2.find("'" + name + "'"), std::string::npos) << msg2;
  }
}

TEST_F(CheckpointGuards, DirectoryInPlaceOfIndexIsNamed) {
  fs::remove(ckpt_ / "index.json");
  fs::create_directory(ckpt_ / "index.json");
  const auto msg = error_of([&] { state::describe_checkpoint(ckpt_); });
  EXPECT_NE(msg.find("'" + (ckpt_ / "index.json").string() + "' is a directory; expected a regular file"),
            std::string::npos) << msg;
}

TEST_F(CheckpointGuards, FifoInPlaceOfADataFileIsRefusedWithoutHanging) {
  fs::remove(ckpt_ / "model.safetensors");
  ASSERT_EQ(::mkfifo((ckpt_ / "model.safetensors").c_str(), 0600), 0);
  // Before the fix open(2) blocked here forever waiting for a writer: run it on a thread and
  // give up after 20 s rather than hang the suite.
  auto done = std::async(std::launch::async, [&] {
    return error_of([&] { state::describe_checkpoint(ckpt_); });
  });
  const bool finished = done.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  if (!finished) {  // let the blocked open return, so that the test fails instead of hanging
    const int fd = ::open((ckpt_ / "model.safetensors").c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }
  ASSERT_TRUE(finished) << "reading a checkpoint whose data file is a FIFO hangs";
  const auto msg = done.get();
  EXPECT_NE(msg.find("'" + (ckpt_ / "model.safetensors").string() + "' is not a regular file"),
            std::string::npos) << msg;
}

}  // namespace
