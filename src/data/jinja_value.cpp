#include "jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "jinja_error.h"
#include "jinja_text.h"

namespace fsdpp::data::jinja {

namespace {

bool key_matches(const Value& key, std::string_view name) { return key.is_string() && key.as_string() == name; }

bool numbers_equal(const Value& a, const Value& b) {
  if (a.is_float() || b.is_float()) return a.float_value() == b.float_value();
  return a.int_value() == b.int_value();
}

}  // namespace

const Value* DictData::find(const Value& key) const {
  if (key.is_string()) return find(key.as_string());
  for (const auto& [k, v] : items)
    if (k.equals(key)) return &v;
  return nullptr;
}

const Value* DictData::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (key_matches(k, key)) return &v;
  return nullptr;
}

void DictData::set(Value key, Value value) {
  for (auto& [k, v] : items) {
    if (k.equals(key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

const Value* NamespaceData::find(std::string_view name) const {
  for (const auto& [k, v] : attrs)
    if (k == name) return &v;
  return nullptr;
}

void NamespaceData::set(const std::string& name, Value value) {
  for (auto& [k, v] : attrs) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  attrs.emplace_back(name, std::move(value));
}

Value Value::list(ValueList items) { return Value(std::make_shared<const ValueList>(std::move(items))); }

Value Value::tuple(ValueList items) {
  Value v = list(std::move(items));
  v.tuple_ = true;
  return v;
}

Value Value::dict(DictData d) { return Value(std::make_shared<const DictData>(std::move(d))); }

Value Value::make_namespace() { return Value(std::make_shared<NamespaceData>()); }

Value Value::function(std::string name, std::function<Value(Evaluator&, CallArgs&)> call) {
  return Value(std::make_shared<const Function>(Function{std::move(name), std::move(call)}));
}

Value::Kind Value::kind() const {
  switch (data_.index()) {
    case 0: return Kind::kUndefined;
    case 1: return Kind::kNone;
    case 2: return Kind::kBool;
    case 3: return Kind::kInt;
    case 4: return Kind::kFloat;
    case 5: return Kind::kString;
    case 6: return tuple_ ? Kind::kTuple : Kind::kList;
    case 7: return Kind::kDict;
    case 8: return Kind::kNamespace;
    default: return Kind::kCallable;
  }
}

int64_t Value::int_value() const {
  if (is_bool()) return as_bool() ? 1 : 0;
  if (is_int()) return as_int();
  if (is_float()) return static_cast<int64_t>(as_float());
  throw RenderError(fmt::format("an integer is required, not {}", type_name()));
}

double Value::float_value() const {
  if (is_float()) return as_float();
  if (!is_number()) throw RenderError(fmt::format("a number is required, not {}", type_name()));
  return static_cast<double>(int_value());
}

const ValueList& Value::items() const { return *std::get<std::shared_ptr<const ValueList>>(data_); }

bool Value::truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return as_bool();
    case Kind::kInt: return as_int() != 0;
    case Kind::kFloat: return as_float() != 0.0;
    case Kind::kString: return !as_string().empty();
    case Kind::kList:
    case Kind::kTuple: return !items().empty();
    case Kind::kDict: return !as_dict().items.empty();
    default: return true;
  }
}

bool Value::equals(const Value& other) const {
  if (is_number() && other.is_number()) return numbers_equal(*this, other);
  if (kind() != other.kind()) return false;
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return as_string() == other.as_string();
    case Kind::kList:
    case Kind::kTuple: {
      const auto& a = items();
      const auto& b = other.items();
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i)
        if (!a[i].equals(b[i])) return false;
      return true;
    }
    case Kind::kDict: {
      const auto& a = as_dict().items;
      const auto& b = other.as_dict();
      if (a.size() != b.items.size()) return false;
      for (const auto& [k, v] : a) {
        const Value* w = b.find(k);
        if (!w || !v.equals(*w)) return false;
      }
      return true;
    }
    default: return same_as(other);
  }
}

bool Value::same_as(const Value& other) const {
  if (kind() != other.kind()) return false;
  switch (kind()) {
    case Kind::kList:
    case Kind::kTuple:
    case Kind::kDict:
    case Kind::kNamespace:
    case Kind::kCallable: {
      auto pointer = [](const Data& d) {
        return std::visit(
            [](const auto& x) -> const void* {
              using T = std::decay_t<decltype(x)>;
              if constexpr (std::is_same_v<T, std::shared_ptr<const ValueList>> ||
                            std::is_same_v<T, std::shared_ptr<const DictData>> ||
                            std::is_same_v<T, std::shared_ptr<NamespaceData>> ||
                            std::is_same_v<T, std::shared_ptr<const Function>>)
                return x.get();
              else
                return nullptr;
            },
            d);
      };
      return pointer(data_) == pointer(other.data_);
    }
    default: return equals(other);
  }
}

std::string Value::type_name() const {
  switch (kind()) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return "list";
    case Kind::kTuple: return "tuple";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "Namespace";
    default: return "function";
  }
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // The shortest round-trip digits in exponent form ("1.5e+20", "-1e-05"), then laid out as
  // Python's repr lays them out.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exponent = std::atoi(sci.c_str() + e + 1);
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out;
  }
  if (exponent < 0) {
    out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
    out += digits + std::string(static_cast<size_t>(exponent) + 1 - digits.size(), '0') + ".0";
  } else {
    out += digits.substr(0, static_cast<size_t>(exponent) + 1) + "." + digits.substr(static_cast<size_t>(exponent) + 1);
  }
  return out;
}

namespace {

std::string container_repr(const Value& v) {
  std::string out;
  switch (v.kind()) {
    case Value::Kind::kList:
    case Value::Kind::kTuple: {
      const auto& items = v.items();
      out = v.is_tuple() ? "(" : "[";
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        out += to_repr(items[i]);
      }
      if (v.is_tuple() && items.size() == 1) out += ",";
      out += v.is_tuple() ? ")" : "]";
      return out;
    }
    case Value::Kind::kDict: {
      out = "{";
      bool first = true;
      for (const auto& [k, val] : v.as_dict().items) {
        if (!first) out += ", ";
        first = false;
        out += to_repr(k) + ": " + to_repr(val);
      }
      return out + "}";
    }
    case Value::Kind::kNamespace: {
      // jinja2's Namespace repr: "<Namespace {'a': 1}>".
      out = "<Namespace {";
      bool first = true;
      for (const auto& [k, val] : v.as_namespace().attrs) {
        if (!first) out += ", ";
        first = false;
        out += text::repr(k) + ": " + to_repr(val);
      }
      return out + "}>";
    }
    default: return "<function " + v.as_function().name + ">";
  }
}

}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "";
    case Value::Kind::kNone: return "None";
    case Value::Kind::kBool: return v.as_bool() ? "True" : "False";
    case Value::Kind::kInt: return std::to_string(v.as_int());
    case Value::Kind::kFloat: return float_repr(v.as_float());
    case Value::Kind::kString: return v.as_string();
    default: return container_repr(v);
  }
}

std::string to_repr(const Value& v) {
  if (v.is_string()) return text::repr(v.as_string());
  if (v.is_undefined()) return "Undefined";
  return to_str(v);
}

bool less_than(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.float_value() < b.float_value();
    return a.int_value() < b.int_value();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // UTF-8 bytes sort as code points
  if (a.kind() == b.kind() && a.is_sequence_like()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!x[i].equals(y[i])) return less_than(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  throw RenderError(fmt::format("'<' is not supported between instances of '{}' and '{}'", a.type_name(), b.type_name()));
}

}  // namespace fsdpp::data::jinja
