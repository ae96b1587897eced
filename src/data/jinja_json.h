#pragma once
// JSON in and out of a chat template's values.
//
// In: the context (messages, tools, ...) as nlohmann::ordered_json, so that objects keep the
// order of their keys as Python dicts do; a template's `tool | tojson` prints them in that order.
// Out: the `tojson` filter as transformers defines it for chat templates, json.dumps(x,
// ensure_ascii=False, indent=None, separators=None, sort_keys=False): ", " and ": " between
// items (",", ": " with an indent), non-ASCII text as is, floats as Python's repr.

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "jinja_value.h"

namespace fsdpp::data::jinja {

Value from_json(const nlohmann::ordered_json& j);

struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // json.dumps' indent: nothing (one line), or the unit of indentation
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};

// json.dumps; a value JSON cannot hold (undefined, a namespace, a function) throws a RenderError
// as Python's TypeError says it: "Object of type Undefined is not JSON serializable".
std::string dump_json(const Value& v, const JsonDumpOptions& options);

}  // namespace fsdpp::data::jinja
