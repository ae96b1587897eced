// jinja2's built-in filters and tests (jinja2/filters.py, jinja2/tests.py) as chat templates use
// them, with transformers' tojson in place of jinja2's (json.dumps without HTML escaping, with
// its ensure_ascii, indent, separators and sort_keys).
#include <algorithm>
#include <cmath>
#include <functional>
#include <unordered_map>

#include <fmt/format.h>

#include "jinja_builtins.h"
#include "jinja_error.h"
#include "jinja_eval.h"
#include "jinja_json.h"
#include "jinja_text.h"

namespace fsdpp::data::jinja {

namespace {

using FilterFn = std::function<Value(Evaluator&, const Value&, CallArgs&)>;
using TestFn = std::function<bool(Evaluator&, const Value&, CallArgs&)>;

int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kString: return static_cast<int64_t>(text::length(v.as_string()));
    case Value::Kind::kList:
    case Value::Kind::kTuple: return static_cast<int64_t>(v.items().size());
    case Value::Kind::kDict: return static_cast<int64_t>(v.as_dict().items.size());
    case Value::Kind::kUndefined: return 0;
    default: throw RenderError(fmt::format("object of type '{}' has no len()", v.type_name()));
  }
}

// The sort key of jinja2's sort, dictsort, unique, min and max: strings lower-cased unless
// case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(text::lower(v.as_string()));
  return v;
}

Value key_of(Evaluator& ev, const Value& item, const Value& attribute, bool case_sensitive) {
  const Value v = attribute.is_none() || attribute.is_undefined() ? item : attribute_path(ev, item, to_str(attribute));
  return sort_key(v, case_sensitive);
}

Value filter_tojson(Evaluator&, const Value& value, CallArgs& args) {
  ArgReader r("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  r.finish();
  JsonDumpOptions o;
  o.ensure_ascii = r.get(0, Value(false)).truthy();
  const Value indent = r.get(1, Value::none());
  if (indent.is_string()) {
    o.indent = indent.as_string();
  } else if (indent.is_int() || indent.is_bool()) {
    o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, indent.int_value())), ' ');
  } else if (!indent.is_none()) {
    throw RenderError(fmt::format("tojson: indent must be an int, a str or None, not {}", indent.type_name()));
  }
  if (o.indent) o.item_separator = ",";
  const Value separators = r.get(2, Value::none());
  if (!separators.is_none()) {
    const ValueList seps = iterate(separators);
    if (seps.size() != 2 || !seps[0].is_string() || !seps[1].is_string())
      throw RenderError("tojson: separators must be a pair of strings (item_separator, key_separator)");
    o.item_separator = seps[0].as_string();
    o.key_separator = seps[1].as_string();
  }
  o.sort_keys = r.get(3, Value(false)).truthy();
  return Value(dump_json(value, o));
}

Value filter_indent(Evaluator&, const Value& value, CallArgs& args) {
  ArgReader r("indent", args, {"width", "first", "blank"});
  r.finish();
  const Value width = r.get(0, Value(4));
  const std::string indention = width.is_string() ? width.as_string() : std::string(static_cast<size_t>(std::max<int64_t>(0, width.int_value())), ' ');
  const std::vector<std::string> lines = text::splitlines(to_str(value) + "\n", false);
  std::string rv;
  if (r.get(2, Value(false)).truthy()) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + indention : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    if (lines.size() > 1) {
      rv += "\n";
      for (size_t i = 1; i < lines.size(); ++i) rv += (i > 1 ? "\n" : "") + (lines[i].empty() ? "" : indention + lines[i]);
    }
  }
  if (r.get(1, Value(false)).truthy()) rv = indention + rv;
  return Value(rv);
}

