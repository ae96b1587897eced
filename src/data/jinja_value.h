#pragma once
// The values a chat template computes with, and the Python behaviour templates rely on.
//
// Hugging Face chat templates are Jinja run by Python (transformers renders them with jinja2), so
// what they print and decide depends on Python's rules: `{{ 1.0 }}` prints "1.0", `1 == 1.0` and
// `true == 1` hold, `[] or 'x'` is 'x', `{{ [1, 'a'] }}` prints "[1, 'a']", and an undefined
// variable prints nothing but fails when its attribute is read (jinja2's default Undefined, which
// transformers uses). Value mirrors those types: undefined, None, bool, int, float, str, list,
// tuple, dict (insertion-ordered, as Python's), jinja2's namespace, and callables (globals,
// bound methods, macros).
//
// Lists, tuples and dicts are shared and never modified after they are built: transformers
// renders in jinja2's ImmutableSandboxedEnvironment, where `list.append` is refused, so sharing
// is invisible to a template. A namespace is the one mutable object (`{% set ns.x = ... %}`)
// and is shared by reference, as in Python.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace fsdpp::data::jinja {

class Value;
class Evaluator;

using ValueList = std::vector<Value>;

// A Python dict: insertion-ordered; keys compare as Python's do (1 == 1.0 == True).
struct DictData {
  std::vector<std::pair<Value, Value>> items;

  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  const Value* find(const std::string& key) const { return find(std::string_view(key)); }
  const Value* find(const char* key) const { return find(std::string_view(key)); }
  // Inserts or replaces, keeping the position of an existing key (Python's d[k] = v).
  void set(Value key, Value value);
};

// jinja2's namespace(): attributes assigned with `{% set ns.name = value %}`.
struct NamespaceData {
  std::vector<std::pair<std::string, Value>> attrs;

  const Value* find(std::string_view name) const;
  void set(const std::string& name, Value value);
};

// Positional and keyword arguments of a call, a filter or a test.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct Function {
  std::string name;  // for messages: "raise_exception", "str.split", "macro render_tool"
  std::function<Value(Evaluator&, CallArgs&)> call;
};

// Why a value is undefined, as jinja2 says it when the value is then used: "'x' is undefined",
// "'dict object' has no attribute 'role'".
struct UndefinedInfo {
  std::string hint;
};

struct NoneValue {};

class Value {
 public:
  enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kTuple, kDict, kNamespace, kCallable };

  Value() : data_(UndefinedInfo{}) {}
  static Value undefined(std::string hint) { return Value(UndefinedInfo{std::move(hint)}); }
  static Value none() { return Value(NoneValue{}); }
  Value(bool b) : data_(b) {}  // NOLINT: implicit like Python's literals
  Value(int v) : data_(static_cast<int64_t>(v)) {}
  Value(int64_t v) : data_(v) {}
  Value(double v) : data_(v) {}
  Value(std::string s) : data_(std::move(s)) {}
  Value(const char* s) : data_(std::string(s)) {}
  static Value list(ValueList items);
  static Value tuple(ValueList items);
  static Value dict(DictData d);
  static Value make_namespace();
  static Value function(std::string name, std::function<Value(Evaluator&, CallArgs&)> call);

  Kind kind() const;
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_tuple() const { return kind() == Kind::kTuple; }
  bool is_sequence_like() const { return is_list() || is_tuple(); }  // list or tuple
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_namespace() const { return kind() == Kind::kNamespace; }
  bool is_callable() const { return kind() == Kind::kCallable; }
  // Python's numbers.Number: bool, int and float.
  bool is_number() const { return is_bool() || is_int() || is_float(); }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return std::get<int64_t>(data_); }
  double as_float() const { return std::get<double>(data_); }
  // bool, int or float as an int64 (bool as 0/1) or a double.
  int64_t int_value() const;
  double float_value() const;
  const std::string& as_string() const { return std::get<std::string>(data_); }
  const ValueList& items() const;  // list or tuple
  const DictData& as_dict() const { return *std::get<std::shared_ptr<const DictData>>(data_); }
  NamespaceData& as_namespace() const { return *std::get<std::shared_ptr<NamespaceData>>(data_); }
  const Function& as_function() const { return *std::get<std::shared_ptr<const Function>>(data_); }
  const std::string& undefined_hint() const { return std::get<UndefinedInfo>(data_).hint; }

  // Python's bool(x); undefined is false.
  bool truthy() const;
  // Python's ==. Undefined equals undefined (jinja2), a list never equals a tuple.
  bool equals(const Value& other) const;
  // Python's identity for `is sameas`: None, True and False are singletons; containers, namespaces
  // and functions are the same object; other values compare equal and of one type.
  bool same_as(const Value& other) const;

  // The Python type name in messages: "str", "int", "NoneType", "dict", "Undefined".
  std::string type_name() const;

 private:
  using Data = std::variant<UndefinedInfo, NoneValue, bool, int64_t, double, std::string,
                            std::shared_ptr<const ValueList>, std::shared_ptr<const DictData>,
                            std::shared_ptr<NamespaceData>, std::shared_ptr<const Function>>;
  explicit Value(Data d) : data_(std::move(d)) {}
  Data data_;
  bool tuple_ = false;  // a list payload printed and compared as a tuple
};

// Python's str(x), what `{{ x }}`, `~` and the string filter write: "None", "True", "1.0",
// "[1, 'a']", "{'k': 'v'}"; undefined is "".
std::string to_str(const Value& v);
// Python's repr(x): strings quoted as Python quotes them ('it\'s' -> "it's").
std::string to_repr(const Value& v);
// Python's float repr: the shortest digits that read back the same number; exponent form below
// 1e-4 and from 1e16 on ("1e-05", "1.5e+20"), else positional with at least one decimal.
std::string float_repr(double d);

// Python's <, for sort, min, max and the comparison operators: numbers with numbers, strings
// with strings, lists (tuples) item by item. Other pairs throw a TypeError-like error.
bool less_than(const Value& a, const Value& b);

}  // namespace fsdpp::data::jinja
