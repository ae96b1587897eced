// The state layer's file formats: safetensors round trips and validation, checksums, and
// AtomicDir's crash safety (including a writer killed with SIGKILL mid-write).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <torch/torch.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "fsdpp/common/error.h"
#include "fsdpp/state/atomic_dir.h"
#include "fsdpp/state/safetensors.h"

using namespace fsdpp::state;
using fsdpp::CheckpointError;
namespace fs = std::filesystem;

namespace {

class StateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           fmt::format("fsdpp_test_state_{}_{}", ::getpid(), info->name());
    remove_tree(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { remove_tree(dir_); }

  std::set<std::string> entries(const fs::path& dir) const {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
    return names;
  }

  fs::path dir_;
};

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

// A raw safetensors file from a header text and a data area, for malformed inputs.
std::string raw_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

// One tensor of each supported dtype, with values that exercise the dtype's range.
std::vector<std::pair<std::string, at::Tensor>> every_dtype() {
  torch::manual_seed(7);
  const auto f = torch::randn({3, 5});
  return {
      {"f32", f},
      {"f16", f.to(torch::kHalf)},
      {"bf16", f.to(torch::kBFloat16)},
      {"f64", torch::randn({2, 2, 2}, torch::kDouble)},
      {"i64", torch::tensor({int64_t{1} << 62, int64_t{-5}, int64_t{0}})},
      {"i32", torch::randint(-1000000, 1000000, {4, 1}, torch::kInt)},
      {"i16", torch::randint(-30000, 30000, {7}, torch::kShort)},
      {"i8", torch::randint(-128, 127, {9}, torch::kChar)},
      {"u8", torch::randint(0, 255, {2, 3}, torch::kByte)},
      {"bool", torch::randint(0, 2, {5}).to(torch::kBool)},
      {"scalar", torch::tensor(3.25)},                              // 0-dim
      {"empty", torch::empty({0, 4}, torch::kFloat)},               // 0 elements
      {"strided", torch::arange(12, torch::kFloat).view({3, 4}).t()},  // not contiguous
  };
}

void expect_same(const at::Tensor& got, const at::Tensor& want, const std::string& name) {
  EXPECT_EQ(got.scalar_type(), want.scalar_type()) << name;
  EXPECT_EQ(got.sizes(), want.sizes()) << name;
  EXPECT_TRUE(torch::equal(got, want)) << name;
}

// ---------------------------------------------------------------------------------------------
// safetensors

TEST_F(StateTest, RoundTripEveryDtypeWithMetadata) {
  const auto tensors = every_dtype();
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"step", "42"}};
  const fs::path file = dir_ / "all.safetensors";
  save_safetensors(file, tensors, meta);
  EXPECT_EQ(entries(dir_), std::set<std::string>{"all.safetensors"});  // no temp file left

  const auto f = SafetensorsFile::open(file);
  EXPECT_EQ(f.metadata(), meta);
  EXPECT_EQ(f.names().size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    ASSERT_TRUE(f.contains(name)) << name;
    EXPECT_EQ(f.info(name).dtype, t.scalar_type()) << name;
    EXPECT_EQ(f.info(name).shape, t.sizes().vec()) << name;
    expect_same(f.get(name), t, name);
    expect_same(f.view(name), t, name);  // every tensor is aligned, so view() never refuses
  }
  EXPECT_EQ(f.info("scalar").shape.size(), 0u);
  EXPECT_THROW(f.get("missing"), CheckpointError);
}

TEST_F(StateTest, LayoutIsAlignedAndNamesFollowFileOrder) {
  const fs::path file = dir_ / "mixed.safetensors";
  save_safetensors(file, {{"flag", torch::ones({3}, torch::kBool)},
                          {"half", torch::ones({3}, torch::kHalf)},
                          {"dbl", torch::ones({3}, torch::kDouble)},
                          {"flt", torch::ones({1}, torch::kFloat)}});
  const auto f = SafetensorsFile::open(file);
  // Largest item size first: the Python writer's rule, which keeps every tensor aligned.
  EXPECT_EQ(f.names(), (std::vector<std::string>{"dbl", "flt", "half", "flag"}));
  for (const auto& name : f.names()) {
    const auto& info = f.info(name);
    EXPECT_EQ(info.data_begin % c10::elementSize(info.dtype), 0u) << name;
  }
  const std::string bytes = read_bytes(file);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
}

TEST_F(StateTest, EmptyFileAndNoMetadata) {
  const fs::path file = dir_ / "none.safetensors";
  save_safetensors(file, {});
  const auto f = SafetensorsFile::open(file);
  EXPECT_TRUE(f.names().empty());
  EXPECT_TRUE(f.metadata().empty());
}