// jinja2's title filter: the first letter of each run of characters between '-', whitespace and
// opening brackets upper-cased, the rest lower-cased.
std::string jinja_title(const std::string& s) {
  std::u32string out;
  bool word_start = true;
  for (char32_t c : text::decode(s)) {
    const bool separator = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || text::is_space(c);
    std::string one = text::encode(std::u32string(1, c));
    one = separator ? one : word_start ? text::upper(one) : text::lower(one);
    out += text::decode(one);
    word_start = separator;
  }
  return text::encode(out);
}

// Python's float(str): surrounding whitespace allowed, underscores between digits, inf/nan.
std::optional<double> parse_float(const std::string& s) {
  std::string t;
  for (char c : text::strip(s, std::nullopt, true, true))
    if (c != '_') t.push_back(c);
  if (t.empty()) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return d;
}

Value filter_int(Evaluator&, const Value& value, CallArgs& args) {
  ArgReader r("int", args, {"default", "base"});
  r.finish();
  const Value fallback = r.get(0, Value(0));
  if (value.is_undefined()) throw RenderError(value.undefined_hint().empty() ? "int: an undefined value" : value.undefined_hint());
  if (value.is_number()) return Value(value.is_float() ? static_cast<int64_t>(std::trunc(value.as_float())) : value.int_value());
  if (value.is_string()) {
    std::string t;
    for (char c : text::strip(value.as_string(), std::nullopt, true, true))
      if (c != '_') t.push_back(c);
    const int64_t base = r.get(1, Value(10)).int_value();
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(t.c_str(), &end, static_cast<int>(base));
    if (!t.empty() && end == t.c_str() + t.size() && errno == 0) return Value(static_cast<int64_t>(v));
    if (auto d = parse_float(value.as_string()); d && std::isfinite(*d)) return Value(static_cast<int64_t>(std::trunc(*d)));
  }
  return fallback;
}

Value filter_float(Evaluator&, const Value& value, CallArgs& args) {
  ArgReader r("float", args, {"default"});
  r.finish();
  if (value.is_undefined()) throw RenderError(value.undefined_hint().empty() ? "float: an undefined value" : value.undefined_hint());
  if (value.is_number()) return Value(value.float_value());
  if (value.is_string())
    if (auto d = parse_float(value.as_string())) return Value(*d);
  return r.get(0, Value(0.0));
}

Value filter_round(Evaluator&, const Value& value, CallArgs& args) {
  ArgReader r("round", args, {"precision", "method"});
  r.finish();
  const int64_t precision = r.get(0, Value(0)).int_value();
  const std::string method = to_str(r.get(1, Value("common")));
  if (!value.is_number()) throw RenderError(fmt::format("round: a number is expected, not {}", value.type_name()));
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = value.float_value() * scale;
  double y;
  if (method == "common") y = std::nearbyint(x);  // Python's round(): halves to even
  else if (method == "floor") y = std::floor(x);
  else if (method == "ceil") y = std::ceil(x);
  else throw RenderError("round: method must be 'common', 'ceil' or 'floor'");
  if (value.is_float() || method != "common") return Value(y / scale);
  return Value(static_cast<int64_t>(y / scale));
}

ValueList sorted(Evaluator& ev, ValueList items, bool reverse, bool case_sensitive, const Value& attribute) {
  std::vector<std::pair<Value, size_t>> keyed;
  for (size_t i = 0; i < items.size(); ++i) keyed.emplace_back(key_of(ev, items[i], attribute, case_sensitive), i);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? less_than(b.first, a.first) : less_than(a.first, b.first);
  });
  ValueList out;
  for (const auto& [k, i] : keyed) out.push_back(items[i]);
  return out;
}

Value filter_sort(Evaluator& ev, const Value& value, CallArgs& args) {
  ArgReader r("sort", args, {"reverse", "case_sensitive", "attribute"});
  r.finish();
  return Value::list(sorted(ev, iterate(value), r.get(0, Value(false)).truthy(), r.get(1, Value(false)).truthy(),
                            r.get(2, Value::none())));
}

