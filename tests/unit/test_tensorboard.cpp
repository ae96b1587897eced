// The TensorBoard event-file writer (src/train/tensorboard.h): CRC-32C against published test
// vectors, TFRecord framing and the Event messages byte for byte against what tensorboard's own
// Python classes write (event_pb2 and summary.writer.record_writer, tensorboard 2.21; the hex
// strings below were produced by them), and a file read back record by record.
// tests/train/tensorboard.sh reads a trainer's files with tensorboard's reader.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "../../src/observe/tensorboard.h"
#include "fsdpp/common/error.h"
#include "fsdpp/train/config.h"

using namespace fsdpp::observe::detail;

namespace {

std::string hex(const std::string& bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (const unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

// Not std::filesystem::remove_all: libtorch.so exports its own copy of it, which crashes.
void remove_tree(const std::filesystem::path& p) {
  std::error_code ec;
  if (std::filesystem::is_directory(std::filesystem::symlink_status(p, ec))) {
    for (const auto& e : std::filesystem::directory_iterator(p)) remove_tree(e.path());
  }
  std::filesystem::remove(p, ec);
}

uint64_t read_le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<unsigned char>(s[at + i])} << (8 * i);
  return v;
}

}  // namespace

TEST(Crc32c, KnownVectors) {
  // The check value of CRC-32C, and RFC 3720 (iSCSI) appendix B.4's vectors.
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) {
    ascending.push_back(static_cast<char>(i));
    descending.push_back(static_cast<char>(31 - i));
  }
  EXPECT_EQ(crc32c(ascending), 0x46DD794Eu);
  EXPECT_EQ(crc32c(descending), 0x113FDB5Cu);
  // Continuing an earlier value equals one pass over the whole.
  EXPECT_EQ(crc32c("6789", crc32c("12345")), 0xE3069283u);
}

TEST(Crc32c, MaskedAsTfRecordMasksIt) {
  const uint32_t crc = 0xE3069283u;
  EXPECT_EQ(masked_crc32c("123456789"), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

TEST(TensorBoard, TfRecordFramingMatchesTensorBoardsRecordWriter) {
  const std::string r = tfrecord("hello");
  EXPECT_EQ(hex(r), "0500000000000000eab2043e68656c6c6fbb1f1c19");
  ASSERT_EQ(r.size(), 5u + 16u);
  EXPECT_EQ(read_le(r, 0, 8), 5u);
  EXPECT_EQ(read_le(r, 8, 4), masked_crc32c(r.substr(0, 8)));
  EXPECT_EQ(r.substr(12, 5), "hello");
  EXPECT_EQ(read_le(r, 17, 4), masked_crc32c("hello"));
  EXPECT_EQ(tfrecord("").size(), 16u);
}

TEST(TensorBoard, EventsMatchTensorBoardsProtobufClasses) {
  EXPECT_EQ(hex(event::file_version(1.5)), "09000000000000f83f1a0d627261696e2e4576656e743a32");
  EXPECT_EQ(hex(event::scalars(1700000000.25, 42, {{"train/loss", 2.5f}, {"eval/loss", -0.125f}})),
            "0900001040fc54d941102a2a250a110a0a747261696e2f6c6f737315000020400a100a096576616c2f6c"
            "6f737315000000be");
  EXPECT_EQ(hex(event::text(2.0, 3, "config", "a: 1\n")),
            "09000000000000004010032a210a1f0a06636f6e666967420b080712004205613a20310a4a080a060a04"
            "74657874");
  EXPECT_EQ(hex(event::session_start(2.0, 300)), "09000000000000004010ac023a020801");
}

TEST(TensorBoard, MetricsLineTagsAndValues) {
  const auto j = nlohmann::json::parse(
      R"({"step": 7, "loss": 2.25, "val_loss": 2.5, "lr": 0.001, "grad_norm": 0.5,
          "comm_bytes": 123456789, "step_skipped": true, "note": "text"})");
  const auto s = tensorboard_scalars(j);
  std::map<std::string, float> m;
  for (const auto& v : s) m[v.tag] = v.value;
  EXPECT_EQ(m.size(), 6u);  // not step, not the string
  EXPECT_EQ(m.at("train/loss"), 2.25f);
  EXPECT_EQ(m.at("eval/loss"), 2.5f);
  EXPECT_EQ(m.at("train/learning_rate"), 0.001f);
  EXPECT_EQ(m.at("train/grad_norm"), 0.5f);
  EXPECT_EQ(m.at("train/comm_bytes"), static_cast<float>(123456789.0));
  EXPECT_EQ(m.at("train/step_skipped"), 1.0f);
}

TEST(TensorBoard, FileHoldsWholeRecordsInOrder) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("fsdpp_tb_" + std::to_string(::getpid())) / "runs";
  remove_tree(dir.parent_path());
  std::filesystem::path path;
  {
    EventFileWriter w(dir);  // creates the directory
    path = w.path();
    EXPECT_EQ(path.parent_path(), dir);
    EXPECT_EQ(path.filename().string().rfind("events.out.tfevents.", 0), 0u);
    w.add_text("config", "x", 0);
    w.add_scalars(1, {{"train/loss", 3.0f}});
    // Each record is in the file as soon as the call returns (no buffering to lose on a kill).
    EXPECT_EQ(std::filesystem::file_size(path),
              tfrecord(event::file_version(0)).size() +
                  tfrecord(event::text(0, 0, "config", "x")).size() +
                  tfrecord(event::scalars(0, 1, {{"train/loss", 3.0f}})).size());
  }
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t at = 0;
  int records = 0;
  while (at < bytes.size()) {
    ASSERT_LE(at + 12, bytes.size());
    const uint64_t n = read_le(bytes, at, 8);
    EXPECT_EQ(read_le(bytes, at + 8, 4), masked_crc32c(bytes.substr(at, 8)));
    ASSERT_LE(at + 16 + n, bytes.size());
    const std::string data = bytes.substr(at + 12, n);
    EXPECT_EQ(read_le(bytes, at + 12 + n, 4), masked_crc32c(data));
    if (records == 0) EXPECT_NE(data.find("brain.Event:2"), std::string::npos);
    at += 16 + n;
    ++records;
  }
  EXPECT_EQ(records, 3);
  // A second writer in the same directory, second and process makes a file of its own (O_EXCL:
  // never appends into another writer's file), named to sort after the first.
  EventFileWriter a(dir), b(dir);
  EXPECT_NE(a.path(), b.path());
  EXPECT_LT(a.path().filename().string(), b.path().filename().string());
  remove_tree(dir.parent_path());
}

