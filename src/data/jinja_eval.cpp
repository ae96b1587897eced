#include "jinja_eval.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "jinja_builtins.h"
#include "jinja_error.h"
#include "jinja_json.h"
#include "jinja_text.h"

namespace fsdpp::data::jinja {

namespace {

// Deeper macro recursion than this is a template that never ends (jinja2 would hit Python's
// recursion limit).
constexpr int kMaxCallDepth = 200;

[[noreturn]] void fail_undefined(const Value& v) {
  throw RenderError(v.undefined_hint().empty() ? std::string("an undefined value was used") : v.undefined_hint());
}

// jinja2's name for an object's type in "has no attribute" messages.
std::string object_type(const Value& v) { return v.is_none() ? "'None'" : "'" + v.type_name() + " object'"; }

Value missing_attribute(const Value& obj, const std::string& name) {
  return Value::undefined(fmt::format("{} has no attribute '{}'", object_type(obj), name));
}

// Python's slice.indices(): the start, stop and step a slice means for a sequence of `n` items.
struct SliceBounds {
  int64_t start, stop, step;
};

SliceBounds slice_bounds(const Value& start, const Value& stop, const Value& step, int64_t n) {
  auto as_index = [](const Value& v, const char* what) {
    if (!v.is_bool() && !v.is_int()) throw RenderError(fmt::format("slice {} must be an integer or None, not {}", what, v.type_name()));
    return v.int_value();
  };
  const int64_t st = step.is_none() || step.is_undefined() ? 1 : as_index(step, "step");
  if (st == 0) throw RenderError("slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t dflt, const char* what) {
    if (v.is_none() || v.is_undefined()) return dflt;
    int64_t i = as_index(v, what);
    if (i < 0) i += n;
    if (st > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  return {clamp(start, st > 0 ? 0 : n - 1, "start"), clamp(stop, st > 0 ? n : -1, "stop"), st};
}

template <typename F>
void for_slice(const SliceBounds& b, F&& take) {
  if (b.step > 0)
    for (int64_t i = b.start; i < b.stop; i += b.step) take(i);
  else
    for (int64_t i = b.start; i > b.stop; i += b.step) take(i);
}

Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_sequence_like()) {
    const auto& items = obj.items();
    const auto b = slice_bounds(start, stop, step, static_cast<int64_t>(items.size()));
    ValueList out;
    for_slice(b, [&](int64_t i) { out.push_back(items[static_cast<size_t>(i)]); });
    return obj.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
  }
  if (obj.is_string()) {
    const std::u32string u = text::decode(obj.as_string());
    const auto b = slice_bounds(start, stop, step, static_cast<int64_t>(u.size()));
    std::u32string out;
    for_slice(b, [&](int64_t i) { out.push_back(u[static_cast<size_t>(i)]); });
    return Value(text::encode(out));
  }
  // jinja2 writes a slice as Python's own subscript: other types fail as Python fails them.
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict()) throw RenderError("unhashable type: 'slice'");
  throw RenderError(fmt::format("'{}' object is not subscriptable", obj.type_name()));
}

// Python's ints do not overflow; ours are 64-bit and refuse to wrap.
void check_overflow(bool overflow) {
  if (overflow) throw RenderError("integer overflow: the result does not fit in 64 bits");
}

int64_t floor_div(int64_t a, int64_t b) {
  if (b == 0) throw RenderError("integer division or modulo by zero");
  if (a == std::numeric_limits<int64_t>::min() && b == -1) throw RenderError("integer overflow: the result does not fit in 64 bits");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (op == "%" && a.is_string()) return Value(percent_format(a.as_string(), b));
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  auto unsupported = [&]() -> Value {
    if (op == "+" && (a.is_string() || a.is_list() || a.is_tuple()))
      throw RenderError(fmt::format("can only concatenate {} (not \"{}\") to {}", a.type_name(), b.type_name(), a.type_name()));
    throw RenderError(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(), b.type_name()));
  };
  if (a.is_number() && b.is_number()) {
    const bool as_float = a.is_float() || b.is_float() || op == "/";
    if (op == "**") {
      if (!as_float && b.int_value() >= 0) {
        int64_t result = 1, base = a.int_value();
        for (int64_t e = b.int_value(); e > 0; --e) check_overflow(__builtin_mul_overflow(result, base, &result));
        return Value(result);
      }
      return Value(std::pow(a.float_value(), b.float_value()));
    }
    if (as_float) {
      const double x = a.float_value(), y = b.float_value();
      if (op == "+") return Value(x + y);
      if (op == "-") return Value(x - y);
      if (op == "*") return Value(x * y);
      if (y == 0.0) throw RenderError("float division by zero");
      if (op == "/") return Value(x / y);
      // Python's float divmod: the remainder takes the divisor's sign.
      double mod = std::fmod(x, y);
      double div = (x - mod) / y;
      if (mod != 0.0) {
        if ((y < 0) != (mod < 0)) {
          mod += y;
          div -= 1.0;
        }
      } else {
        mod = std::copysign(0.0, y);
      }
      if (op == "%") return Value(mod);
      double floordiv = std::copysign(0.0, x / y);
      if (div != 0.0) {
        floordiv = std::floor(div);
        if (div - floordiv > 0.5) floordiv += 1.0;
      }
      return Value(floordiv);  // "//"
    }
    const int64_t x = a.int_value(), y = b.int_value();
    int64_t r = 0;
    if (op == "+" || op == "-" || op == "*") {
      check_overflow(op == "+" ? __builtin_add_overflow(x, y, &r) : op == "-" ? __builtin_sub_overflow(x, y, &r)
                                                                              : __builtin_mul_overflow(x, y, &r));
      return Value(r);
    }
    if (op == "//") return Value(floor_div(x, y));
    if (op == "%") return Value(x - floor_div(x, y) * y);
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
    if ((a.is_list() && b.is_list()) || (a.is_tuple() && b.is_tuple())) {
      ValueList items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      return a.is_tuple() ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    }
  }
  if (op == "*") {
    const Value* seq = (a.is_string() || a.is_sequence_like()) && (b.is_int() || b.is_bool()) ? &a
                       : (b.is_string() || b.is_sequence_like()) && (a.is_int() || a.is_bool()) ? &b : nullptr;
    if (seq) {
      const int64_t n = (seq == &a ? b : a).int_value();
      if (seq->is_string()) {
        std::string out;
        for (int64_t i = 0; i < n; ++i) out += seq->as_string();
        return Value(std::move(out));
      }
      ValueList out;
      for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq->items().begin(), seq->items().end());
      return seq->is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
    }
  }
  return unsupported();
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kString:
      if (!item.is_string())
        throw RenderError(fmt::format("'in <string>' requires string as left operand, not {}", item.type_name()));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      for (const auto& x : container.items())
        if (x.equals(item)) return true;
      return false;
    case Value::Kind::kDict:
      if (item.is_list() || item.is_dict() || item.is_namespace())
        throw RenderError(fmt::format("unhashable type: '{}'", item.type_name()));
      return container.as_dict().find(item) != nullptr;
    case Value::Kind::kUndefined: return false;
    default:
      throw RenderError(fmt::format("argument of type '{}' is not iterable", container.type_name()));
  }
}