Value filter_dictsort(Evaluator& ev, const Value& value, CallArgs& args) {
  ArgReader r("dictsort", args, {"case_sensitive", "by", "reverse"});
  r.finish();
  if (!value.is_dict()) throw RenderError(fmt::format("dictsort: a dict is expected, not {}", value.type_name()));
  const std::string by = to_str(r.get(1, Value("key")));
  if (by != "key" && by != "value") throw RenderError("dictsort: 'by' must be 'key' or 'value'");
  ValueList pairs;
  for (const auto& [k, v] : value.as_dict().items) pairs.push_back(Value::tuple({k, v}));
  return Value::list(sorted(ev, std::move(pairs), r.get(2, Value(false)).truthy(), r.get(0, Value(false)).truthy(),
                            Value(by == "key" ? "0" : "1")));
}

Value filter_unique(Evaluator& ev, const Value& value, CallArgs& args) {
  ArgReader r("unique", args, {"case_sensitive", "attribute"});
  r.finish();
  ValueList out, seen;
  for (const auto& item : iterate(value)) {
    const Value key = key_of(ev, item, r.get(1, Value::none()), r.get(0, Value(false)).truthy());
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return s.equals(key); })) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return Value::list(std::move(out));
}

Value filter_min_max(Evaluator& ev, const Value& value, CallArgs& args, bool max) {
  ArgReader r(max ? "max" : "min", args, {"case_sensitive", "attribute"});
  r.finish();
  const ValueList items = iterate(value);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  const bool cs = r.get(0, Value(false)).truthy();
  const Value attribute = r.get(1, Value::none());
  size_t best = 0;
  Value best_key = key_of(ev, items[0], attribute, cs);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = key_of(ev, items[i], attribute, cs);
    if (max ? less_than(best_key, k) : less_than(k, best_key)) {
      best = i;
      best_key = std::move(k);
    }
  }
  return items[best];
}

