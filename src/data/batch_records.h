#pragma once
// Records from Arrow record batches, the part the Parquet and Arrow IPC readers share: a batch's
// rows become JSON objects by column name, converters made once per batch (arrow_values.h).

#include <memory>
#include <string>
#include <vector>

#include <arrow/record_batch.h>
#include <arrow/status.h>

#include "arrow_values.h"
#include "fsdpp/data/record_reader.h"

namespace fsdpp::data::detail {

class BatchRecordReader : public RecordReader {
 public:
  bool next(Record& record) override;

 protected:
  explicit BatchRecordReader(std::string file) : file_(std::move(file)) {}
  // The next batch of the file; nullptr after the last one.
  virtual std::shared_ptr<arrow::RecordBatch> next_batch() = 0;
  const std::string& file() const { return file_; }

 private:
  std::string file_;
  std::shared_ptr<arrow::RecordBatch> batch_;
  std::vector<std::string> names_;
  std::vector<std::unique_ptr<ValueConverter>> columns_;
  int64_t in_batch_ = 0;  // the next row of batch_
  int64_t row_ = 0;       // the next row of the file
};

// The indices of `wanted` in `schema`'s top-level fields (all of them when `wanted` is empty).
// Throws ConfigError naming the file, the missing column and the schema's columns.
std::vector<int> column_indices(const arrow::Schema& schema, const std::vector<std::string>& wanted,
                                const std::string& file);

std::vector<std::string> field_names(const arrow::Schema& schema);

// Throws ConfigError "[data] <file>: <what>: <status>" unless `status` is OK.
void check_arrow(const arrow::Status& status, const std::string& file, const char* what);

}  // namespace fsdpp::data::detail