bool compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return a.equals(b);
  if (op == "!=") return !a.equals(b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (op == "<") return less_than(a, b);
  if (op == ">") return less_than(b, a);
  if (op == "<=") return !less_than(b, a);
  return !less_than(a, b);  // ">="
}

}  // namespace

ValueList iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kList:
    case Value::Kind::kTuple: return v.items();
    case Value::Kind::kDict: {
      ValueList keys;
      for (const auto& kv : v.as_dict().items) keys.push_back(kv.first);
      return keys;
    }
    case Value::Kind::kString: {
      ValueList chars;
      for (char32_t c : text::decode(v.as_string())) chars.emplace_back(text::encode(std::u32string(1, c)));
      return chars;
    }
    case Value::Kind::kUndefined: return {};
    default: throw RenderError(fmt::format("'{}' object is not iterable", v.type_name()));
  }
}

const Value* Scope::find(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent.get())
    for (const auto& [k, v] : s->vars)
      if (k == name) return &v;
  return nullptr;
}

void Scope::set(const std::string& name, Value value) {
  for (auto& [k, v] : vars) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  vars.emplace_back(name, std::move(value));
}

RenderOutput Evaluator::render(const nlohmann::ordered_json& context) {
  auto root = std::make_shared<Scope>();
  if (!context.is_object()) throw RenderError("the context of a template must be a JSON object");
  for (const auto& [k, v] : context.items()) root->vars.emplace_back(k, from_json(v));
  try {
    exec(program_.body, root);
  } catch (const RaisedError&) {
    throw;
  } catch (const RenderError& e) {
    throw RenderError(fmt::format("line {}: {}", line_, e.what()));
  } catch (const std::exception& e) {
    // A value of a kind an operation did not expect that no check above caught: still the
    // template's error, with its line, never a crash of the caller.
    throw RenderError(fmt::format("line {}: {}", line_, e.what()));
  }
  return RenderOutput{std::move(root_), std::move(spans_)};
}