// select, reject, selectattr, rejectattr: keep the items whose test (or truth) is `keep`.
Value select_items(Evaluator& ev, const Value& value, CallArgs& args, bool keep, bool by_attribute) {
  CallArgs rest;
  Value attribute;
  size_t next = 0;
  if (by_attribute) {
    if (args.positional.empty()) throw RenderError("selectattr/rejectattr need the attribute to test");
    attribute = args.positional[next++];
  }
  std::string test;
  if (next < args.positional.size()) test = to_str(args.positional[next++]);
  rest.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next), args.positional.end());
  rest.keyword = args.keyword;
  ValueList out;
  for (const auto& item : iterate(value)) {
    const Value subject = by_attribute ? attribute_path(ev, item, to_str(attribute)) : item;
    CallArgs test_args = rest;
    const bool passed = test.empty() ? subject.truthy() : apply_test(ev, test, subject, test_args);
    if (passed == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value filter_map(Evaluator& ev, const Value& value, CallArgs& args) {
  ValueList out;
  const auto attr = std::find_if(args.keyword.begin(), args.keyword.end(), [](const auto& kv) { return kv.first == "attribute"; });
  if (attr != args.keyword.end() || args.positional.empty()) {
    if (attr == args.keyword.end()) throw RenderError("map: a filter name or attribute= is expected");
    Value fallback;
    for (const auto& [k, v] : args.keyword) {
      if (k == "default") fallback = v;
      else if (k != "attribute") throw RenderError(fmt::format("map() got an unexpected keyword argument '{}'", k));
    }
    for (const auto& item : iterate(value)) {
      Value v = attribute_path(ev, item, to_str(attr->second));
      out.push_back(v.is_undefined() && !fallback.is_undefined() ? fallback : v);
    }
    return Value::list(std::move(out));
  }
  const std::string name = to_str(args.positional[0]);
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const auto& item : iterate(value)) {
    CallArgs a = rest;
    out.push_back(apply_filter(ev, name, item, a));
  }
  return Value::list(std::move(out));
}

Value filter_batch(Evaluator&, const Value& value, CallArgs& args) {
  ArgReader r("batch", args, {"linecount", "fill_with"});
  r.finish();
  const int64_t n = r.get(0).int_value();
  if (n <= 0) throw RenderError("batch: linecount must be positive");
  const bool fill = r.given(1);
  ValueList out, cur;
  for (const auto& item : iterate(value)) {
    cur.push_back(item);
    if (static_cast<int64_t>(cur.size()) == n) out.push_back(Value::list(std::exchange(cur, {})));
  }
  if (!cur.empty()) {
    while (fill && static_cast<int64_t>(cur.size()) < n) cur.push_back(r.get(1));
    out.push_back(Value::list(std::move(cur)));
  }
  return Value::list(std::move(out));
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

Value first_or_last(const Value& value, bool last) {
  const ValueList items = iterate(value);
  if (items.empty()) return Value::undefined(last ? "No last item, sequence was empty." : "No first item, sequence was empty.");
  return last ? items.back() : items.front();
}

Value no_args(const char* name, CallArgs& args, Value result) {
  ArgReader(name, args, {}).finish();
  return result;
}

const std::unordered_map<std::string, FilterFn>& filters() {
  static const std::unordered_map<std::string, FilterFn> table = [] {
    std::unordered_map<std::string, FilterFn> t;
    t["abs"] = [](Evaluator&, const Value& v, CallArgs& a) {
      ArgReader("abs", a, {}).finish();
      if (!v.is_number()) throw RenderError(fmt::format("bad operand type for abs(): '{}'", v.type_name()));
      return v.is_float() ? Value(std::fabs(v.as_float())) : Value(static_cast<int64_t>(std::llabs(v.int_value())));
    };
    t["attr"] = [](Evaluator& ev, const Value& v, CallArgs& a) {
      ArgReader r("attr", a, {"name"});
      r.finish();
      return ev.get_attr(v, to_str(r.get(0)));
    };
    t["batch"] = filter_batch;
    t["capitalize"] = [](Evaluator&, const Value& v, CallArgs& a) { return no_args("capitalize", a, Value(text::capitalize(to_str(v)))); };
    t["center"] = [](Evaluator&, const Value& v, CallArgs& a) {
      ArgReader r("center", a, {"width"});
      r.finish();
      const std::string s = to_str(v);
      const int64_t width = r.get(0, Value(80)).int_value();
      const int64_t marg = width - static_cast<int64_t>(text::length(s));
      if (marg <= 0) return Value(s);
      const int64_t left = marg / 2 + (marg & width & 1);  // Python's str.center
      return Value(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(marg - left), ' '));
    };
    t["count"] = t["length"] = [](Evaluator&, const Value& v, CallArgs& a) { return no_args("length", a, Value(length_of(v))); };
    t["default"] = t["d"] = [](Evaluator&, const Value& v, CallArgs& a) {
      ArgReader r("default", a, {"default_value", "boolean"});
      r.finish();
      const bool use_default = v.is_undefined() || (r.get(1, Value(false)).truthy() && !v.truthy());
      return use_default ? r.get(0, Value("")) : v;
    };
    t["dictsort"] = filter_dictsort;
    t["escape"] = t["e"] = t["forceescape"] = [](Evaluator&, const Value& v, CallArgs& a) { return no_args("escape", a, Value(html_escape(to_str(v)))); };
    t["first"] = [](Evaluator&, const Value& v, CallArgs& a) { return no_args("first", a, first_or_last(v, false)); };
    t["last"] = [](Evaluator&, const Value& v, CallArgs& a) { return no_args("last", a, first_or_last(v, true)); };
    t["float"] = filter_float;
    t["format"] = [](Evaluator&, const Value& v, CallArgs& a) {
      // jinja2: soft_str(value) % (kwargs or args); args always as a tuple.
      if (!a.positional.empty() && !a.keyword.empty())
        throw RenderError("format: cannot mix positional and keyword arguments");
      if (!a.keyword.empty()) {
        DictData d;
        for (auto& [k, val] : a.keyword) d.set(Value(k), val);
        return Value(percent_format(to_str(v), Value::dict(std::move(d))));
      }
      return Value(percent_format(to_str(v), Value::tuple(a.positional)));
    };
    t["indent"] = filter_indent;
    t["int"] = filter_int;
    t["items"] = [](Evaluator&, const Value& v, CallArgs& a) {
      ArgReader("items", a, {}).finish();
      if (v.is_undefined()) return Value::list({});
      if (!v.is_dict()) throw RenderError(fmt::format("items: can only get item pairs from a mapping, not {}", v.type_name()));
      ValueList out;
      for (const auto& [k, val] : v.as_dict().items) out.push_back(Value::tuple({k, val}));
      return Value::list(std::move(out));
    };
    t["join"] = [](Evaluator& ev, const Value& v, CallArgs& a) {
      ArgReader r("join", a, {"d", "attribute"});
      r.finish();
      const std::string sep = to_str(r.get(0, Value("")));
      const Value attribute = r.get(1, Value::none());
      std::string out;
      bool first = true;
      for (const auto& item : iterate(v)) {
        if (!first) out += sep;
        first = false;
        out += to_str(attribute.is_none() ? item : attribute_path(ev, item, to_str(attribute)));
      }
      return Value(std::move(out));
    };
    t["list"] = [](Evaluator&, const Value& v, CallArgs& a) { return no_args("list", a, Value::list(iterate(v))); };
    t["lower"] = [](Evaluator&, const Value& v, CallArgs& a) { return no_args("lower", a, Value(text::lower(to_str(v)))); };
    t["upper"] = [](Evaluator&, const Value& v, CallArgs& a) { return no_args("upper", a, Value(text::upper(to_str(v)))); };
    t["map"] = filter_map;
    t["max"] = [](Evaluator& ev, const Value& v, CallArgs& a) { return filter_min_max(ev, v, a, true); };
    t["min"] = [](Evaluator& ev, const Value& v, CallArgs& a) { return filter_min_max(ev, v, a, false); };
    t["select"] = [](Evaluator& ev, const Value& v, CallArgs& a) { return select_items(ev, v, a, true, false); };
    t["reject"] = [](Evaluator& ev, const Value& v, CallArgs& a) { return select_items(ev, v, a, false, false); };
    t["selectattr"] = [](Evaluator& ev, const Value& v, CallArgs& a) { return select_items(ev, v, a, true, true); };
    t["rejectattr"] = [](Evaluator& ev, const Value& v, CallArgs& a) { return select_items(ev, v, a, false, true); };
    t["replace"] = [](Evaluator&, const Value& v, CallArgs& a) {
      ArgReader r("replace", a, {"old", "new", "count"});
      r.finish();
      const Value count = r.get(2, Value::none());
      return Value(text::replace(to_str(v), to_str(r.get(0)), to_str(r.get(1)), count.is_none() ? -1 : count.int_value()));
    };
    t["reverse"] = [](Evaluator&, const Value& v, CallArgs& a) {
      ArgReader("reverse", a, {}).finish();
      if (v.is_string()) {
        std::u32string u = text::decode(v.as_string());
        std::reverse(u.begin(), u.end());
        return Value(text::encode(u));
      }
      ValueList items = iterate(v);
      std::reverse(items.begin(), items.end());
      return Value::list(std::move(items));
    };
    t["round"] = filter_round;
    t["safe"] = [](Evaluator&, const Value& v, CallArgs& a) { return no_args("safe", a, Value(to_str(v))); };
    t["sort"] = filter_sort;
    t["string"] = [](Evaluator&, const Value& v, CallArgs& a) { return no_args("string", a, Value(to_str(v))); };
    t["sum"] = [](Evaluator& ev, const Value& v, CallArgs& a) {
      ArgReader r("sum", a, {"attribute", "start"});
      r.finish();
      const Value attribute = r.get(0, Value::none());
      Value total = r.get(1, Value(0));
      for (const auto& item : iterate(v)) {
        const Value x = attribute.is_none() ? item : attribute_path(ev, item, to_str(attribute));
        if (!total.is_number() || !x.is_number()) throw RenderError(fmt::format("sum: cannot add {} to {}", x.type_name(), total.type_name()));
        total = total.is_float() || x.is_float() ? Value(total.float_value() + x.float_value()) : Value(total.int_value() + x.int_value());
      }
      return total;
    };
    t["title"] = [](Evaluator&, const Value& v, CallArgs& a) { return no_args("title", a, Value(jinja_title(to_str(v)))); };
    t["tojson"] = filter_tojson;
    t["trim"] = [](Evaluator&, const Value& v, CallArgs& a) {
      ArgReader r("trim", a, {"chars"});
      r.finish();
      const Value chars = r.get(0, Value::none());
      return Value(text::strip(to_str(v), chars.is_none() ? std::nullopt : std::optional<std::string>(to_str(chars)), true, true));
    };
    t["unique"] = filter_unique;
    t["wordcount"] = [](Evaluator&, const Value& v, CallArgs& a) {
      return no_args("wordcount", a, Value(static_cast<int64_t>(text::split(to_str(v), std::nullopt, -1).size())));
    };
    return t;
  }();
  return table;
}

bool compare_test(const Value& v, CallArgs& args, const char* name, const std::function<bool(const Value&, const Value&)>& op) {
  ArgReader r(name, args, {"other"});
  r.finish();
  return op(v, r.get(0));
}

const std::unordered_map<std::string, TestFn>& tests() {
  static const std::unordered_map<std::string, TestFn> table = [] {
    std::unordered_map<std::string, TestFn> t;
    auto simple = [&t](const char* name, std::function<bool(const Value&)> f) {
      t[name] = [name, f](Evaluator&, const Value& v, CallArgs& a) {
        ArgReader(name, a, {}).finish();
        return f(v);
      };
    };
    simple("defined", [](const Value& v) { return !v.is_undefined(); });
    simple("undefined", [](const Value& v) { return v.is_undefined(); });
    simple("none", [](const Value& v) { return v.is_none(); });
    simple("boolean", [](const Value& v) { return v.is_bool(); });
    simple("true", [](const Value& v) { return v.is_bool() && v.as_bool(); });
    simple("false", [](const Value& v) { return v.is_bool() && !v.as_bool(); });
    simple("integer", [](const Value& v) { return v.is_int(); });
    simple("float", [](const Value& v) { return v.is_float(); });
    simple("number", [](const Value& v) { return v.is_number(); });
    simple("string", [](const Value& v) { return v.is_string(); });
    simple("mapping", [](const Value& v) { return v.is_dict(); });
    // Python: iter() works on str, list, tuple, dict, and on jinja2's Undefined (empty).
    simple("iterable", [](const Value& v) { return v.is_string() || v.is_sequence_like() || v.is_dict() || v.is_undefined(); });
    // len() and [] both exist: str, list, tuple, dict, and Undefined (its __getitem__ fails when called).
    simple("sequence", [](const Value& v) { return v.is_string() || v.is_sequence_like() || v.is_dict() || v.is_undefined(); });
    simple("callable", [](const Value& v) { return v.is_callable() || v.is_undefined(); });
    simple("escaped", [](const Value&) { return false; });
    simple("lower", [](const Value& v) { return text::all_of_class(to_str(v), 'l'); });
    simple("upper", [](const Value& v) { return text::all_of_class(to_str(v), 'u'); });
    // Python's value % 2 == 1 / == 0, floats included (2.5 is neither).
    simple("odd", [](const Value& v) {
      if (!v.is_number()) throw RenderError(fmt::format("odd: a number is expected, not {}", v.type_name()));
      if (v.is_float()) return std::fabs(std::fmod(v.as_float(), 2.0)) == 1.0;
      return v.int_value() % 2 != 0;
    });
    simple("even", [](const Value& v) {
      if (!v.is_number()) throw RenderError(fmt::format("even: a number is expected, not {}", v.type_name()));
      if (v.is_float()) return std::fmod(v.as_float(), 2.0) == 0.0;
      return v.int_value() % 2 == 0;
    });
    t["divisibleby"] = [](Evaluator&, const Value& v, CallArgs& a) {
      ArgReader r("divisibleby", a, {"num"});
      r.finish();
      const int64_t n = r.get(0).int_value();
      if (n == 0) throw RenderError("divisibleby: division by zero");
      return v.int_value() % n == 0;
    };
    t["eq"] = t["equalto"] = t["=="] = [](Evaluator&, const Value& v, CallArgs& a) {
      return compare_test(v, a, "eq", [](const Value& x, const Value& y) { return x.equals(y); });
    };
    t["ne"] = t["!="] = [](Evaluator&, const Value& v, CallArgs& a) {
      return compare_test(v, a, "ne", [](const Value& x, const Value& y) { return !x.equals(y); });
    };
    t["lt"] = t["lessthan"] = t["<"] = [](Evaluator&, const Value& v, CallArgs& a) { return compare_test(v, a, "lt", less_than); };
    t["gt"] = t["greaterthan"] = t[">"] = [](Evaluator&, const Value& v, CallArgs& a) {
      return compare_test(v, a, "gt", [](const Value& x, const Value& y) { return less_than(y, x); });
    };
    t["le"] = t["<="] = [](Evaluator&, const Value& v, CallArgs& a) {
      return compare_test(v, a, "le", [](const Value& x, const Value& y) { return !less_than(y, x); });
    };
    t["ge"] = t[">="] = [](Evaluator&, const Value& v, CallArgs& a) {
      return compare_test(v, a, "ge", [](const Value& x, const Value& y) { return !less_than(x, y); });
    };
    t["sameas"] = [](Evaluator&, const Value& v, CallArgs& a) {
      return compare_test(v, a, "sameas", [](const Value& x, const Value& y) { return x.same_as(y); });
    };
    t["in"] = [](Evaluator&, const Value& v, CallArgs& a) {
      ArgReader r("in", a, {"seq"});
      r.finish();
      const Value seq = r.get(0);
      if (seq.is_string()) return v.is_string() && seq.as_string().find(v.as_string()) != std::string::npos;
      for (const auto& x : iterate(seq))
        if (x.equals(v)) return true;
      return false;
    };
    t["filter"] = [](Evaluator&, const Value& v, CallArgs& a) { return no_args("filter", a, Value(has_filter(to_str(v)))).truthy(); };
    t["test"] = [](Evaluator&, const Value& v, CallArgs& a) { return no_args("test", a, Value(has_test(to_str(v)))).truthy(); };
    return t;
  }();
  return table;
}

std::string known_names(const auto& table) {
  std::vector<std::string> names;
  for (const auto& [k, v] : table)
    if (k[0] >= 'a' && k[0] <= 'z') names.push_back(k);
  std::sort(names.begin(), names.end());
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

bool has_filter(const std::string& name) { return filters().count(name) > 0; }
bool has_test(const std::string& name) { return tests().count(name) > 0; }

Value apply_filter(Evaluator& ev, const std::string& name, const Value& value, CallArgs& args) {
  const auto& table = filters();
  const auto it = table.find(name);
  if (it == table.end()) throw RenderError(fmt::format("unknown filter '{}'; the filters supported are: {}", name, known_names(table)));
  return it->second(ev, value, args);
}

bool apply_test(Evaluator& ev, const std::string& name, const Value& value, CallArgs& args) {
  const auto& table = tests();
  const auto it = table.find(name);
  if (it == table.end()) throw RenderError(fmt::format("unknown test '{}'; the tests supported are: {}", name, known_names(table)));
  return it->second(ev, value, args);
}

}  // namespace fsdpp::data::jinja
