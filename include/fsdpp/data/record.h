#pragma once
// One record of a data file (a JSON object, a Parquet or Arrow row) and where it came from, so
// that every message about it can name the file and the line or row.

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace fsdpp::data {

struct RecordOrigin {
  std::string file;  // the file's path as data.path resolved it
  int64_t line = 0;  // JSON: the 1-based line the record starts on; 0 for Parquet and Arrow
  int64_t row = 0;   // the record's 0-based index in its file (JSON: among its records)

  // "data/a.jsonl line 7" (JSON) or "data/a.parquet row 12" (Parquet, Arrow).
  std::string str() const;
};

struct Record {
  // A JSON object: a JSON record as written, or a row's columns by name, its keys in the file's
  // order (ordered_json: a chat template printing a tool schema with tojson prints the keys as
  // transformers does, in the order Python's json kept). Arrow values map to JSON
  // as pyarrow's to_pylist() maps them to Python: strings (also large and dictionary-encoded),
  // integers, floats, bools, nulls, lists and structs (objects).
  nlohmann::ordered_json value;
  RecordOrigin origin;
};

}  // namespace fsdpp::data