TEST_F(StateTest, ViewOutlivesFileAndNeverWritesTheFile) {
  const fs::path file = dir_ / "v.safetensors";
  save_safetensors(file, {{"w", torch::arange(6, torch::kFloat)}});
  const std::string before = read_bytes(file);
  at::Tensor v;
  {
    const auto f = SafetensorsFile::open(file);
    v = f.view("w");
  }
  EXPECT_TRUE(torch::equal(v, torch::arange(6, torch::kFloat)));  // mapping still alive
  v.mul_(2);  // copy-on-write: allowed, and the file keeps its bytes
  EXPECT_EQ(read_bytes(file), before);
  EXPECT_TRUE(torch::equal(SafetensorsFile::open(file).get("w"), torch::arange(6, torch::kFloat)));
}

// read_rows reads the rows asked for (what a rank loading its shard of a model reads), for any
// dtype and shape, a 0-dim tensor as one row; views of the same tensor are mapped apart (a write
// to one is seen by neither the file nor the other); rows outside the tensor are refused.
TEST_F(StateTest, ReadRowsAndViewsOfOneTensor) {
  const fs::path file = dir_ / "rows.safetensors";
  const auto w = torch::arange(5 * 3 * 2, torch::kFloat).view({5, 3, 2});
  const auto h = torch::arange(7, torch::kInt16);
  const auto s = torch::tensor(2.5, torch::kDouble);
  save_safetensors(file, {{"w", w}, {"h", h}, {"s", s}});
  const auto f = SafetensorsFile::open(file);
  for (int64_t first = 0; first < 5; ++first) {
    for (int64_t rows = 0; first + rows <= 5; ++rows) {
      EXPECT_TRUE(torch::equal(f.read_rows("w", first, rows), w.narrow(0, first, rows))) << first << "+" << rows;
    }
  }
  EXPECT_TRUE(torch::equal(f.read_rows("h", 6, 1), h.narrow(0, 6, 1)));
  EXPECT_TRUE(torch::equal(f.read_rows("s", 0, 1), s.reshape({1})));
  EXPECT_THROW(f.read_rows("w", 4, 2), CheckpointError);
  EXPECT_THROW(f.read_rows("w", -1, 1), CheckpointError);
  EXPECT_THROW(f.read_rows("nope", 0, 1), CheckpointError);
  auto a = f.view("w"), b = f.view("w");
  a.fill_(-1);
  EXPECT_TRUE(torch::equal(b, w));
  EXPECT_TRUE(torch::equal(f.get("w"), w));
}

