#pragma once
// Runs a parsed chat template (jinja_parser.h) over a context, as jinja2 runs it inside
// transformers' ImmutableSandboxedEnvironment.
//
// Scopes follow jinja2: a for loop's body gets a fresh scope each iteration (a `set` inside it
// is gone at the next iteration and after the loop; that is why templates carry state across
// iterations in a namespace()), `if` opens none, a macro's body and a {% generation %} body
// (a call block in jinja2) get their own. Attribute and item access follow the sandbox: `x.name`
// is a method of x's Python type if it has one (dict.items, str.startswith), else the item;
// `x[k]` the item, else the method; anything missing is undefined, and only using an undefined
// value (reading its attribute, adding to it, calling it) fails.
//
// The output is one string; {% generation %} blocks written straight to it (not inside a set
// block or a macro) record their byte range, as transformers' AssistantTracker records the
// character range of what they rendered.

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "jinja_ast.h"
#include "jinja_parser.h"
#include "jinja_value.h"

namespace fsdpp::data::jinja {

struct RenderEnvironment {
  // strftime_now's clock (transformers: datetime.now(), local time).
  std::function<std::chrono::system_clock::time_point()> now;
};

struct RenderOutput {
  std::string text;
  std::vector<std::pair<size_t, size_t>> generation_spans;  // byte ranges [begin, end) of `text`
};

// A variable scope; `parent` is read when a name is not set here.
struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* find(const std::string& name) const;
  void set(const std::string& name, Value value);
};
using ScopePtr = std::shared_ptr<Scope>;

class Evaluator {
 public:
  Evaluator(const Program& program, const RenderEnvironment& env) : program_(program), env_(env) {}

  // Throws RenderError (with the line in its message) or RaisedError.
  RenderOutput render(const nlohmann::ordered_json& context);

  // What filters, tests and methods (jinja_builtins.h) call back into.
  Value get_attr(const Value& obj, const std::string& name);
  Value get_item(const Value& obj, const Value& key);
  Value call(const Value& callee, CallArgs& args);
  const RenderEnvironment& environment() const { return env_; }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec(const Body& body, const ScopePtr& scope);
  Flow exec_stmt(const Stmt& stmt, const ScopePtr& scope);
  Flow exec_for(const ForStmt& stmt, const ScopePtr& scope);
  void exec_set(const Expr& target, Value value, const ScopePtr& scope);
  // Runs `body` into a string of its own (set blocks, filter blocks, macros).
  std::string capture(const Body& body, const ScopePtr& scope);
  Value make_macro(const MacroStmt& stmt, const ScopePtr& scope);

  Value eval(const Expr& expr, const ScopePtr& scope);
  Value eval_binary(const BinaryExpr& expr, const ScopePtr& scope);
  Value eval_compare(const CompareExpr& expr, const ScopePtr& scope);
  Value eval_filter(const FilterExpr& expr, Value value, const ScopePtr& scope);
  Value lookup(const std::string& name, const ScopePtr& scope);
  CallArgs eval_args(const Arguments& args, const ScopePtr& scope);

  const Program& program_;
  const RenderEnvironment& env_;
  std::string root_;           // the template's output
  std::string* out_ = &root_;  // where output goes now
  std::vector<std::pair<size_t, size_t>> spans_;
  int line_ = 1;  // the line being run, for error messages
  int depth_ = 0;  // macro call depth
};

// Python's list(x) for a template: a list's or tuple's items, a dict's keys, a string's
// characters; undefined is empty. Others throw ("'int' object is not iterable").
ValueList iterate(const Value& v);

}  // namespace fsdpp::data::jinja
