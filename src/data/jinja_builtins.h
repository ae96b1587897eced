#pragma once
// What a chat template can call: jinja2's filters and tests (jinja_filters.cpp), the methods of
// Python's str, dict and list that the sandbox allows (jinja_methods.cpp), and the globals
// transformers adds: raise_exception, strftime_now, namespace, dict, range.

#include <initializer_list>
#include <optional>
#include <string>

#include "jinja_value.h"

namespace fsdpp::data::jinja {

class Evaluator;

// Throws RenderError "unknown filter 'x'; ..." for a name jinja2 would not find either, and
// for the few jinja2 filters left out here.
Value apply_filter(Evaluator& ev, const std::string& name, const Value& value, CallArgs& args);
bool apply_test(Evaluator& ev, const std::string& name, const Value& value, CallArgs& args);
bool has_filter(const std::string& name);
bool has_test(const std::string& name);

// The method `name` of value's Python type, bound to it, when the sandbox would give it;
// nothing otherwise. A method that would modify the value (list.append, dict.update) throws
// the sandbox's SecurityError as a RenderError.
std::optional<Value> bound_method(const Value& self, const std::string& name);

// A global function by name (range, namespace, dict, raise_exception, strftime_now); nothing
// for other names.
std::optional<Value> global_function(const std::string& name);

// str.format(*args, **kwargs): {} / {0} / {name}, with !s / !r; format specs are refused.
std::string str_format(const std::string& format, CallArgs& args);
// Python's format % args: a tuple gives the positional values, a dict the %(name)s ones, any
// other value is the one value. %s %r %d %i %f %e %g %x %o %c %% with flags, width, precision.
std::string percent_format(const std::string& format, const Value& args);

// transformers' TemplateNamespace refuses attribute names that start with '_'.
void check_namespace_attribute(const std::string& name);

// Reads a call's arguments by position or keyword, as a Python signature would, and refuses
// the ones left over.
class ArgReader {
 public:
  ArgReader(std::string function, CallArgs& args, std::initializer_list<const char*> names);
  // Argument i (by position, or by its name); `fallback` when not given.
  Value get(size_t i, Value fallback = Value());
  bool given(size_t i) const;
  // Throws when an argument was passed that the signature does not have.
  void finish() const;

 private:
  std::string function_;
  CallArgs& args_;
  std::vector<const char*> names_;
};

// The value of `path` ("a.b.0") read from `v` as jinja2's attribute filters read it
// (map(attribute=...), selectattr, sort(attribute=...)).
Value attribute_path(Evaluator& ev, const Value& v, const std::string& path);

}  // namespace fsdpp::data::jinja
