#include "fsdpp/data/record_reader.h"

#include "fsdpp/common/error.h"
#include "record_readers.h"

namespace fsdpp::data {

std::string RecordOrigin::str() const {
  return line > 0 ? fmt::format("{} line {}", file, line) : fmt::format("{} row {}", file, row);
}

std::unique_ptr<RecordReader> open_records(const DataFile& file, const RecordReadOptions& options) {
  switch (file.format) {
    case FileFormat::JSON: return detail::open_json_records(file);
    case FileFormat::PARQUET: return detail::open_parquet_records(file, options);
    case FileFormat::ARROW: return detail::open_arrow_records(file, options);
    case FileFormat::TEXT: break;
  }
  FSDPP_THROW(ConfigError, "[data] '{}' is plain text, which has no records; records come from "
              ".jsonl, .json, .parquet and .arrow files", file.path.string());
}

std::optional<std::vector<std::string>> schema_columns(const DataFile& file) {
  switch (file.format) {
    case FileFormat::PARQUET: return detail::parquet_columns(file);
    case FileFormat::ARROW: return detail::arrow_columns(file);
    case FileFormat::JSON:
    case FileFormat::TEXT: break;
  }
  return std::nullopt;
}

RecordStream::RecordStream(DataFiles files, RecordReadOptions options)
    : files_(std::move(files)), options_(std::move(options)) {
  FSDPP_CHECK_AS(ConfigError, !files_.files.empty() && !files_.is_text(),
                 "[data] data.path '{}' is plain text, which has no records; records come from "
                 ".jsonl, .json, .parquet and .arrow files", files_.path);
}

bool RecordStream::next(Record& record) {
  for (;;) {
    if (reader_ && reader_->next(record)) {
      ++records_;
      return true;
    }
    if (next_file_ == files_.files.size()) {
      FSDPP_CHECK_AS(ConfigError, records_ > 0, "[data] data.path '{}' holds no records ({} file{} "
                     "read, each empty); give data with at least one record", files_.path,
                     files_.files.size(), files_.files.size() == 1 ? "" : "s");
      reader_.reset();
      return false;
    }
    reader_ = open_records(files_.files[next_file_++], options_);
  }
}

namespace detail {

std::string column_list(const std::vector<std::string>& columns) {
  std::string out;
  for (const auto& c : columns) out += (out.empty() ? "" : ", ") + c;
  return out.empty() ? "(none)" : out;
}

}  // namespace detail
}  // namespace fsdpp::data
