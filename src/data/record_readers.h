#pragma once
// The readers behind open_records() and schema_columns(), one per format (record_reader.h).

#include <memory>
#include <string>
#include <vector>

#include "fsdpp/data/record_reader.h"

namespace fsdpp::data::detail {

std::unique_ptr<RecordReader> open_json_records(const DataFile& file);

std::unique_ptr<RecordReader> open_parquet_records(const DataFile& file, const RecordReadOptions& options);
std::vector<std::string> parquet_columns(const DataFile& file);

std::unique_ptr<RecordReader> open_arrow_records(const DataFile& file, const RecordReadOptions& options);
std::vector<std::string> arrow_columns(const DataFile& file);

// "a, b, c": a schema's columns in messages.
std::string column_list(const std::vector<std::string>& columns);

}  // namespace fsdpp::data::detail
