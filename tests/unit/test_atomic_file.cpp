// AtomicFile: a reader sees the old file or the whole new one, and nothing is left behind.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "fsdpp/common/atomic_file.h"
#include "fsdpp/common/error.h"
#include "fsdpp/state/atomic_dir.h"

namespace fs = std::filesystem;
using fsdpp::AtomicFile;

namespace {

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           fmt::format("fsdpp_test_atomic_file_{}_{}", ::getpid(), info->name());
    fsdpp::state::remove_tree(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fsdpp::state::remove_tree(dir_); }

  static std::string read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  int entries() const {
    int n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++n;
    return n;
  }

  fs::path dir_;
};

TEST_F(AtomicFileTest, WritesAndReplacesWholeFiles) {
  const auto path = dir_ / "config.yaml";
  fsdpp::write_file_atomically(path, "first\n");
  EXPECT_EQ(read(path), "first\n");
  fsdpp::write_file_atomically(path, "second, longer\n");
  EXPECT_EQ(read(path), "second, longer\n");
  fsdpp::write_file_atomically(path, "");
  EXPECT_EQ(read(path), "");
  EXPECT_EQ(entries(), 1);  // no temporary file left
}

TEST_F(AtomicFileTest, NothingAppearsWithoutCommit) {
  const auto path = dir_ / "trace.json";
  fsdpp::write_file_atomically(path, "old");
  {
    AtomicFile f(path, "trace");
    f.write("new, never committed");
    EXPECT_EQ(f.tmp_path().parent_path(), dir_);
    EXPECT_TRUE(fs::exists(f.tmp_path()));
    EXPECT_EQ(read(path), "old");  // readers see the old file while the new one is written
  }
  EXPECT_EQ(read(path), "old");
  EXPECT_EQ(entries(), 1);
}

TEST_F(AtomicFileTest, PwriteFillsInAHeaderAfterTheBody) {
  const auto path = dir_ / "tokens";
  AtomicFile f(path, "data");
  f.write("????");
  f.write("body");
  f.pwrite("HEAD", 4, 0);
  f.write("+tail");
  f.commit();
  EXPECT_TRUE(f.committed());
  EXPECT_EQ(read(path), "HEADbody+tail");
  EXPECT_THROW(f.write("late"), fsdpp::Error);
}

TEST_F(AtomicFileTest, ConcurrentWritersOfOneFileUseTheirOwnTemporaryFiles) {
  const auto path = dir_ / "cache";
  AtomicFile a(path, "data");
  AtomicFile b(path, "data");
  EXPECT_NE(a.tmp_path(), b.tmp_path());
  a.write("same content");
  b.write("same content");
  b.commit();
  a.commit();  // the last rename wins
  EXPECT_EQ(read(path), "same content");
  EXPECT_EQ(entries(), 1);
}

TEST_F(AtomicFileTest, ErrorsNameThePathAndTheReason) {
  const auto path = dir_ / "missing" / "file.txt";
  try {
    fsdpp::write_file_atomically(path, "x", "train");
    FAIL() << "no error for a missing directory";
  } catch (const fsdpp::Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("[train] cannot create '", 0), 0u) << what;
    EXPECT_NE(what.find(path.string()), std::string::npos) << what;
    EXPECT_NE(what.find("No such file or directory"), std::string::npos) << what;
  }
}

// The temporary names are those state::cleanup_stale_tmp() recognises as a killed writer's.
TEST_F(AtomicFileTest, TemporaryFilesOfKilledWritersAreCleanedUp) {
  const auto path = dir_ / "model.safetensors";
  fs::path tmp;
  {
    AtomicFile f(path);
    tmp = f.tmp_path();
    fs::copy_file(tmp, dir_ / "copy");  // what a SIGKILL between write and commit leaves
  }
  fs::rename(dir_ / "copy", tmp);
  ASSERT_TRUE(fs::exists(tmp));
  fsdpp::state::cleanup_stale_tmp(dir_);
  EXPECT_FALSE(fs::exists(tmp));
}

}  // namespace
