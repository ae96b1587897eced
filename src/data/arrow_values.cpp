#include "arrow_values.h"

#include <arrow/util/float16.h>

#include <vector>

#include "fsdpp/common/error.h"
#include "utf8_validate.h"

namespace fsdpp::data::detail {
namespace {

// The null check every type shares; value() sees only valid slots.
template <typename ArrayType>
class Typed : public ValueConverter {
 public:
  explicit Typed(const arrow::Array& array) : array_(static_cast<const ArrayType&>(array)) {}
  nlohmann::ordered_json at(int64_t i) const final { return array_.IsNull(i) ? nlohmann::ordered_json() : value(i); }

 protected:
  virtual nlohmann::ordered_json value(int64_t i) const = 0;
  const ArrayType& array_;
};

class NullValues : public ValueConverter {
 public:
  nlohmann::ordered_json at(int64_t) const override { return nullptr; }
};

template <typename ArrayType>
class Scalars : public Typed<ArrayType> {
 public:
  using Typed<ArrayType>::Typed;
  nlohmann::ordered_json value(int64_t i) const override { return this->array_.Value(i); }
};

class HalfFloats : public Typed<arrow::HalfFloatArray> {
 public:
  using Typed::Typed;
  nlohmann::ordered_json value(int64_t i) const override {
    return arrow::util::Float16::FromBits(array_.Value(i)).ToFloat();
  }
};

template <typename ArrayType>
class Strings : public Typed<ArrayType> {
 public:
  Strings(const arrow::Array& array, std::string column) : Typed<ArrayType>(array), column_(std::move(column)) {}
  nlohmann::ordered_json value(int64_t i) const override {
    const std::string_view s = this->array_.GetView(i);
    if (const size_t bad = invalid_utf8_offset(s); bad != kValidUtf8) throw InvalidUtf8Value{column_, bad};
    return std::string(s);
  }

 private:
  std::string column_;
};

template <typename ArrayType>
class Lists : public Typed<ArrayType> {
 public:
  Lists(const arrow::Array& array, const std::string& column, const std::string& file)
      : Typed<ArrayType>(array),
        items_(make_value_converter(*this->array_.values(), column + "[]", file)) {}
  nlohmann::ordered_json value(int64_t i) const override {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    const int64_t begin = this->array_.value_offset(i), n = this->array_.value_length(i);
    for (int64_t k = 0; k < n; ++k) out.push_back(items_->at(begin + k));
    return out;
  }

 private:
  std::unique_ptr<ValueConverter> items_;
};

class Structs : public Typed<arrow::StructArray> {
 public:
  Structs(const arrow::Array& array, const std::string& column, const std::string& file) : Typed(array) {
    const auto& type = *array_.struct_type();
    for (int k = 0; k < type.num_fields(); ++k) {
      names_.push_back(type.field(k)->name());
      // field() applies the struct's own offset; the arrays live as long as the batch.
      children_.push_back(array_.field(k));
      fields_.push_back(make_value_converter(*children_.back(), column + "." + names_.back(), file));
    }
  }
  nlohmann::ordered_json value(int64_t i) const override {
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    for (size_t k = 0; k < fields_.size(); ++k) out[names_[k]] = fields_[k]->at(i);
    return out;
  }

 private:
  std::vector<std::string> names_;
  std::vector<std::shared_ptr<arrow::Array>> children_;
  std::vector<std::unique_ptr<ValueConverter>> fields_;
};

class Dictionary : public Typed<arrow::DictionaryArray> {
 public:
  Dictionary(const arrow::Array& array, const std::string& column, const std::string& file)
      : Typed(array), dictionary_(array_.dictionary()),
        values_(make_value_converter(*dictionary_, column, file)) {}
  nlohmann::ordered_json value(int64_t i) const override { return values_->at(array_.GetValueIndex(i)); }

 private:
  std::shared_ptr<arrow::Array> dictionary_;
  std::unique_ptr<ValueConverter> values_;
};

}  // namespace

std::unique_ptr<ValueConverter> make_value_converter(const arrow::Array& array, const std::string& column,
                                                     const std::string& file) {
  using T = arrow::Type;
  switch (array.type_id()) {
    case T::NA: return std::make_unique<NullValues>();
    case T::BOOL: return std::make_unique<Scalars<arrow::BooleanArray>>(array);
    case T::INT8: return std::make_unique<Scalars<arrow::Int8Array>>(array);
    case T::INT16: return std::make_unique<Scalars<arrow::Int16Array>>(array);
    case T::INT32: return std::make_unique<Scalars<arrow::Int32Array>>(array);
    case T::INT64: return std::make_unique<Scalars<arrow::Int64Array>>(array);
    case T::UINT8: return std::make_unique<Scalars<arrow::UInt8Array>>(array);
    case T::UINT16: return std::make_unique<Scalars<arrow::UInt16Array>>(array);
    case T::UINT32: return std::make_unique<Scalars<arrow::UInt32Array>>(array);
    case T::UINT64: return std::make_unique<Scalars<arrow::UInt64Array>>(array);
    case T::HALF_FLOAT: return std::make_unique<HalfFloats>(array);
    case T::FLOAT: return std::make_unique<Scalars<arrow::FloatArray>>(array);
    case T::DOUBLE: return std::make_unique<Scalars<arrow::DoubleArray>>(array);
    case T::STRING: return std::make_unique<Strings<arrow::StringArray>>(array, column);
    case T::LARGE_STRING: return std::make_unique<Strings<arrow::LargeStringArray>>(array, column);
    case T::STRING_VIEW: return std::make_unique<Strings<arrow::StringViewArray>>(array, column);
    case T::LIST: return std::make_unique<Lists<arrow::ListArray>>(array, column, file);
    case T::LARGE_LIST: return std::make_unique<Lists<arrow::LargeListArray>>(array, column, file);
    case T::FIXED_SIZE_LIST: return std::make_unique<Lists<arrow::FixedSizeListArray>>(array, column, file);
    case T::STRUCT: return std::make_unique<Structs>(array, column, file);
    case T::DICTIONARY: return std::make_unique<Dictionary>(array, column, file);
    default: break;
  }
  FSDPP_THROW(ConfigError, "[data] {}: column '{}' has Arrow type {}, which has no JSON form here; "
              "supported: strings (also large, view and dictionary-encoded), integers, floats, bools, "
              "nulls, lists and structs of them. Drop or convert the column (or leave it out: "
              "examples read only their own columns)", file, column, array.type()->ToString());
}

}  // namespace fsdpp::data::detail
