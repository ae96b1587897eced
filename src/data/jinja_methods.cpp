// Python methods of str, dict, list and tuple as the sandbox lets a template call them, and the
// globals transformers' environment has (jinja_builtins.h).
#include <algorithm>
#include <ctime>

#include <fmt/format.h>

#include "jinja_builtins.h"
#include "jinja_error.h"
#include "jinja_eval.h"
#include "jinja_text.h"

namespace fsdpp::data::jinja {

namespace {

// jinja2's sandbox limit on range() (MAX_RANGE).
constexpr int64_t kMaxRange = 100000;

std::optional<std::string> optional_string(const Value& v, const std::string& what) {
  if (v.is_none() || v.is_undefined()) return std::nullopt;
  if (!v.is_string()) throw RenderError(fmt::format("{} must be str or None, not {}", what, v.type_name()));
  return v.as_string();
}

const std::string& string_arg(const Value& v, const std::string& what) {
  if (!v.is_string()) throw RenderError(fmt::format("{} must be str, not {}", what, v.type_name()));
  return v.as_string();
}

int64_t int_arg(const Value& v, const std::string& what) {
  if (!v.is_int() && !v.is_bool()) throw RenderError(fmt::format("{} must be an integer, not {}", what, v.type_name()));
  return v.int_value();
}

Value string_list(std::vector<std::string> parts) {
  ValueList items;
  items.reserve(parts.size());
  for (auto& p : parts) items.emplace_back(std::move(p));
  return Value::list(std::move(items));
}

// str.startswith / endswith: a str or a tuple of them, within [start, end) in code points.
bool affix_matches(const std::string& self, const Value& affix, const Value& start, const Value& end, bool prefix,
                   const std::string& fname) {
  std::string s = self;
  if (!start.is_undefined() || !end.is_undefined()) {
    const std::u32string u = text::decode(self);
    const auto n = static_cast<int64_t>(u.size());
    auto clamp = [n](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
    const int64_t b = start.is_undefined() || start.is_none() ? 0 : clamp(int_arg(start, fname + "() start"));
    const int64_t e = end.is_undefined() || end.is_none() ? n : clamp(int_arg(end, fname + "() end"));
    s = b < e ? text::encode(u.substr(static_cast<size_t>(b), static_cast<size_t>(e - b))) : std::string();
  }
  auto one = [&](const std::string& a) {
    if (a.size() > s.size()) return false;
    return prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (affix.is_sequence_like()) {
    for (const auto& a : affix.items())
      if (one(string_arg(a, fname + "() tuple item"))) return true;
    return false;
  }
  if (!affix.is_string())
    throw RenderError(fmt::format("{} first arg must be str or a tuple of str, not {}", fname, affix.type_name()));
  return one(affix.as_string());
}

Value call_str_method(const std::string& self, const std::string& name, CallArgs& args) {
  const std::string fname = "str." + name;
  if (name == "startswith" || name == "endswith") {
    ArgReader r(fname, args, {"affix", "start", "end"});
    r.finish();
    return Value(affix_matches(self, r.get(0), r.get(1), r.get(2), name == "startswith", fname));
  }
  if (name == "split" || name == "rsplit") {
    ArgReader r(fname, args, {"sep", "maxsplit"});
    r.finish();
    const auto sep = optional_string(r.get(0, Value::none()), fname + "() sep");
    const int64_t maxsplit = int_arg(r.get(1, Value(-1)), fname + "() maxsplit");
    return string_list(name == "split" ? text::split(self, sep, maxsplit) : text::rsplit(self, sep, maxsplit));
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    ArgReader r(fname, args, {"chars"});
    r.finish();
    const auto chars = optional_string(r.get(0, Value::none()), fname + "() chars");
    return Value(text::strip(self, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "replace") {
    ArgReader r(fname, args, {"old", "new", "count"});
    r.finish();
    return Value(text::replace(self, string_arg(r.get(0), fname + "() old"), string_arg(r.get(1), fname + "() new"),
                               int_arg(r.get(2, Value(-1)), fname + "() count")));
  }
  if (name == "splitlines") {
    ArgReader r(fname, args, {"keepends"});
    r.finish();
    return string_list(text::splitlines(self, r.get(0, Value(false)).truthy()));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    ArgReader r(fname, args, {"sub"});
    r.finish();
    const std::string& sub = string_arg(r.get(0), fname + "() sub");
    if (name == "count") return Value(text::count(self, sub));
    const int64_t at = text::find(self, sub, name[0] == 'r');
    if (at < 0 && name.find("index") != std::string::npos) throw RenderError("str.index(): substring not found");
    return Value(at);
  }
  if (name == "join") {
    ArgReader r(fname, args, {"iterable"});
    r.finish();
    std::string out;
    const ValueList items = iterate(r.get(0));
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string())
        throw RenderError(fmt::format("str.join(): sequence item {}: expected str instance, {} found", i, items[i].type_name()));
      if (i) out += self;
      out += items[i].as_string();
    }
    return Value(std::move(out));
  }
  if (name == "format") return Value(str_format(self, args));
  ArgReader r(fname, args, {});
  r.finish();
  if (name == "upper") return Value(text::upper(self));
  if (name == "lower") return Value(text::lower(self));
  if (name == "title") return Value(text::title(self));
  if (name == "capitalize") return Value(text::capitalize(self));
  if (name == "isalpha") return Value(text::all_of_class(self, 'a'));
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") return Value(text::all_of_class(self, 'd'));
  if (name == "isalnum") return Value(text::all_of_class(self, 'n'));
  if (name == "isspace") return Value(text::all_of_class(self, 's'));
  if (name == "islower") return Value(text::all_of_class(self, 'l'));
  if (name == "isupper") return Value(text::all_of_class(self, 'u'));
  throw RenderError(fmt::format("str has no method '{}' here", name));
}

Value call_dict_method(const Value& self, const std::string& name, CallArgs& args) {
  const std::string fname = "dict." + name;
  const auto& d = self.as_dict();
  if (name == "get") {
    ArgReader r(fname, args, {"key", "default"});
    r.finish();
    const Value* v = d.find(r.get(0));
    return v ? *v : r.get(1, Value::none());
  }
  ArgReader r(fname, args, {});
  r.finish();
  ValueList out;
  for (const auto& [k, v] : d.items) {
    if (name == "keys") out.push_back(k);
    else if (name == "values") out.push_back(v);
    else out.push_back(Value::tuple({k, v}));
  }
  if (name == "copy") return Value::dict(d);
  return Value::list(std::move(out));
}

Value call_sequence_method(const Value& self, const std::string& name, CallArgs& args) {
  ArgReader r(self.type_name() + "." + name, args, {"value"});
  r.finish();
  const Value x = r.get(0);
  const auto& items = self.items();
  if (name == "count") return Value(static_cast<int64_t>(std::count_if(items.begin(), items.end(), [&](const Value& v) { return v.equals(x); })));
  for (size_t i = 0; i < items.size(); ++i)
    if (items[i].equals(x)) return Value(static_cast<int64_t>(i));
  throw RenderError(fmt::format("{}.index(x): x not in {}", self.type_name(), self.type_name()));
}

bool is_one_of(const std::string& name, std::initializer_list<const char*> names) {
  return std::any_of(names.begin(), names.end(), [&](const char* n) { return name == n; });
}

Value make_range(CallArgs& args) {
  ArgReader r("range", args, {"start", "stop", "step"});
  r.finish();
  int64_t start = 0, stop, step = 1;
  if (!r.given(1)) {
    stop = int_arg(r.get(0), "range() argument");
  } else {
    start = int_arg(r.get(0), "range() start");
    stop = int_arg(r.get(1), "range() stop");
    if (r.given(2)) step = int_arg(r.get(2), "range() step");
  }
  if (step == 0) throw RenderError("range() arg 3 must not be zero");
  const int64_t n = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                             : (start > stop ? (start - stop - step - 1) / -step : 0);
  if (n > kMaxRange)
    throw RenderError(fmt::format("range too big: the sandbox blocks ranges larger than {} items", kMaxRange));
  ValueList items;
  for (int64_t i = 0; i < n; ++i) items.emplace_back(start + i * step);
  return Value::list(std::move(items));
}

void check_namespace_name(const std::string& name) {
  // transformers' TemplateNamespace refuses these (they reach Python internals).
  if (!name.empty() && name[0] == '_')
    throw RenderError(fmt::format("Chat templates cannot store underscore-prefixed attributes on a namespace, but got "
                                  "'{}'. Please rename the attribute.", name));
}

// dict(...) and namespace(...): a mapping or pairs, then keyword arguments.
DictData mapping_from(CallArgs& args, const char* fname) {
  if (args.positional.size() > 1) throw RenderError(fmt::format("{}() expected at most 1 argument, got {}", fname, args.positional.size()));
  DictData d;
  if (!args.positional.empty()) {
    const Value& src = args.positional[0];
    if (src.is_dict()) {
      d = src.as_dict();
    } else {
      for (const auto& pair : iterate(src)) {
        const ValueList kv = iterate(pair);
        if (kv.size() != 2) throw RenderError(fmt::format("{}(): each item must be a pair", fname));
        d.set(kv[0], kv[1]);
      }
    }
  }
  for (auto& [k, v] : args.keyword) d.set(Value(k), v);
  return d;
}

std::string strftime_now(Evaluator& ev, const std::string& format) {
  const auto now = ev.environment().now ? ev.environment().now() : std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm local{};
  localtime_r(&t, &local);
  if (format.empty()) return "";
  for (size_t size = 128; size <= 65536; size *= 4) {
    std::string buf(size, '\0');
    const size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &local);
    if (n > 0) return buf.substr(0, n);
  }
  return "";  // a format whose expansion is empty
}

}  // namespace

ArgReader::ArgReader(std::string function, CallArgs& args, std::initializer_list<const char*> names)
    : function_(std::move(function)), args_(args), names_(names) {
  if (args_.positional.size() > names_.size())
    throw RenderError(fmt::format("{}() takes at most {} argument(s) ({} given)", function_, names_.size(), args_.positional.size()));
}

bool ArgReader::given(size_t i) const {
  if (i < args_.positional.size()) return true;
  return i < names_.size() && std::any_of(args_.keyword.begin(), args_.keyword.end(),
                                          [&](const auto& kv) { return kv.first == names_[i]; });
}

Value ArgReader::get(size_t i, Value fallback) {
  if (i < args_.positional.size()) return args_.positional[i];
  if (i < names_.size())
    for (const auto& [k, v] : args_.keyword)
      if (k == names_[i]) return v;
  return fallback;
}

void ArgReader::finish() const {
  for (const auto& kv : args_.keyword) {
    const std::string& k = kv.first;
    const auto it = std::find_if(names_.begin(), names_.end(), [&](const char* n) { return k == n; });
    if (it == names_.end()) throw RenderError(fmt::format("{}() got an unexpected keyword argument '{}'", function_, k));
    if (static_cast<size_t>(it - names_.begin()) < args_.positional.size())
      throw RenderError(fmt::format("{}() got multiple values for argument '{}'", function_, k));
  }
}

std::optional<Value> bound_method(const Value& self, const std::string& name) {
  auto unsafe = [&]() {
    return Value::undefined(fmt::format("access to attribute '{}' of '{}' object is unsafe (chat templates cannot "
                                        "modify their inputs)", name, self.type_name()));
  };
  if (self.is_string()) {
    if (!is_one_of(name, {"startswith", "endswith", "split", "rsplit", "strip", "lstrip", "rstrip", "replace",
                          "splitlines", "find", "rfind", "index", "rindex", "count", "join", "format", "upper",
                          "lower", "title", "capitalize", "isalpha", "isdigit", "isdecimal", "isnumeric", "isalnum",
                          "isspace", "islower", "isupper"}))
      return std::nullopt;
    return Value::function("str." + name, [s = self.as_string(), name](Evaluator&, CallArgs& args) {
      return call_str_method(s, name, args);
    });
  }
  if (self.is_dict()) {
    if (is_one_of(name, {"clear", "pop", "popitem", "setdefault", "update"})) return unsafe();
    if (!is_one_of(name, {"items", "keys", "values", "get", "copy"})) return std::nullopt;
    return Value::function("dict." + name, [self, name](Evaluator&, CallArgs& args) { return call_dict_method(self, name, args); });
  }
  if (self.is_sequence_like()) {
    if (is_one_of(name, {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"})) return unsafe();
    if (!is_one_of(name, {"index", "count"})) return std::nullopt;
    return Value::function(self.type_name() + "." + name,
                           [self, name](Evaluator&, CallArgs& args) { return call_sequence_method(self, name, args); });
  }
  return std::nullopt;
}

std::optional<Value> global_function(const std::string& name) {
  if (name == "range") return Value::function(name, [](Evaluator&, CallArgs& args) { return make_range(args); });
  if (name == "raise_exception")
    return Value::function(name, [](Evaluator&, CallArgs& args) -> Value {
      ArgReader r("raise_exception", args, {"message"});
      r.finish();
      throw RaisedError(to_str(r.get(0)));
    });
  if (name == "strftime_now")
    return Value::function(name, [](Evaluator& ev, CallArgs& args) {
      ArgReader r("strftime_now", args, {"format"});
      r.finish();
      return Value(strftime_now(ev, string_arg(r.get(0), "strftime_now() format")));
    });
  if (name == "namespace")
    return Value::function(name, [](Evaluator&, CallArgs& args) {
      Value ns = Value::make_namespace();
      for (auto& [k, v] : mapping_from(args, "namespace").items) {
        const std::string key = to_str(k);
        check_namespace_name(key);
        ns.as_namespace().set(key, v);
      }
      return ns;
    });
  if (name == "dict")
    return Value::function(name, [](Evaluator&, CallArgs& args) { return Value::dict(mapping_from(args, "dict")); });
  return std::nullopt;
}

Value attribute_path(Evaluator& ev, const Value& v, const std::string& path) {
  Value cur = v;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = ev.get_item(cur, digits ? Value(static_cast<int64_t>(std::stoll(part))) : Value(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

void check_namespace_attribute(const std::string& name) { check_namespace_name(name); }

}  // namespace fsdpp::data::jinja
