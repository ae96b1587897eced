#include "tensorboard.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "fsdpp/common/error.h"

namespace fsdpp::observe::detail {
namespace {

// crc32c's byte-at-a-time table, made at compile time (read-only, shared by every writer).
constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

// ---- protobuf wire encoding (https://protobuf.dev/programming-guides/encoding/) --------------
// Only what Event needs: varints (wire type 0), fixed64 (1), length-delimited (2), fixed32 (5).
// Little-endian by shifts, whatever the host's byte order.

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void put_key(std::string& out, int field, int wire_type) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(wire_type));
}

// int64 and enum fields: negative numbers as ten-byte two's complement, as protobuf does.
void put_int(std::string& out, int field, int64_t v) {
  put_key(out, field, 0);
  put_varint(out, static_cast<uint64_t>(v));
}

void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}

void put_double(std::string& out, int field, double v) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, 1);
  put_le(out, bits, 8);
}

void put_float(std::string& out, int field, float v) {
  uint32_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, 5);
  put_le(out, bits, 4);
}

// Field numbers (tensorflow/core/util/event.proto, tensorflow/core/framework/summary.proto and
// tensor.proto, as tensorboard/compat/proto carries them).
namespace Event {
constexpr int kWallTime = 1, kStep = 2, kFileVersion = 3, kSummary = 5, kSessionLog = 7;
}
namespace SessionLog {
constexpr int kStatus = 1;
constexpr int64_t kStart = 1;
}  // namespace SessionLog
namespace Summary {
constexpr int kValue = 1;
}
namespace SummaryValue {
constexpr int kTag = 1, kSimpleValue = 2, kTensor = 8, kMetadata = 9;
}
namespace SummaryMetadata {
constexpr int kPluginData = 1;
constexpr int kPluginName = 1;  // in PluginData
}  // namespace SummaryMetadata
namespace Tensor {
constexpr int kDtype = 1, kTensorShape = 2, kStringVal = 8;
constexpr int64_t kDtString = 7;
}  // namespace Tensor

// Event{wall_time, step} + the rest.
std::string event_head(double wall_time, int64_t step) {
  std::string e;
  put_double(e, Event::kWallTime, wall_time);
  if (step != 0) put_int(e, Event::kStep, step);  // proto3: a default value is not written
  return e;
}

double now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