TEST_F(StateTest, SaveRejectsDuplicatesAndLeavesNothing) {
  const fs::path file = dir_ / "dup.safetensors";
  try {
    save_safetensors(file, {{"a", torch::ones({2})}, {"a", torch::zeros({2})}});
    FAIL() << "expected CheckpointError";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("[state]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'a' is declared twice"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(entries(dir_).empty());
  EXPECT_THROW(save_safetensors(file, {{"c", torch::ones({2}, torch::kComplexFloat)}}),
               CheckpointError);
  EXPECT_THROW(save_safetensors(file, {{"__metadata__", torch::ones({2})}}), CheckpointError);
  EXPECT_TRUE(entries(dir_).empty());
}

TEST_F(StateTest, StreamingWriterBigFile) {
  const fs::path file = dir_ / "big.safetensors";
  torch::manual_seed(3);
  // ~5 MB in all, mixed item sizes, declared in an order the layout will change.
  std::vector<std::pair<std::string, at::Tensor>> tensors = {
      {"emb", torch::randn({1024, 512}).to(torch::kBFloat16)},
      {"w1", torch::randn({512, 1024})},
      {"mask", torch::randint(0, 2, {4096}).to(torch::kBool)},
      {"w2", torch::randn({1024, 256}, torch::kDouble)},
  };
  {
    SafetensorsWriter w(file, {{"kind", "big"}});
    for (const auto& [name, t] : tensors) w.declare(name, t.scalar_type(), t.sizes());
    EXPECT_THROW(w.write("w1", torch::randn({2})), CheckpointError);         // wrong shape
    EXPECT_THROW(w.write("w1", torch::randn({512, 1024}, torch::kDouble)), CheckpointError);
    EXPECT_THROW(w.write("nope", torch::randn({2})), CheckpointError);       // undeclared
    for (const auto& [name, t] : tensors) w.write(name, t);
    EXPECT_THROW(w.write("w1", tensors[1].second), CheckpointError);         // twice
    EXPECT_THROW(w.declare("late", torch::kFloat, {1}), CheckpointError);
    EXPECT_FALSE(fs::exists(file));  // nothing visible before commit
    w.commit();
  }
  EXPECT_EQ(entries(dir_), std::set<std::string>{"big.safetensors"});
  EXPECT_GT(fs::file_size(file), 5u << 20);
  const auto f = SafetensorsFile::open(file);
  EXPECT_EQ(f.metadata().at("kind"), "big");
  for (const auto& [name, t] : tensors) {
    expect_same(f.get(name), t, name);
    EXPECT_EQ(checksum(f.view(name)), checksum(t)) << name;
  }
}

TEST_F(StateTest, WriterWithoutCommitLeavesNothing) {
  const fs::path file = dir_ / "gone.safetensors";
  {
    SafetensorsWriter w(file);
    w.declare("a", torch::kFloat, {4});
    w.declare("b", torch::kFloat, {4});
    w.write("a", torch::ones({4}));
    EXPECT_THROW(w.commit(), CheckpointError);  // "b" declared but not written
  }
  EXPECT_TRUE(entries(dir_).empty());
  // And an existing file under that name is untouched.
  save_safetensors(file, {{"old", torch::ones({1})}});
  { SafetensorsWriter w(file); }
  EXPECT_EQ(SafetensorsFile::open(file).names(), std::vector<std::string>{"old"});
  EXPECT_EQ(entries(dir_), std::set<std::string>{"gone.safetensors"});
}

TEST_F(StateTest, Checksum) {
  const auto t = torch::arange(20, torch::kFloat).view({4, 5});
  EXPECT_EQ(checksum(t), checksum(t.clone()));
  EXPECT_EQ(checksum(t.t().contiguous().t()), checksum(t));  // strides do not matter
  auto u = t.clone();
  u[3][4] = 100;
  EXPECT_NE(checksum(u), checksum(t));
  EXPECT_NE(checksum(t.to(torch::kDouble)), checksum(t));  // bytes, so the dtype matters
  EXPECT_EQ(checksum(torch::empty({0})), 0x2D06800538D394C2ull);  // XXH3-64 of no bytes
  EXPECT_THROW(checksum(at::Tensor()), CheckpointError);
}

// Every malformed file: CheckpointError, "[state]", the file's path and the given words.
class CorruptTest : public StateTest {
 protected:
  void expect_rejected(const std::string& bytes, const std::string& words) {
    const fs::path file = dir_ / "bad.safetensors";
    write_bytes(file, bytes);
    try {
      SafetensorsFile::open(file);
      ADD_FAILURE() << "accepted a file that should fail with: " << words;
    } catch (const CheckpointError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind("[state]", 0), 0u) << msg;
      EXPECT_NE(msg.find(file.string()), std::string::npos) << msg;
      EXPECT_NE(msg.find(words), std::string::npos) << "expected '" << words << "' in: " << msg;
    }
  }
  std::string valid() {
    const fs::path good = dir_ / "good.safetensors";
    save_safetensors(good, {{"a", torch::arange(4, torch::kFloat)}, {"b", torch::ones({2})}},
                     {{"k", "v"}});
    return read_bytes(good);
  }
};

TEST_F(CorruptTest, Truncated) {
  const std::string good = valid();
  expect_rejected(good.substr(0, 5), "too short");
  expect_rejected(good.substr(0, good.size() - 1), "outside the data area");
  expect_rejected(good.substr(0, 20), "exceeds the");
  expect_rejected("", "too short");
}

TEST_F(CorruptTest, HeaderLengthLargerThanFile) {
  std::string bytes = valid();
  const uint64_t huge = uint64_t{1} << 40;
  std::memcpy(bytes.data(), &huge, 8);
  expect_rejected(bytes, "header length 1099511627776 exceeds");
}

TEST_F(CorruptTest, InvalidJson) {
  expect_rejected(raw_file(R"({"a": {"dtype": "F32", "shape": [1], )", ""), "not valid JSON");
  expect_rejected(raw_file(R"({"a": 1} trailing)", ""), "not valid JSON");
  expect_rejected(raw_file("[1, 2]  ", ""), "does not start with '{'");
  expect_rejected(raw_file(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                           R"( "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
                           "xxxx"),
                  "key 'a' twice");
}

TEST_F(CorruptTest, BadFields) {
  expect_rejected(raw_file(R"({"a": {"dtype": "F8_E9", "shape": [1], "data_offsets": [0, 1]}})",
                           "x"),
                  "unknown dtype 'F8_E9'");
  expect_rejected(raw_file(R"({"a": {"dtype": 3, "shape": [1], "data_offsets": [0, 1]}})", "x"),
                  "dtype is a number");
  expect_rejected(raw_file(R"({"a": {"shape": [1], "data_offsets": [0, 4]}})", "xxxx"),
                  "tensor 'a' has no 'dtype' field");
  expect_rejected(raw_file(R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})",
                           "xxxx"),
                  "expected non-negative integers");
  expect_rejected(raw_file(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})",
                           "xxxx"),
                  "needs 8 bytes but data_offsets [0, 4] span 4");
  expect_rejected(raw_file(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})",
                           "xxxx"),
                  "tensor 'a': data_offsets is [0]");
  expect_rejected(raw_file(R"({"__metadata__": {"k": 1}})", ""), "__metadata__ 'k' is a number");
  expect_rejected(raw_file(R"({"a": [1]})", ""), "tensor 'a': expected an object");
}

