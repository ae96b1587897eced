#include "jinja_json.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "jinja_error.h"
#include "jinja_text.h"

namespace fsdpp::data::jinja {

Value from_json(const nlohmann::ordered_json& j) {
  using T = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case T::null: return Value::none();
    case T::boolean: return Value(j.get<bool>());
    case T::number_integer: return Value(j.get<int64_t>());
    case T::number_unsigned: {
      const auto u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case T::number_float: return Value(j.get<double>());
    case T::string: return Value(j.get<std::string>());
    case T::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(from_json(x));
      return Value::list(std::move(items));
    }
    case T::object: {
      DictData d;
      d.items.reserve(j.size());
      for (const auto& [k, v] : j.items()) d.items.emplace_back(Value(k), from_json(v));
      return Value::dict(std::move(d));
    }
    default: return Value();  // discarded / binary: nothing a template can read
  }
}

namespace {

void dump_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out.push_back('"');
  for (char32_t c : text::decode(s)) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c >= 0x7f)) {
          if (c >= 0x10000) {
            const char32_t v = c - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3ff));
          } else {
            out += fmt::format("\\u{:04x}", static_cast<uint32_t>(c));
          }
        } else {
          text::append_utf8(out, c);
        }
    }
  }
  out.push_back('"');
}

std::string float_json(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return float_repr(d);
}

// json.dumps turns the keys it accepts into strings: str as is, numbers, True/False/None.
std::string key_string(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::kString: return k.as_string();
    case Value::Kind::kBool: return k.as_bool() ? "true" : "false";
    case Value::Kind::kNone: return "null";
    case Value::Kind::kInt: return std::to_string(k.as_int());
    case Value::Kind::kFloat: return float_json(k.as_float());
    default:
      throw RenderError(fmt::format("keys must be str, int, float, bool or None, not {}", k.type_name()));
  }
}

void dump(std::string& out, const Value& v, const JsonDumpOptions& o, int depth) {
  auto newline = [&](int level) {
    if (!o.indent) return;
    out.push_back('\n');
    for (int i = 0; i < level; ++i) out += *o.indent;
  };
  switch (v.kind()) {
    case Value::Kind::kNone: out += "null"; return;
    case Value::Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::kInt: out += std::to_string(v.as_int()); return;
    case Value::Kind::kFloat: out += float_json(v.as_float()); return;
    case Value::Kind::kString: dump_string(out, v.as_string(), o.ensure_ascii); return;
    case Value::Kind::kList:
    case Value::Kind::kTuple: {
      const auto& items = v.items();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_separator;
        newline(depth + 1);
        dump(out, items[i], o, depth + 1);
      }
      newline(depth);
      out.push_back(']');
      return;
    }
    case Value::Kind::kDict: {
      std::vector<const std::pair<Value, Value>*> items;
      for (const auto& kv : v.as_dict().items) items.push_back(&kv);
      if (items.empty()) {
        out += "{}";
        return;
      }
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return less_than(a->first, b->first); });
      out.push_back('{');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_separator;
        newline(depth + 1);
        dump_string(out, key_string(items[i]->first), o.ensure_ascii);
        out += o.key_separator;
        dump(out, items[i]->second, o, depth + 1);
      }
      newline(depth);
      out.push_back('}');
      return;
    }
    default:
      throw RenderError(fmt::format("Object of type {} is not JSON serializable", v.type_name()));
  }
}

}  // namespace

std::string dump_json(const Value& v, const JsonDumpOptions& options) {
  std::string out;
  dump(out, v, options, 0);
  return out;
}

}  // namespace fsdpp::data::jinja
