#pragma once
// The parsed form of a chat template: expressions and statements as jinja2's parser builds them
// (jinja2/nodes.py names in brackets). The parser (jinja_parser.h) makes them, the evaluator
// (jinja_eval.h) runs them; neither owns the other's concerns. Every node has the line of the
// template it came from, for the evaluator's error messages.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja_value.h"

namespace fsdpp::data::jinja {

struct Expr {
  enum class Kind {
    kConst,    // a literal (Const)
    kName,     // a variable (Name)
    kNsRef,    // ns.attr as an assignment target (NSRef)
    kList,     // [a, b] or, with `tuple`, (a, b) / a, b (List, Tuple)
    kDict,     // {k: v}
    kGetAttr,  // x.name
    kGetItem,  // x[i], x[a:b:c]
    kSlice,    // a:b:c inside []
    kCall,     // f(a, k=v)
    kFilter,   // x | name(args)
    kTest,     // x is name(args)
    kUnary,    // -x, +x, not x
    kBinary,   // + - * / // % ** and or
    kConcat,   // a ~ b ~ c
    kCompare,  // a == b < c, in, not in
    kCond,     // a if c else b (CondExpr)
  };
  Expr(Kind k, int l) : kind(k), line(l) {}
  virtual ~Expr() = default;
  Kind kind;
  int line;
};
using ExprPtr = std::unique_ptr<Expr>;

struct Arguments {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
  ExprPtr star_args;    // *args
  ExprPtr star_kwargs;  // **kwargs
};

struct ConstExpr : Expr {
  ConstExpr(Value v, int l) : Expr(Kind::kConst, l), value(std::move(v)) {}
  Value value;
};

struct NameExpr : Expr {
  NameExpr(std::string n, int l) : Expr(Kind::kName, l), name(std::move(n)) {}
  std::string name;
};

struct NsRefExpr : Expr {
  NsRefExpr(std::string n, std::string a, int l) : Expr(Kind::kNsRef, l), name(std::move(n)), attr(std::move(a)) {}
  std::string name, attr;
};

struct ListExpr : Expr {
  ListExpr(bool t, int l) : Expr(Kind::kList, l), tuple(t) {}
  bool tuple;
  std::vector<ExprPtr> items;
};

struct DictExpr : Expr {
  explicit DictExpr(int l) : Expr(Kind::kDict, l) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

struct GetAttrExpr : Expr {
  GetAttrExpr(ExprPtr o, std::string n, int l) : Expr(Kind::kGetAttr, l), object(std::move(o)), name(std::move(n)) {}
  ExprPtr object;
  std::string name;
};

struct GetItemExpr : Expr {
  GetItemExpr(ExprPtr o, ExprPtr i, int l) : Expr(Kind::kGetItem, l), object(std::move(o)), index(std::move(i)) {}
  ExprPtr object, index;
};

struct SliceExpr : Expr {
  explicit SliceExpr(int l) : Expr(Kind::kSlice, l) {}
  ExprPtr start, stop, step;  // each may be null
};

struct CallExpr : Expr {
  CallExpr(ExprPtr c, int l) : Expr(Kind::kCall, l), callee(std::move(c)) {}
  ExprPtr callee;
  Arguments args;
};

// A filter or a test applied to `value`; a filter of a {% filter %} block has no value.
struct FilterExpr : Expr {
  FilterExpr(Kind k, ExprPtr v, std::string n, int l) : Expr(k, l), value(std::move(v)), name(std::move(n)) {}
  ExprPtr value;
  std::string name;
  Arguments args;
};

struct UnaryExpr : Expr {
  UnaryExpr(char o, ExprPtr e, int l) : Expr(Kind::kUnary, l), op(o), operand(std::move(e)) {}
  char op;  // '-', '+', '!' (not)
  ExprPtr operand;
};

struct BinaryExpr : Expr {
  BinaryExpr(std::string o, ExprPtr a, ExprPtr b, int l)
      : Expr(Kind::kBinary, l), op(std::move(o)), left(std::move(a)), right(std::move(b)) {}
  std::string op;  // "+", "-", "*", "/", "//", "%", "**", "and", "or"
  ExprPtr left, right;
};

struct ConcatExpr : Expr {
  explicit ConcatExpr(int l) : Expr(Kind::kConcat, l) {}
  std::vector<ExprPtr> items;
};

struct CompareExpr : Expr {
  CompareExpr(ExprPtr f, int l) : Expr(Kind::kCompare, l), first(std::move(f)) {}
  ExprPtr first;
  std::vector<std::pair<std::string, ExprPtr>> rest;  // "==", "!=", "<", "<=", ">", ">=", "in", "notin"
};

struct CondExpr : Expr {
  explicit CondExpr(int l) : Expr(Kind::kCond, l) {}
  ExprPtr test, then, otherwise;  // otherwise may be null: undefined
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    kData,        // template text
    kOutput,      // {{ expr }}
    kIf,
    kFor,
    kSet,         // {% set target = expr %}
    kSetBlock,    // {% set target %}...{% endset %}
    kMacro,
    kFilterBlock, // {% filter f %}...{% endfilter %}
    kWith,
    kBreak,
    kContinue,
    kGeneration,  // {% generation %}...{% endgeneration %} (transformers' AssistantTracker)
  };
  Stmt(Kind k, int l) : kind(k), line(l) {}
  virtual ~Stmt() = default;
  Kind kind;
  int line;
};

struct DataStmt : Stmt {
  DataStmt(std::string t, int l) : Stmt(Kind::kData, l), text(std::move(t)) {}
  std::string text;
};

struct OutputStmt : Stmt {
  OutputStmt(ExprPtr e, int l) : Stmt(Kind::kOutput, l), expr(std::move(e)) {}
  ExprPtr expr;
};

struct IfStmt : Stmt {
  explicit IfStmt(int l) : Stmt(Kind::kIf, l) {}
  std::vector<std::pair<ExprPtr, Body>> branches;  // if, elif...
  Body otherwise;
};

struct ForStmt : Stmt {
  explicit ForStmt(int l) : Stmt(Kind::kFor, l) {}
  ExprPtr target;  // a name or a tuple of names
  ExprPtr iter;
  ExprPtr filter;  // `for x in xs if cond`; may be null
  Body body, otherwise;
};

struct SetStmt : Stmt {
  SetStmt(ExprPtr t, ExprPtr v, int l) : Stmt(Kind::kSet, l), target(std::move(t)), value(std::move(v)) {}
  ExprPtr target;  // a name, a tuple of names or a namespace attribute
  ExprPtr value;
};

struct SetBlockStmt : Stmt {
  explicit SetBlockStmt(int l) : Stmt(Kind::kSetBlock, l) {}
  ExprPtr target;
  ExprPtr filter;  // `{% set x | upper %}`: a FilterExpr chain whose innermost value is null
  Body body;
};

struct MacroStmt : Stmt {
  explicit MacroStmt(int l) : Stmt(Kind::kMacro, l) {}
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // for the last defaults.size() params
  Body body;
};

struct FilterBlockStmt : Stmt {
  explicit FilterBlockStmt(int l) : Stmt(Kind::kFilterBlock, l) {}
  ExprPtr filter;  // as SetBlockStmt::filter
  Body body;
};

struct WithStmt : Stmt {
  explicit WithStmt(int l) : Stmt(Kind::kWith, l) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> assignments;
  Body body;
};

struct BodyStmt : Stmt {  // break, continue (no body), generation
  BodyStmt(Kind k, int l) : Stmt(k, l) {}
  Body body;
};

}  // namespace fsdpp::data::jinja
