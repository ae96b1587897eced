#pragma once
// TensorBoard event files, written by hand: TensorBoard reads a directory of files named
// `events.out.tfevents.*`, each a sequence of TFRecords holding one serialized `tensorboard.Event`
// protobuf message apiece. fsdpp writes the handful of fields it needs with their protobuf wire
// encoding (field numbers from tensorflow's event.proto, summary.proto and tensor.proto) instead
// of linking protobuf or TensorFlow for them.
//
//   detail::EventFileWriter tb(out_dir / "runs");              // + the file_version record
//   tb.add_text("config", "```yaml\n" + yaml + "```", 0);      // Markdown, the text plugin's
//   tb.add_scalars(step, detail::tensorboard_scalars(json));   // train/loss, eval/loss, ...
//
// A TFRecord is
//   uint64 length | uint32 masked_crc32c(length) | data[length] | uint32 masked_crc32c(data)
// all little-endian. Every record goes to the kernel with one write(2) as soon as it is made, so
// a killed process leaves a file that reads up to its last whole record (the reader stops at a
// torn one); nothing is fsync'ed (a machine crash may lose the last records).

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "fsdpp/common/unique_fd.h"

namespace fsdpp::observe::detail {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum TFRecord uses;
// crc32c("123456789") == 0xE3069283. `crc` continues an earlier value.
uint32_t crc32c(std::string_view data, uint32_t crc = 0);

// TFRecord's masked form of crc32c: ((crc >> 15) | (crc << 17)) + 0xa282ead8, so that the CRC of
// data that holds CRCs is not itself a CRC.
uint32_t masked_crc32c(std::string_view data);

// `data` framed as one TFRecord (16 bytes more than `data`).
std::string tfrecord(std::string_view data);

// One TensorBoard scalar: its tag ("train/loss") and value (a float32 in the file).
struct TensorBoardScalar {
  std::string tag;
  float value;
};

// Serialized tensorboard.Event messages (the record data, before framing).
namespace event {
// The first record of every file: file_version "brain.Event:2".
std::string file_version(double wall_time);
// summary.value[i] = {tag, simple_value} for each scalar.
std::string scalars(double wall_time, int64_t step, const std::vector<TensorBoardScalar>& values);
// summary.value = {tag, metadata.plugin_data.plugin_name "text", tensor: a DT_STRING scalar
// holding `text`}: what the text plugin's own summary (tensorboard.plugins.text) writes.
std::string text(double wall_time, int64_t step, std::string_view tag, std::string_view text);
// session_log {status: START} at `step`: TensorBoard's reader drops what the files hold for this
// step and later ones, so that a resumed run's curve replaces the steps it repeats.
std::string session_start(double wall_time, int64_t step);
}  // namespace event

// The numbers of a metrics.jsonl line as TensorBoard scalars, under Hugging Face's tags where it
// has one (`loss` -> train/loss, `val_loss` -> eval/loss, `lr` -> train/learning_rate,
// `grad_norm` -> train/grad_norm) and `train/<key>` otherwise (train/tokens_per_s,
// train/comm_bytes_inter, ...): a figure added to the line later shows up without a change
// here. `step` is the event's step, not a scalar; booleans are 0 or 1; strings are skipped.
std::vector<TensorBoardScalar> tensorboard_scalars(const nlohmann::json& metrics_line);

// One event file in a log directory, written by one process (rank 0).
class EventFileWriter {
 public:
  // Creates `log_dir` (and its parents) and a new file
  // events.out.tfevents.<unix seconds, 10 digits>.<host>.<pid>[.<n>] in it, as PyTorch's
  // SummaryWriter names them (TensorBoard reads the files of a directory in name order, which is
  // then the order they were made in), and writes the file_version record. Throws Error naming
  // the path.
  explicit EventFileWriter(const std::filesystem::path& log_dir);

  void add_scalars(int64_t step, const std::vector<TensorBoardScalar>& values);
  // `markdown` is rendered by TensorBoard's text plugin (tables and ``` fences work).
  void add_text(std::string_view tag, std::string_view markdown, int64_t step);
  // See event::session_start: written when a run resumes at `step`.
  void add_session_start(int64_t step);

  const std::filesystem::path& path() const { return path_; }

 private:
  // Frames `event` and appends it with one write; a failed write cuts the file back to its last
  // whole record and throws Error naming the file.
  void write_record(const std::string& event);

  std::filesystem::path path_;
  UniqueFd fd_;
};

}  // namespace fsdpp::observe::detail
