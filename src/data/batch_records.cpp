#include "batch_records.h"

#include <algorithm>

#include "fsdpp/common/error.h"
#include "record_readers.h"

namespace fsdpp::data::detail {

bool BatchRecordReader::next(Record& record) {
  while (!batch_ || in_batch_ >= batch_->num_rows()) {
    batch_ = next_batch();
    if (!batch_) return false;
    names_ = field_names(*batch_->schema());
    columns_.clear();
    for (int c = 0; c < batch_->num_columns(); ++c) {
      columns_.push_back(make_value_converter(*batch_->column(c), names_[c], file_));
    }
    in_batch_ = 0;
  }
  nlohmann::ordered_json value = nlohmann::ordered_json::object();
  try {
    for (size_t c = 0; c < columns_.size(); ++c) value[names_[c]] = columns_[c]->at(in_batch_);
  } catch (const InvalidUtf8Value& bad) {
    FSDPP_THROW(ConfigError, "[data] {} row {}: invalid UTF-8 at byte {} of column '{}'; data files "
                "must hold UTF-8 text (tokenizers read only valid Unicode): fix or drop the row",
                file_, row_, bad.offset, bad.column);
  }
  record.value = std::move(value);
  record.origin = {file_, 0, row_++};
  ++in_batch_;
  return true;
}

std::vector<std::string> field_names(const arrow::Schema& schema) {
  std::vector<std::string> names;
  for (const auto& f : schema.fields()) names.push_back(f->name());
  return names;
}

std::vector<int> column_indices(const arrow::Schema& schema, const std::vector<std::string>& wanted,
                                const std::string& file) {
  std::vector<int> out;
  if (wanted.empty()) {
    for (int i = 0; i < schema.num_fields(); ++i) out.push_back(i);
    return out;
  }
  for (const auto& name : wanted) {
    const int i = schema.GetFieldIndex(name);
    FSDPP_CHECK_AS(ConfigError, i >= 0, "[data] {} has no column '{}'; its columns: {}", file, name,
                   column_list(field_names(schema)));
    out.push_back(i);
  }
  return out;
}

void check_arrow(const arrow::Status& status, const std::string& file, const char* what) {
  FSDPP_CHECK_AS(ConfigError, status.ok(), "[data] {}: {}: {}", file, what, status.ToString());
}

}  // namespace fsdpp::data::detail