Evaluator::Flow Evaluator::exec(const Body& body, const ScopePtr& scope) {
  for (const auto& stmt : body) {
    const Flow flow = exec_stmt(*stmt, scope);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Evaluator::Flow Evaluator::exec_stmt(const Stmt& stmt, const ScopePtr& scope) {
  line_ = stmt.line;
  switch (stmt.kind) {
    case Stmt::Kind::kData: *out_ += static_cast<const DataStmt&>(stmt).text; return Flow::kNormal;
    case Stmt::Kind::kOutput: *out_ += to_str(eval(*static_cast<const OutputStmt&>(stmt).expr, scope)); return Flow::kNormal;
    case Stmt::Kind::kIf: {
      const auto& s = static_cast<const IfStmt&>(stmt);
      for (const auto& [test, body] : s.branches)
        if (eval(*test, scope).truthy()) return exec(body, scope);
      return exec(s.otherwise, scope);
    }
    case Stmt::Kind::kFor: return exec_for(static_cast<const ForStmt&>(stmt), scope);
    case Stmt::Kind::kSet: {
      const auto& s = static_cast<const SetStmt&>(stmt);
      exec_set(*s.target, eval(*s.value, scope), scope);
      return Flow::kNormal;
    }
    case Stmt::Kind::kSetBlock: {
      const auto& s = static_cast<const SetBlockStmt&>(stmt);
      Value captured(capture(s.body, scope));
      if (s.filter) captured = eval_filter(static_cast<const FilterExpr&>(*s.filter), captured, scope);
      exec_set(*s.target, captured, scope);
      return Flow::kNormal;
    }
    case Stmt::Kind::kMacro: {
      const auto& s = static_cast<const MacroStmt&>(stmt);
      scope->set(s.name, make_macro(s, scope));
      return Flow::kNormal;
    }
    case Stmt::Kind::kFilterBlock: {
      const auto& s = static_cast<const FilterBlockStmt&>(stmt);
      const Value captured(capture(s.body, scope));
      *out_ += to_str(eval_filter(static_cast<const FilterExpr&>(*s.filter), captured, scope));
      return Flow::kNormal;
    }
    case Stmt::Kind::kWith: {
      const auto& s = static_cast<const WithStmt&>(stmt);
      auto inner = std::make_shared<Scope>(Scope{scope, {}});
      for (const auto& [target, value] : s.assignments) exec_set(*target, eval(*value, scope), inner);
      return exec(s.body, inner);
    }
    case Stmt::Kind::kBreak: return Flow::kBreak;
    case Stmt::Kind::kContinue: return Flow::kContinue;
    case Stmt::Kind::kGeneration: {
      // jinja2 runs the body as a call block's caller, a macro: its own scope.
      auto inner = std::make_shared<Scope>(Scope{scope, {}});
      const bool tracked = out_ == &root_;
      const size_t begin = root_.size();
      const Flow flow = exec(static_cast<const BodyStmt&>(stmt).body, inner);
      if (tracked) spans_.emplace_back(begin, root_.size());
      return flow;
    }
  }
  return Flow::kNormal;
}

Evaluator::Flow Evaluator::exec_for(const ForStmt& stmt, const ScopePtr& scope) {
  ValueList items = iterate(eval(*stmt.iter, scope));
  if (stmt.filter) {
    // `for x in xs if cond`: the condition sees the loop variable, not `loop`.
    ValueList kept;
    for (auto& item : items) {
      auto probe = std::make_shared<Scope>(Scope{scope, {}});
      exec_set(*stmt.target, item, probe);
      if (eval(*stmt.filter, probe).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    auto inner = std::make_shared<Scope>(Scope{scope, {}});
    return exec(stmt.otherwise, inner);
  }
  const auto n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    auto inner = std::make_shared<Scope>(Scope{scope, {}});
    DictData loop;
    loop.items.reserve(12);
    loop.items.emplace_back(Value("index"), Value(i + 1));
    loop.items.emplace_back(Value("index0"), Value(i));
    loop.items.emplace_back(Value("revindex"), Value(n - i));
    loop.items.emplace_back(Value("revindex0"), Value(n - i - 1));
    loop.items.emplace_back(Value("first"), Value(i == 0));
    loop.items.emplace_back(Value("last"), Value(i == n - 1));
    loop.items.emplace_back(Value("length"), Value(n));
    loop.items.emplace_back(Value("depth"), Value(1));
    loop.items.emplace_back(Value("depth0"), Value(0));
    if (i > 0) loop.items.emplace_back(Value("previtem"), items[static_cast<size_t>(i - 1)]);
    if (i + 1 < n) loop.items.emplace_back(Value("nextitem"), items[static_cast<size_t>(i + 1)]);
    loop.items.emplace_back(Value("cycle"), Value::function("loop.cycle", [i](Evaluator&, CallArgs& args) {
      if (args.positional.empty()) throw RenderError("loop.cycle() needs at least one argument");
      return args.positional[static_cast<size_t>(i) % args.positional.size()];
    }));
    inner->vars.emplace_back("loop", Value::dict(std::move(loop)));
    exec_set(*stmt.target, items[static_cast<size_t>(i)], inner);
    if (exec(stmt.body, inner) == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

void Evaluator::exec_set(const Expr& target, Value value, const ScopePtr& scope) {
  if (target.kind == Expr::Kind::kName) {
    scope->set(static_cast<const NameExpr&>(target).name, std::move(value));
    return;
  }
  if (target.kind == Expr::Kind::kNsRef) {
    const auto& ref = static_cast<const NsRefExpr&>(target);
    const Value* ns = scope->find(ref.name);
    if (!ns || !ns->is_namespace())
      throw RenderError(fmt::format("cannot assign attribute '{}' on '{}': it is not a namespace() object", ref.attr, ref.name));
    check_namespace_attribute(ref.attr);
    ns->as_namespace().set(ref.attr, std::move(value));
    return;
  }
  const auto& names = static_cast<const ListExpr&>(target).items;
  const ValueList items = iterate(value);
  if (items.size() < names.size())
    throw RenderError(fmt::format("not enough values to unpack (expected {}, got {})", names.size(), items.size()));
  if (items.size() > names.size())
    throw RenderError(fmt::format("too many values to unpack (expected {})", names.size()));
  for (size_t i = 0; i < names.size(); ++i) exec_set(*names[i], items[i], scope);
}

std::string Evaluator::capture(const Body& body, const ScopePtr& scope) {
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  try {
    exec(body, scope);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buffer;
}

Value Evaluator::make_macro(const MacroStmt& stmt, const ScopePtr& scope) {
  const MacroStmt* macro = &stmt;
  std::weak_ptr<Scope> defined_in = scope;
  return Value::function("macro " + stmt.name, [macro, defined_in](Evaluator& ev, CallArgs& args) {
    const size_t n = macro->params.size();
    if (args.positional.size() > n)
      throw RenderError(fmt::format("macro '{}' takes not more than {} argument(s)", macro->name, n));
    auto inner = std::make_shared<Scope>(Scope{defined_in.lock(), {}});
    std::vector<bool> bound(n, false);
    for (size_t i = 0; i < args.positional.size(); ++i) {
      inner->set(macro->params[i], args.positional[i]);
      bound[i] = true;
    }
    for (auto& [key, value] : args.keyword) {
      const auto it = std::find(macro->params.begin(), macro->params.end(), key);
      if (it == macro->params.end())
        throw RenderError(fmt::format("macro '{}' takes no keyword argument '{}'", macro->name, key));
      inner->set(key, value);
      bound[static_cast<size_t>(it - macro->params.begin())] = true;
    }
    const size_t first_default = n - macro->defaults.size();
    for (size_t i = 0; i < n; ++i) {
      if (bound[i]) continue;
      inner->set(macro->params[i], i >= first_default ? ev.eval(*macro->defaults[i - first_default], inner)
                                                      : Value::undefined(fmt::format("parameter '{}' was not provided", macro->params[i])));
    }
    if (++ev.depth_ > kMaxCallDepth) throw RenderError(fmt::format("macro '{}' recursed more than {} calls deep", macro->name, kMaxCallDepth));
    std::string result = ev.capture(macro->body, inner);
    --ev.depth_;
    return Value(std::move(result));
  });
}

Value Evaluator::lookup(const std::string& name, const ScopePtr& scope) {
  if (const Value* v = scope->find(name)) return *v;
  if (auto f = global_function(name)) return *f;
  return Value::undefined(fmt::format("'{}' is undefined", name));
}

Value Evaluator::get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (auto method = bound_method(obj, name)) return *method;
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(name)) return *v;
  } else if (obj.is_namespace()) {
    if (const Value* v = obj.as_namespace().find(name)) return *v;
  }
  return missing_attribute(obj, name);
}

Value Evaluator::get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(key)) return *v;
  } else if ((obj.is_sequence_like() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.int_value();
    if (obj.is_string()) {
      const std::u32string u = text::decode(obj.as_string());
      if (i < 0) i += static_cast<int64_t>(u.size());
      if (i >= 0 && i < static_cast<int64_t>(u.size())) return Value(text::encode(u.substr(static_cast<size_t>(i), 1)));
    } else {
      const auto& items = obj.items();
      if (i < 0) i += static_cast<int64_t>(items.size());
      if (i >= 0 && i < static_cast<int64_t>(items.size())) return items[static_cast<size_t>(i)];
    }
    return Value::undefined(fmt::format("{} has no element {}", object_type(obj), key.int_value()));
  }
  if (key.is_string()) {
    if (auto method = bound_method(obj, key.as_string())) return *method;
    if (obj.is_namespace())
      if (const Value* v = obj.as_namespace().find(key.as_string())) return *v;
    return missing_attribute(obj, key.as_string());
  }
  return Value::undefined(fmt::format("{} has no element {}", object_type(obj), to_repr(key)));
}

Value Evaluator::call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) fail_undefined(callee);
  if (!callee.is_callable()) throw RenderError(fmt::format("'{}' object is not callable", callee.type_name()));
  return callee.as_function().call(*this, args);
}