// training.report_to and training.logging_dir: Hugging Face's names and values.
TEST(TensorBoardConfig, ReportToAndLoggingDir) {
  using fsdpp::train::TrainConfig;
  const std::string base = "data:\n  path: corpus.txt\ntraining:\n  max_steps: 5\n";
  const auto def = TrainConfig::from_yaml_string(base);
  EXPECT_TRUE(def.training.report_to_tensorboard());  // fsdpp's default (Hugging Face's: none)
  EXPECT_EQ(def.training.logging_dir, "");
  for (const char* on : {"tensorboard", "all", "[tensorboard]", "[all]"}) {
    EXPECT_TRUE(TrainConfig::from_yaml_string(base, {std::string("training.report_to=") + on})
                    .training.report_to_tensorboard())
        << on;
  }
  for (const char* off : {"none", "[none]", "[]", ""}) {
    EXPECT_FALSE(TrainConfig::from_yaml_string(base, {std::string("training.report_to=") + off})
                     .training.report_to_tensorboard())
        << off;
  }
  // The effective config reads back to the same value.
  const auto set = TrainConfig::from_yaml_string(
      base + "  report_to: none\n  logging_dir: /tmp/tb logs\n");
  const auto again = TrainConfig::from_yaml_string(set.to_yaml());
  EXPECT_EQ(again.training.report_to, std::vector<std::string>{"none"});
  EXPECT_EQ(again.training.logging_dir, "/tmp/tb logs");
  auto error_of = [&](const std::string& override) {
    try {
      TrainConfig::from_yaml_string(base, {override});
    } catch (const fsdpp::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(error_of("training.report_to=wandb"),
            "[config] training.report_to has 'wandb': fsdpp reports to tensorboard only; expected "
            "tensorboard, all or none (or a list of them)");
  EXPECT_EQ(error_of("training.report_to=[none, tensorboard]"),
            "[config] training.report_to=[none, tensorboard]: 'none' stands alone; expected "
            "tensorboard, all or none");
  EXPECT_NE(error_of("training.report_to={a: 1}").find("[config] training.report_to is a map"),
            std::string::npos);
}

TEST(TensorBoard, UnusableLogDirIsAnErrorNamingIt) {
  const auto file = std::filesystem::temp_directory_path() /
                    ("fsdpp_tb_file_" + std::to_string(::getpid()));
  std::ofstream(file) << "a file, not a directory";
  try {
    EventFileWriter w(file / "runs");
    ADD_FAILURE() << "no error for a log directory under a regular file";
  } catch (const fsdpp::Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[train] cannot create the TensorBoard directory '" +
                                              (file / "runs").string() + "' (training.logging_dir)",
                                          0),
              0u)
        << e.what();
  }
  std::filesystem::remove(file);
}
