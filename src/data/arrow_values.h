#pragma once
// Arrow values as JSON, for the Parquet and Arrow readers: one converter per column of a record
// batch, its type looked at once, so that each row costs a virtual call and the value's copy.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <arrow/array.h>
#include <nlohmann/json.hpp>

namespace fsdpp::data::detail {

// Invalid UTF-8 in a string value: thrown by a converter and turned by the reader, which knows the
// file and the row, into a ConfigError.
struct InvalidUtf8Value {
  std::string column;  // "messages[2].content": where in the row
  size_t offset;       // of the first invalid byte in the string
};

class ValueConverter {
 public:
  virtual ~ValueConverter() = default;
  // The value at row i (null for a null slot). The array must outlive the converter.
  virtual nlohmann::ordered_json at(int64_t i) const = 0;
};

// As pyarrow's to_pylist(): null, bool, integers (signed and unsigned), floats (half, single,
// double), strings (string, large_string, string_view; dictionary-encoded ones through their
// dictionary), lists (list, large_list, fixed_size_list) and structs (objects). Throws ConfigError
// naming `file`, `column` and the type for anything else (binary, timestamps, decimals, maps, ...).
std::unique_ptr<ValueConverter> make_value_converter(const arrow::Array& array, const std::string& column,
                                                     const std::string& file);

}  // namespace fsdpp::data::detail