TEST_F(CorruptTest, OffsetsOutOfRangeOverlappingOrWithHoles) {
  const std::string f32x1 = R"({"dtype": "F32", "shape": [1], "data_offsets": )";
  expect_rejected(raw_file(R"({"a": )" + f32x1 + "[4, 8]}}", "xxxx"),
                  "tensor 'a': data_offsets [4, 8] lie outside the data area of 4 bytes");
  expect_rejected(raw_file(R"({"a": )" + f32x1 + R"([0, 4]}, "b": )" + f32x1 + "[2, 6]}}",
                           "xxxxxxxx"),
                  "tensor 'b' (data_offsets [2, 6]) overlaps tensor 'a'");
  expect_rejected(raw_file(R"({"a": )" + f32x1 + R"([0, 4]}, "b": )" + f32x1 + "[0, 4]}}",
                           "xxxx"),
                  "overlaps tensor 'a'");
  expect_rejected(raw_file(R"({"a": )" + f32x1 + R"([0, 4]}, "b": )" + f32x1 + "[6, 10]}}",
                           "xxxxxxxxxx"),
                  "bytes [4, 6) of the data area belong to no tensor");
  expect_rejected(raw_file(R"({"a": )" + f32x1 + "[0, 4]}}", "xxxxxx"),
                  "2 bytes of trailing data");
}