CallArgs Evaluator::eval_args(const Arguments& args, const ScopePtr& scope) {
  CallArgs out;
  for (const auto& a : args.positional) out.positional.push_back(eval(*a, scope));
  if (args.star_args)
    for (auto& v : iterate(eval(*args.star_args, scope))) out.positional.push_back(std::move(v));
  for (const auto& [k, v] : args.keyword) out.keyword.emplace_back(k, eval(*v, scope));
  if (args.star_kwargs) {
    const Value d = eval(*args.star_kwargs, scope);
    if (!d.is_dict()) throw RenderError(fmt::format("argument after ** must be a mapping, not {}", d.type_name()));
    for (const auto& [k, v] : d.as_dict().items) {
      if (!k.is_string()) throw RenderError("keywords must be strings");
      out.keyword.emplace_back(k.as_string(), v);
    }
  }
  return out;
}

Value Evaluator::eval_filter(const FilterExpr& expr, Value value, const ScopePtr& scope) {
  // A chain `x | a | b` nests b(a(x)); in a filter block the innermost value is the block's text.
  if (expr.value) {
    if (expr.value->kind == Expr::Kind::kFilter)
      value = eval_filter(static_cast<const FilterExpr&>(*expr.value), std::move(value), scope);
    else
      value = eval(*expr.value, scope);
  }
  CallArgs args = eval_args(expr.args, scope);
  line_ = expr.line;
  return apply_filter(*this, expr.name, value, args);
}