uint32_t crc32c(std::string_view data, uint32_t crc) {
  crc = ~crc;
  for (const char ch : data) {
    crc = kCrc32cTable[(crc ^ static_cast<uint8_t>(ch)) & 0xff] ^ (crc >> 8);
  }
  return ~crc;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tfrecord(std::string_view data) {
  std::string header;
  put_le(header, data.size(), 8);
  std::string out = header;
  put_le(out, masked_crc32c(header), 4);
  out.append(data);
  put_le(out, masked_crc32c(data), 4);
  return out;
}

namespace event {

std::string file_version(double wall_time) {
  std::string e = event_head(wall_time, 0);
  put_bytes(e, Event::kFileVersion, "brain.Event:2");
  return e;
}

std::string scalars(double wall_time, int64_t step, const std::vector<TensorBoardScalar>& values) {
  std::string summary;
  for (const auto& v : values) {
    std::string value;
    put_bytes(value, SummaryValue::kTag, v.tag);
    put_float(value, SummaryValue::kSimpleValue, v.value);
    put_bytes(summary, Summary::kValue, value);
  }
  std::string e = event_head(wall_time, step);
  put_bytes(e, Event::kSummary, summary);
  return e;
}

std::string text(double wall_time, int64_t step, std::string_view tag, std::string_view text) {
  // PluginData.content would be a serialized TextPluginData{version: 0}: empty bytes, omitted.
  std::string plugin_data;
  put_bytes(plugin_data, SummaryMetadata::kPluginName, "text");
  std::string metadata;
  put_bytes(metadata, SummaryMetadata::kPluginData, plugin_data);
  std::string tensor;  // a scalar (an empty shape) of dtype DT_STRING
  put_int(tensor, Tensor::kDtype, Tensor::kDtString);
  put_bytes(tensor, Tensor::kTensorShape, "");
  put_bytes(tensor, Tensor::kStringVal, text);
  std::string value;
  put_bytes(value, SummaryValue::kTag, tag);
  put_bytes(value, SummaryValue::kTensor, tensor);
  put_bytes(value, SummaryValue::kMetadata, metadata);
  std::string summary;
  put_bytes(summary, Summary::kValue, value);
  std::string e = event_head(wall_time, step);
  put_bytes(e, Event::kSummary, summary);
  return e;
}

std::string session_start(double wall_time, int64_t step) {
  std::string log;
  put_int(log, SessionLog::kStatus, SessionLog::kStart);
  std::string e = event_head(wall_time, step);
  put_bytes(e, Event::kSessionLog, log);
  return e;
}

}  // namespace event

std::vector<TensorBoardScalar> tensorboard_scalars(const nlohmann::json& metrics_line) {
  std::vector<TensorBoardScalar> out;
  for (const auto& [key, value] : metrics_line.items()) {
    if (key == "step") continue;
    if (value.is_array()) {
      // A figure per rank (rss_mb_per_rank): one tag per rank, train/rss_mb_per_rank/rank_0, ...
      for (size_t r = 0; r < value.size(); ++r) {
        if (value[r].is_number()) {
          out.push_back({fmt::format("train/{}/rank_{}", key, r), static_cast<float>(value[r].get<double>())});
        }
      }
      continue;
    }
    float v = 0;
    if (value.is_boolean()) {
      v = value.get<bool>() ? 1.0f : 0.0f;
    } else if (value.is_number()) {
      v = static_cast<float>(value.get<double>());
    } else {
      continue;
    }
    std::string tag;
    if (key == "loss") {
      tag = "train/loss";
    } else if (key == "val_loss") {
      tag = "eval/loss";
    } else if (key == "lr") {
      tag = "train/learning_rate";
    } else {
      tag = "train/" + key;  // grad_norm -> train/grad_norm as Hugging Face's too
    }
    out.push_back({std::move(tag), v});
  }
  return out;
}

EventFileWriter::EventFileWriter(const std::filesystem::path& log_dir) {
  std::error_code ec;
  std::filesystem::create_directories(log_dir, ec);
  FSDPP_CHECK(!ec,
              "[train] cannot create the TensorBoard directory '{}' (training.logging_dir): {}",
              log_dir.string(), ec.message());
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::strcpy(host, "localhost");
  const double t = now();
  const std::string base =
      fmt::format("events.out.tfevents.{:010d}.{}.{}", static_cast<int64_t>(t), host, ::getpid());
  // Never into another writer's file: a second one in the same second and process gets ".1", ...
  // (which sorts after the first).
  for (int n = 0; !fd_ && n < 1000; ++n) {
    path_ = log_dir / (n == 0 ? base : fmt::format("{}.{}", base, n));
    fd_.reset(::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644));
    if (!fd_ && errno != EEXIST) break;
  }
  FSDPP_CHECK(fd_, "[train] cannot create the TensorBoard event file '{}': {}", path_.string(),
              std::strerror(errno));
  write_record(event::file_version(t));
}

void EventFileWriter::add_scalars(int64_t step, const std::vector<TensorBoardScalar>& values) {
  write_record(event::scalars(now(), step, values));
}

void EventFileWriter::add_text(std::string_view tag, std::string_view markdown, int64_t step) {
  write_record(event::text(now(), step, tag, markdown));
}

void EventFileWriter::add_session_start(int64_t step) {
  write_record(event::session_start(now(), step));
}

void EventFileWriter::write_record(const std::string& event) {
  const std::string record = tfrecord(event);
  struct stat st {};
  FSDPP_CHECK(::fstat(fd_.get(), &st) == 0, "[train] cannot stat '{}': {}", path_.string(),
              std::strerror(errno));
  size_t done = 0;
  while (done < record.size()) {
    const ssize_t n = ::write(fd_.get(), record.data() + done, record.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    const int err = n < 0 ? errno : ENOSPC;
    // A torn record would end what TensorBoard reads of the file, and hide every later one.
    if (done > 0 && ::ftruncate(fd_.get(), st.st_size) != 0) {
      FSDPP_THROW(Error,
                  "[train] cannot write the TensorBoard event file '{}': {}; and cutting its "
                  "half-written last record failed too: {}",
                  path_.string(), std::strerror(err), std::strerror(errno));
    }
    FSDPP_THROW(Error,
                "[train] cannot write the TensorBoard event file '{}': {} (the records before "
                "this one are intact; training.report_to=none writes none)",
                path_.string(), std::strerror(err));
  }
}

}  // namespace fsdpp::observe::detail
