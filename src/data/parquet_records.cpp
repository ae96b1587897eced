// Parquet files through parquet::arrow::FileReader: row group after row group, only the columns
// asked for decoded, one thread (the caller decides how many files to read at once).
#include <arrow/io/file.h>
#include <arrow/record_batch.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/schema.h>
#include <parquet/exception.h>

#include "batch_records.h"
#include "fsdpp/common/error.h"
#include "record_readers.h"

namespace fsdpp::data::detail {
namespace {

std::unique_ptr<parquet::arrow::FileReader> open_reader(const std::string& path) {
  auto file = arrow::io::ReadableFile::Open(path);
  check_arrow(file.status(), path, "cannot open");
  parquet::arrow::FileReaderBuilder builder;
  // Parquet's open throws ParquetException (bad magic, a truncated footer) or returns a status.
  try {
    const arrow::Status st = builder.Open(*file);
    FSDPP_CHECK_AS(ConfigError, st.ok(), "[data] '{}' is not a Parquet file, which its extension says "
                   "it is: {}", path, st.ToString());
  } catch (const parquet::ParquetException& e) {
    FSDPP_THROW(ConfigError, "[data] '{}' is not a Parquet file, which its extension says it is: {}",
                path, e.what());
  }
  parquet::ArrowReaderProperties props(/*use_threads=*/false);
  std::unique_ptr<parquet::arrow::FileReader> reader;
  check_arrow(builder.properties(props)->Build(&reader), path, "cannot read its Parquet metadata");
  return reader;
}

std::shared_ptr<arrow::Schema> schema_of(parquet::arrow::FileReader& reader, const std::string& path) {
  std::shared_ptr<arrow::Schema> schema;
  check_arrow(reader.GetSchema(&schema), path, "cannot convert its Parquet schema to Arrow's");
  return schema;
}

// A nested column (a struct, a list of structs) is several Parquet leaf columns.
void leaf_columns(const parquet::arrow::SchemaField& field, std::vector<int>& out) {
  if (field.children.empty()) {
    out.push_back(field.column_index);
    return;
  }
  for (const auto& child : field.children) leaf_columns(child, out);
}

class ParquetRecords : public BatchRecordReader {
 public:
  ParquetRecords(const std::string& path, const RecordReadOptions& options)
      : BatchRecordReader(path), reader_(open_reader(path)) {
    const auto fields = column_indices(*schema_of(*reader_, path), options.columns, path);
    std::vector<int> leaves, row_groups;
    for (int f : fields) leaf_columns(reader_->manifest().schema_fields[f], leaves);
    for (int g = 0; g < reader_->num_row_groups(); ++g) row_groups.push_back(g);
    try {
      auto batches = reader_->GetRecordBatchReader(row_groups, leaves);
      check_arrow(batches.status(), path, "cannot read its row groups");
      batches_ = std::move(*batches);
    } catch (const parquet::ParquetException& e) {
      FSDPP_THROW(ConfigError, "[data] {}: cannot read its row groups: {}", path, e.what());
    }
  }

 protected:
  std::shared_ptr<arrow::RecordBatch> next_batch() override {
    std::shared_ptr<arrow::RecordBatch> batch;
    try {
      check_arrow(batches_->ReadNext(&batch), file(), "cannot read a row group");
    } catch (const parquet::ParquetException& e) {
      FSDPP_THROW(ConfigError, "[data] {}: cannot read a row group: {}", file(), e.what());
    }
    return batch;
  }

 private:
  std::unique_ptr<parquet::arrow::FileReader> reader_;  // outlives batches_, as Arrow requires
  std::unique_ptr<arrow::RecordBatchReader> batches_;
};

}  // namespace

std::unique_ptr<RecordReader> open_parquet_records(const DataFile& file, const RecordReadOptions& options) {
  return std::make_unique<ParquetRecords>(file.path.string(), options);
}

std::vector<std::string> parquet_columns(const DataFile& file) {
  const std::string path = file.path.string();
  return field_names(*schema_of(*open_reader(path), path));
}

}  // namespace fsdpp::data::detail