Value Evaluator::eval(const Expr& expr, const ScopePtr& scope) {
  switch (expr.kind) {
    case Expr::Kind::kConst: return static_cast<const ConstExpr&>(expr).value;
    case Expr::Kind::kName: return lookup(static_cast<const NameExpr&>(expr).name, scope);
    case Expr::Kind::kNsRef: {
      const auto& ref = static_cast<const NsRefExpr&>(expr);
      return get_attr(lookup(ref.name, scope), ref.attr);
    }
    case Expr::Kind::kList: {
      const auto& e = static_cast<const ListExpr&>(expr);
      ValueList items;
      items.reserve(e.items.size());
      for (const auto& item : e.items) items.push_back(eval(*item, scope));
      return e.tuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    }
    case Expr::Kind::kDict: {
      DictData d;
      for (const auto& [k, v] : static_cast<const DictExpr&>(expr).items) d.set(eval(*k, scope), eval(*v, scope));
      return Value::dict(std::move(d));
    }
    case Expr::Kind::kGetAttr: {
      const auto& e = static_cast<const GetAttrExpr&>(expr);
      Value obj = eval(*e.object, scope);
      line_ = expr.line;
      return get_attr(obj, e.name);
    }
    case Expr::Kind::kGetItem: {
      const auto& e = static_cast<const GetItemExpr&>(expr);
      Value obj = eval(*e.object, scope);
      line_ = expr.line;
      if (e.index->kind == Expr::Kind::kSlice) {
        const auto& s = static_cast<const SliceExpr&>(*e.index);
        const Value none = Value::none();
        const Value start = s.start ? eval(*s.start, scope) : none;
        const Value stop = s.stop ? eval(*s.stop, scope) : none;
        const Value step = s.step ? eval(*s.step, scope) : none;
        if (obj.is_undefined()) fail_undefined(obj);
        return slice_value(obj, start, stop, step);
      }
      return get_item(obj, eval(*e.index, scope));
    }
    case Expr::Kind::kSlice: throw RenderError("a slice is only valid inside []");
    case Expr::Kind::kCall: {
      const auto& e = static_cast<const CallExpr&>(expr);
      Value callee = eval(*e.callee, scope);
      CallArgs args = eval_args(e.args, scope);
      line_ = expr.line;
      return call(callee, args);
    }
    case Expr::Kind::kFilter: return eval_filter(static_cast<const FilterExpr&>(expr), Value(), scope);
    case Expr::Kind::kTest: {
      const auto& e = static_cast<const FilterExpr&>(expr);
      Value value = eval(*e.value, scope);
      CallArgs args = eval_args(e.args, scope);
      line_ = expr.line;
      return Value(apply_test(*this, e.name, value, args));
    }
    case Expr::Kind::kUnary: {
      const auto& e = static_cast<const UnaryExpr&>(expr);
      Value v = eval(*e.operand, scope);
      line_ = expr.line;
      if (e.op == '!') return Value(!v.truthy());
      if (v.is_undefined()) fail_undefined(v);
      if (!v.is_number()) throw RenderError(fmt::format("bad operand type for unary {}: '{}'", e.op, v.type_name()));
      if (e.op == '+') return v.is_bool() ? Value(v.int_value()) : v;
      if (v.is_float()) return Value(-v.as_float());
      int64_t r = 0;
      check_overflow(__builtin_sub_overflow(int64_t{0}, v.int_value(), &r));
      return Value(r);
    }
    case Expr::Kind::kBinary: return eval_binary(static_cast<const BinaryExpr&>(expr), scope);
    case Expr::Kind::kConcat: {
      std::string s;
      for (const auto& item : static_cast<const ConcatExpr&>(expr).items) s += to_str(eval(*item, scope));
      return Value(std::move(s));
    }
    case Expr::Kind::kCompare: return eval_compare(static_cast<const CompareExpr&>(expr), scope);
    case Expr::Kind::kCond: {
      const auto& e = static_cast<const CondExpr&>(expr);
      if (eval(*e.test, scope).truthy()) return eval(*e.then, scope);
      if (e.otherwise) return eval(*e.otherwise, scope);
      return Value::undefined("the inline if expression evaluated to false and no else section was defined");
    }
  }
  return Value();
}

Value Evaluator::eval_binary(const BinaryExpr& expr, const ScopePtr& scope) {
  Value left = eval(*expr.left, scope);
  if (expr.op == "and") return left.truthy() ? eval(*expr.right, scope) : left;
  if (expr.op == "or") return left.truthy() ? left : eval(*expr.right, scope);
  Value right = eval(*expr.right, scope);
  line_ = expr.line;
  return arithmetic(expr.op, left, right);
}

Value Evaluator::eval_compare(const CompareExpr& expr, const ScopePtr& scope) {
  Value left = eval(*expr.first, scope);
  for (const auto& [op, operand] : expr.rest) {
    Value right = eval(*operand, scope);
    line_ = expr.line;
    if (!compare(op, left, right)) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

}  // namespace fsdpp::data::jinja