// A flipped bit in the header must never crash or pass as a different valid layout at the
// places that define the layout; elsewhere (a byte of a name, a metadata value, padding) the
// format has no checksum to notice it, which is what checkpoint indexes' checksums are for.
TEST_F(CorruptTest, FlippedHeaderBytes) {
  const std::string good = valid();
  uint64_t n;
  std::memcpy(&n, good.data(), 8);
  const std::string header = good.substr(8, n);
  const fs::path file = dir_ / "bad.safetensors";
  int rejected = 0;
  for (uint64_t i = 0; i < n; ++i) {
    std::string bytes = good;
    bytes[8 + i] ^= 0x04;
    write_bytes(file, bytes);
    try {
      SafetensorsFile::open(file);
    } catch (const CheckpointError& e) {
      ++rejected;
      EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(rejected, static_cast<int>(n) / 2) << "of " << n << " flipped header bytes";
  // The structural bytes, one at a time: the opening brace, a dtype letter, an offset digit.
  for (const std::string& needle : {std::string("{"), std::string("F32"), std::string("[0,")}) {
    const size_t at = header.find(needle) + (needle == "[0," ? 1 : 0);
    std::string bytes = good;
    bytes[8 + at] ^= 0x04;
    expect_rejected(bytes, "");
  }
}

// ---------------------------------------------------------------------------------------------
// AtomicDir

void write_text(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }
std::string read_text(const fs::path& p) { return read_bytes(p); }

TEST_F(StateTest, AtomicDirCreatesAndReplaces) {
  const fs::path final_path = dir_ / "ckpt";
  {
    AtomicDir d(final_path);
    EXPECT_NE(d.path(), final_path);
    EXPECT_EQ(d.path().parent_path(), dir_);
    write_text(d.path() / "a.txt", "old");
    write_text(d.path() / "b.txt", "only in old");
    fs::create_directory(d.path() / "sub");
    write_text(d.path() / "sub" / "c.txt", "nested");
    d.commit();
    EXPECT_EQ(d.path(), final_path);
  }
  EXPECT_EQ(read_text(final_path / "sub" / "c.txt"), "nested");
  {
    AtomicDir d(final_path);
    write_text(d.path() / "a.txt", "new");
    EXPECT_EQ(read_text(final_path / "a.txt"), "old");  // untouched until commit
    d.commit();
  }
  EXPECT_EQ(read_text(final_path / "a.txt"), "new");
  EXPECT_FALSE(fs::exists(final_path / "b.txt"));  // replaced whole, not merged
  EXPECT_EQ(entries(dir_), std::set<std::string>{"ckpt"});  // no temp or old copy left
}

TEST_F(StateTest, AtomicDirWithoutCommitLeavesOldIntact) {
  const fs::path final_path = dir_ / "ckpt";
  {
    AtomicDir d(final_path);
    write_text(d.path() / "a.txt", "old");
    d.commit();
  }
  {
    AtomicDir d(final_path);
    write_text(d.path() / "a.txt", "half-written");
    fs::create_directory(d.path() / "deep");
    write_text(d.path() / "deep" / "x", "junk");
    // Destroyed without commit, as when an exception unwinds through a save.
  }
  EXPECT_EQ(read_text(final_path / "a.txt"), "old");
  EXPECT_EQ(entries(dir_), std::set<std::string>{"ckpt"});
}

TEST_F(StateTest, AtomicDirWriterKilledMidWrite) {
  const fs::path final_path = dir_ / "ckpt";
  {
    AtomicDir d(final_path);
    write_text(d.path() / "a.txt", "old");
    d.commit();
  }
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child: a slow writer that tells the parent once it has started writing. Only
    // _exit() out of here, never return into gtest.
    ::close(ready[0]);
    try {
      AtomicDir d(final_path);
      for (int i = 0; i < 10000; ++i) {
        write_text(d.path() / fmt::format("part{}.bin", i), std::string(4096, 'x'));
        if (i == 2) (void)!::write(ready[1], "r", 1);
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      d.commit();  // never reached: the parent kills us long before
    } catch (...) {
    }
    ::_exit(0);
  }
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  // The previous checkpoint is whole; the killed writer's temp dir is junk beside it.
  EXPECT_EQ(read_text(final_path / "a.txt"), "old");
  EXPECT_EQ(entries(final_path), std::set<std::string>{"a.txt"});
  const auto before = entries(dir_);
  ASSERT_EQ(before.size(), 2u);
  bool has_tmp = false;
  for (const auto& name : before) has_tmp |= name.starts_with("ckpt.tmp-");
  EXPECT_TRUE(has_tmp);

  EXPECT_EQ(cleanup_stale_tmp(dir_), 1u);
  EXPECT_EQ(entries(dir_), std::set<std::string>{"ckpt"});
  EXPECT_EQ(read_text(final_path / "a.txt"), "old");
}

TEST_F(StateTest, CleanupStaleTmpRestoresAndKeepsOthers) {
  // A fallback commit that died between its two renames: only the .old copy holds "x".
  fs::create_directory(dir_ / "x.old-123-abc0");
  write_text(dir_ / "x.old-123-abc0" / "f", "good");
  // A finished one whose old copy was not deleted yet.
  fs::create_directory(dir_ / "y");
  fs::create_directory(dir_ / "y.old-9-ff");
  write_text(dir_ / "y.tmp-77-0123456789abcdef", "temp file of a safetensors writer");
  // Names that only look similar stay.
  fs::create_directory(dir_ / "z.tmp-notapid");
  write_text(dir_ / "w.tmp-", "keep");
  EXPECT_EQ(cleanup_stale_tmp(dir_), 3u);
  EXPECT_EQ(entries(dir_), (std::set<std::string>{"x", "y", "z.tmp-notapid", "w.tmp-"}));
  EXPECT_EQ(read_text(dir_ / "x" / "f"), "good");
}

TEST_F(StateTest, RemoveTreeDoesNotFollowSymlinks) {
  fs::create_directories(dir_ / "outside");
  write_text(dir_ / "outside" / "keep", "k");
  fs::create_directories(dir_ / "tree" / "a" / "b");
  write_text(dir_ / "tree" / "a" / "b" / "f", "f");
  fs::create_directory_symlink(dir_ / "outside", dir_ / "tree" / "link");
  EXPECT_EQ(remove_tree(dir_ / "tree"), 5u);
  EXPECT_FALSE(fs::exists(dir_ / "tree"));
  EXPECT_EQ(read_text(dir_ / "outside" / "keep"), "k");
  EXPECT_EQ(remove_tree(dir_ / "tree"), 0u);  // missing: nothing to do
}

}  // namespace
