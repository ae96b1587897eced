#pragma once
// Records of data files, one at a time, streaming: memory stays bounded by a line (JSON Lines), a
// record batch (Arrow) or a row group (Parquet), whatever the file's size.
//
//   auto files = fsdpp::data::resolve_data_path("data/*.jsonl.zst");
//   fsdpp::data::RecordStream records(files);
//   fsdpp::data::Record r;
//   while (records.next(r)) use(r.value, r.origin.str());
//
// JSON (.jsonl, .json, .ndjson; also .gz and .zst, decompressed by zlib and libzstd as they are
// read): as datasets' json loader reads them, a file whose first byte (after a UTF-8 byte-order
// mark) is '[' is one JSON array of records (objects, or strings, each of which becomes
// {"text": s}), read whole; any other file is JSON Lines: one object per line, blank lines
// skipped. Both extensions are read either way. Parquet: row group by row group through
// parquet::arrow::FileReader. Arrow: record batch by record batch, an IPC stream (what
// save_to_disk writes) or an IPC file, memory-mapped.
//
// Errors (ConfigError, message starting "[data]"): a malformed JSON line names the file, the line
// and the parser's reason; a line that is not an object says what it is; invalid UTF-8 names the
// file, the line or row, and the byte offset (in the line; in the string for Parquet and Arrow, with
// the column); a file that is not what its extension says is named with what it looks like; a
// column asked for that a Parquet or Arrow file lacks is named with the file's columns; an Arrow type
// that JSON cannot hold (binary, timestamps, decimals, ...) names the column and its type.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fsdpp/data/data_files.h"
#include "fsdpp/data/record.h"

namespace fsdpp::data {

struct RecordReadOptions {
  // Parquet and Arrow: read only these top-level columns (each must exist); empty: all of them.
  // JSON records are whole objects either way.
  std::vector<std::string> columns;
};

// The records of one data file.
class RecordReader {
 public:
  virtual ~RecordReader() = default;
  // The next record into `record`; false at the end of the file.
  virtual bool next(Record& record) = 0;
};

// Opens `file` (JSON, PARQUET or ARROW; TEXT is refused: it is not a record format).
std::unique_ptr<RecordReader> open_records(const DataFile& file, const RecordReadOptions& options = {});

// The top-level columns of a Parquet or Arrow file's schema, in order; nullopt for JSON, whose
// records carry their own fields.
std::optional<std::vector<std::string>> schema_columns(const DataFile& file);

// The records of every file of a resolved data.path, file after file.
class RecordStream {
 public:
  // Throws ConfigError when `files` is text (the caller's route, not records).
  explicit RecordStream(DataFiles files, RecordReadOptions options = {});
  // The next record; false after the last one. Throws ConfigError naming data.path when the
  // files hold no record at all.
  bool next(Record& record);

  const DataFiles& files() const { return files_; }
  int64_t files_opened() const { return static_cast<int64_t>(next_file_); }
  int64_t records() const { return records_; }

 private:
  DataFiles files_;
  RecordReadOptions options_;
  std::unique_ptr<RecordReader> reader_;
  size_t next_file_ = 0;
  int64_t records_ = 0;
};

}  // namespace fsdpp::data
