#include "jinja_parser.h"

#include <cerrno>
#include <cstdlib>
#include <initializer_list>

#include <fmt/format.h>

#include "jinja_error.h"

namespace fsdpp::data::jinja {

namespace {

std::string describe(const Token& t) {
  switch (t.type) {
    case TokenType::kData: return "template text";
    case TokenType::kVariableBegin: return "'{{'";
    case TokenType::kVariableEnd: return "'}}'";
    case TokenType::kBlockBegin: return "'{%'";
    case TokenType::kBlockEnd: return "'%}'";
    case TokenType::kString: return "a string";
    case TokenType::kEof: return "the end of the template";
    default: return "'" + t.value + "'";
  }
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : tokens_(tokens) {}

  Program run() {
    Program program;
    program.body = subparse({});
    if (cur().type != TokenType::kEof) fail(cur(), fmt::format("unexpected {}", describe(cur())));
    program.has_generation = has_generation_;
    return program;
  }

 private:
  const Token& cur() const { return tokens_[pos_]; }
  const Token& look() const { return tokens_[pos_ + 1 < tokens_.size() ? pos_ + 1 : pos_]; }
  const Token& advance() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  bool is_name(const Token& t, const char* v) const { return t.type == TokenType::kName && t.value == v; }
  bool is_op(const Token& t, const char* v) const { return t.type == TokenType::kOperator && t.value == v; }
  bool skip_name(const char* v) {
    if (!is_name(cur(), v)) return false;
    advance();
    return true;
  }
  bool skip_op(const char* v) {
    if (!is_op(cur(), v)) return false;
    advance();
    return true;
  }
  [[noreturn]] void fail(const Token& t, const std::string& what) const { throw SyntaxError(t.line, t.column, what); }
  const Token& expect_op(const char* v) {
    if (!is_op(cur(), v)) fail(cur(), fmt::format("expected '{}', found {}", v, describe(cur())));
    return advance();
  }
  const Token& expect_name() {
    if (cur().type != TokenType::kName) fail(cur(), fmt::format("expected a name, found {}", describe(cur())));
    return advance();
  }
  void expect_type(TokenType type, const char* what) {
    if (cur().type != type) fail(cur(), fmt::format("expected {}, found {}", what, describe(cur())));
    advance();
  }

  Body subparse(std::initializer_list<const char*> end_names);
  // The block after a statement's head up to one of `end_names` (jinja2's parse_statements);
  // with `drop_needle`, the end name is consumed.
  Body parse_statements(const std::string& tag, int line, std::initializer_list<const char*> end_names, bool drop_needle);
  StmtPtr parse_statement();
  StmtPtr parse_for(int line);
  StmtPtr parse_if(int line);
  StmtPtr parse_set(int line);
  StmtPtr parse_macro(int line);

  ExprPtr parse_expression(bool with_condexpr = true);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter = true);
  ExprPtr parse_primary(bool with_namespace = false);
  ExprPtr parse_tuple(bool simplified = false, bool with_condexpr = true, const char* extra_end = nullptr,
                      bool explicit_parentheses = false, bool with_namespace = false);
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_subscribed();
  Arguments parse_call_args();
  ExprPtr parse_filter(ExprPtr node, bool start_inline);
  ExprPtr parse_test(ExprPtr node);
  ExprPtr parse_assign_target(bool with_tuple, const char* extra_end, bool with_namespace);
  bool is_tuple_end(const char* extra_end) const {
    const auto t = cur().type;
    if (t == TokenType::kVariableEnd || t == TokenType::kBlockEnd || is_op(cur(), ")")) return true;
    return extra_end && is_name(cur(), extra_end);
  }

  const std::vector<Token>& tokens_;
  size_t pos_ = 0;
  int loop_depth_ = 0;
  bool has_generation_ = false;
  // The open block tags, innermost last: for "expected 'endfor'" messages.
  std::vector<std::pair<std::string, int>> open_;
};

Body Parser::subparse(std::initializer_list<const char*> end_names) {
  Body body;
  while (cur().type != TokenType::kEof) {
    const Token& t = cur();
    if (t.type == TokenType::kData) {
      body.push_back(std::make_unique<DataStmt>(t.value, t.line));
      advance();
    } else if (t.type == TokenType::kVariableBegin) {
      advance();
      auto expr = parse_tuple();
      body.push_back(std::make_unique<OutputStmt>(std::move(expr), t.line));
      expect_type(TokenType::kVariableEnd, "'}}'");
    } else if (t.type == TokenType::kBlockBegin) {
      advance();
      for (const char* end : end_names)
        if (is_name(cur(), end)) return body;
      body.push_back(parse_statement());
      expect_type(TokenType::kBlockEnd, "'%}'");
    } else {
      fail(t, fmt::format("unexpected {}", describe(t)));
    }
  }
  return body;
}

Body Parser::parse_statements(const std::string& tag, int line, std::initializer_list<const char*> end_names,
                              bool drop_needle) {
  skip_op(":");
  expect_type(TokenType::kBlockEnd, "'%}'");
  open_.emplace_back(tag, line);
  Body body = subparse(end_names);
  if (cur().type == TokenType::kEof) {
    std::string expected;
    for (const char* end : end_names) expected += (expected.empty() ? "'" : " or '") + std::string(end) + "'";
    fail(cur(), fmt::format("unexpected end of template; expected {} to close the '{}' tag of line {}", expected, tag, line));
  }
  open_.pop_back();
  if (drop_needle) advance();
  return body;
}

StmtPtr Parser::parse_statement() {
  const Token& t = cur();
  if (t.type != TokenType::kName) fail(t, "expected a tag name after '{%'");
  const std::string name = t.value;
  const int line = t.line;
  advance();
  if (name == "for") return parse_for(line);
  if (name == "if") return parse_if(line);
  if (name == "set") return parse_set(line);
  if (name == "macro") return parse_macro(line);
  if (name == "break" || name == "continue") {
    if (loop_depth_ == 0) fail(t, fmt::format("'{}' outside of a for loop", name));
    return std::make_unique<BodyStmt>(name == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, line);
  }
  if (name == "generation") {
    has_generation_ = true;
    auto node = std::make_unique<BodyStmt>(Stmt::Kind::kGeneration, line);
    node->body = parse_statements(name, line, {"endgeneration"}, true);
    return node;
  }
  if (name == "filter") {
    auto node = std::make_unique<FilterBlockStmt>(line);
    node->filter = parse_filter(nullptr, true);
    node->body = parse_statements(name, line, {"endfilter"}, true);
    return node;
  }
  if (name == "with") {
    auto node = std::make_unique<WithStmt>(line);
    while (cur().type != TokenType::kBlockEnd) {
      if (!node->assignments.empty()) expect_op(",");
      auto target = parse_assign_target(false, nullptr, false);
      expect_op("=");
      node->assignments.emplace_back(std::move(target), parse_expression());
    }
    node->body = parse_statements(name, line, {"endwith"}, true);
    return node;
  }
  if (name == "print") {
    auto list = std::make_unique<ConcatExpr>(line);
    while (cur().type != TokenType::kBlockEnd) {
      if (!list->items.empty()) expect_op(",");
      list->items.push_back(parse_expression());
    }
    return std::make_unique<OutputStmt>(std::move(list), line);
  }
  if (name == "include" || name == "extends" || name == "import" || name == "from" || name == "block" ||
      name == "call" || name == "autoescape")
    fail(t, fmt::format("the '{}' tag is not supported in chat templates (a template is one string, without "
                        "other templates to include, extend or import)", name));
  std::string where;
  if (!open_.empty())
    where = fmt::format("; the innermost open block is '{}' of line {}", open_.back().first, open_.back().second);
  fail(t, fmt::format("unknown tag '{}'{}", name, where));
}

StmtPtr Parser::parse_for(int line) {
  auto node = std::make_unique<ForStmt>(line);
  node->target = parse_assign_target(true, "in", false);
  if (!skip_name("in")) fail(cur(), fmt::format("expected 'in', found {}", describe(cur())));
  node->iter = parse_tuple(false, false, "recursive");
  if (skip_name("if")) node->filter = parse_expression();
  if (is_name(cur(), "recursive")) fail(cur(), "recursive for loops are not supported");
  ++loop_depth_;
  node->body = parse_statements("for", line, {"endfor", "else"}, false);
  --loop_depth_;
  if (advance().value == "else") node->otherwise = parse_statements("for", line, {"endfor"}, true);
  return node;
}

StmtPtr Parser::parse_if(int line) {
  auto node = std::make_unique<IfStmt>(line);
  while (true) {
    auto test = parse_tuple(false, false);
    auto body = parse_statements("if", line, {"elif", "else", "endif"}, false);
    node->branches.emplace_back(std::move(test), std::move(body));
    const std::string which = advance().value;
    if (which == "elif") continue;
    if (which == "else") node->otherwise = parse_statements("if", line, {"endif"}, true);
    break;
  }
  return node;
}

StmtPtr Parser::parse_set(int line) {
  auto target = parse_assign_target(true, nullptr, true);
  if (skip_op("=")) return std::make_unique<SetStmt>(std::move(target), parse_tuple(), line);
  auto node = std::make_unique<SetBlockStmt>(line);
  node->target = std::move(target);
  if (is_op(cur(), "|")) node->filter = parse_filter(nullptr, false);
  node->body = parse_statements("set", line, {"endset"}, true);
  return node;
}

StmtPtr Parser::parse_macro(int line) {
  auto node = std::make_unique<MacroStmt>(line);
  node->name = expect_name().value;
  expect_op("(");
  while (!is_op(cur(), ")")) {
    if (!node->params.empty()) expect_op(",");
    if (is_op(cur(), ")")) break;
    node->params.push_back(expect_name().value);
    if (skip_op("=")) {
      node->defaults.push_back(parse_expression());
    } else if (!node->defaults.empty()) {
      fail(cur(), "a macro parameter without a default follows one with a default");
    }
  }
  expect_op(")");
  const int saved = loop_depth_;
  loop_depth_ = 0;  // break/continue do not reach a loop around the macro's definition
  node->body = parse_statements("macro", line, {"endmacro"}, true);
  loop_depth_ = saved;
  return node;
}

ExprPtr Parser::parse_assign_target(bool with_tuple, const char* extra_end, bool with_namespace) {
  const Token& start = cur();
  ExprPtr target = with_tuple ? parse_tuple(true, true, extra_end, false, with_namespace) : parse_primary(with_namespace);
  auto assignable = [](const Expr& e) { return e.kind == Expr::Kind::kName || e.kind == Expr::Kind::kNsRef; };
  bool ok = assignable(*target);
  if (target->kind == Expr::Kind::kList && static_cast<ListExpr&>(*target).tuple) {
    ok = true;
    for (const auto& item : static_cast<ListExpr&>(*target).items) ok = ok && assignable(*item);
  }
  if (!ok) fail(start, "cannot assign to this expression; a name, names separated by commas or ns.attribute is expected");
  return target;
}

ExprPtr Parser::parse_expression(bool with_condexpr) {
  if (!with_condexpr) return parse_or();
  const int line = cur().line;
  ExprPtr expr = parse_or();
  while (skip_name("if")) {
    auto cond = std::make_unique<CondExpr>(line);
    cond->test = parse_or();
    if (skip_name("else")) cond->otherwise = parse_expression(true);
    cond->then = std::move(expr);
    expr = std::move(cond);
  }
  return expr;
}

ExprPtr Parser::parse_or() {
  ExprPtr left = parse_and();
  while (is_name(cur(), "or")) {
    const int line = advance().line;
    left = std::make_unique<BinaryExpr>("or", std::move(left), parse_and(), line);
  }
  return left;
}

ExprPtr Parser::parse_and() {
  ExprPtr left = parse_not();
  while (is_name(cur(), "and")) {
    const int line = advance().line;
    left = std::make_unique<BinaryExpr>("and", std::move(left), parse_not(), line);
  }
  return left;
}

ExprPtr Parser::parse_not() {
  if (is_name(cur(), "not")) {
    const int line = advance().line;
    return std::make_unique<UnaryExpr>('!', parse_not(), line);
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  const int line = cur().line;
  ExprPtr first = parse_math1();
  std::unique_ptr<CompareExpr> cmp;
  while (true) {
    std::string op;
    const Token& t = cur();
    if (t.type == TokenType::kOperator &&
        (t.value == "==" || t.value == "!=" || t.value == "<" || t.value == "<=" || t.value == ">" || t.value == ">=")) {
      op = t.value;
      advance();
    } else if (is_name(t, "in")) {
      op = "in";
      advance();
    } else if (is_name(t, "not") && is_name(look(), "in")) {
      op = "notin";
      advance();
      advance();
    } else {
      break;
    }
    if (!cmp) cmp = std::make_unique<CompareExpr>(std::move(first), line);
    cmp->rest.emplace_back(op, parse_math1());
  }
  if (cmp) return cmp;
  return first;
}

ExprPtr Parser::parse_math1() {
  ExprPtr left = parse_concat();
  while (is_op(cur(), "+") || is_op(cur(), "-")) {
    const Token& t = advance();
    left = std::make_unique<BinaryExpr>(t.value, std::move(left), parse_concat(), t.line);
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  const int line = cur().line;
  ExprPtr first = parse_math2();
  if (!is_op(cur(), "~")) return first;
  auto node = std::make_unique<ConcatExpr>(line);
  node->items.push_back(std::move(first));
  while (skip_op("~")) node->items.push_back(parse_math2());
  return node;
}

ExprPtr Parser::parse_math2() {
  ExprPtr left = parse_pow();
  while (is_op(cur(), "*") || is_op(cur(), "/") || is_op(cur(), "//") || is_op(cur(), "%")) {
    const Token& t = advance();
    left = std::make_unique<BinaryExpr>(t.value, std::move(left), parse_pow(), t.line);
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  ExprPtr left = parse_unary();
  while (is_op(cur(), "**")) {
    const int line = advance().line;
    left = std::make_unique<BinaryExpr>("**", std::move(left), parse_unary(), line);
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  const Token& t = cur();
  ExprPtr node;
  if (is_op(t, "-") || is_op(t, "+")) {
    const char op = t.value[0];
    const int line = advance().line;
    node = std::make_unique<UnaryExpr>(op, parse_unary(false), line);
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

ExprPtr Parser::parse_primary(bool with_namespace) {
  const Token& t = cur();
  switch (t.type) {
    case TokenType::kName: {
      advance();
      if (t.value == "true" || t.value == "True") return std::make_unique<ConstExpr>(Value(true), t.line);
      if (t.value == "false" || t.value == "False") return std::make_unique<ConstExpr>(Value(false), t.line);
      if (t.value == "none" || t.value == "None") return std::make_unique<ConstExpr>(Value::none(), t.line);
      if (with_namespace && is_op(cur(), ".")) {
        advance();
        const std::string attr = expect_name().value;
        return std::make_unique<NsRefExpr>(t.value, attr, t.line);
      }
      return std::make_unique<NameExpr>(t.value, t.line);
    }
    case TokenType::kString: {
      std::string s;
      while (cur().type == TokenType::kString) s += advance().value;  // "a" "b" is "ab"
      return std::make_unique<ConstExpr>(Value(std::move(s)), t.line);
    }
    case TokenType::kInteger: {
      advance();
      std::string digits;
      for (char c : t.value)
        if (c != '_') digits.push_back(c);
      int base = 10;
      size_t skip = 0;
      if (digits.size() > 1 && digits[0] == '0' && (digits[1] | 0x20) != '0') {
        const char b = static_cast<char>(digits[1] | 0x20);
        base = b == 'x' ? 16 : b == 'o' ? 8 : b == 'b' ? 2 : 10;
        skip = 2;
      }
      errno = 0;
      const long long v = std::strtoll(digits.c_str() + skip, nullptr, base);
      if (errno == ERANGE) fail(t, fmt::format("integer literal {} does not fit in 64 bits", t.value));
      return std::make_unique<ConstExpr>(Value(static_cast<int64_t>(v)), t.line);
    }
    case TokenType::kFloat: {
      advance();
      std::string digits;
      for (char c : t.value)
        if (c != '_') digits.push_back(c);
      return std::make_unique<ConstExpr>(Value(std::strtod(digits.c_str(), nullptr)), t.line);
    }
    default: break;
  }
  if (is_op(t, "(")) {
    advance();
    ExprPtr node = parse_tuple(false, true, nullptr, true);
    expect_op(")");
    return node;
  }
  if (is_op(t, "[")) {
    auto node = std::make_unique<ListExpr>(false, t.line);
    advance();
    while (!is_op(cur(), "]")) {
      if (!node->items.empty()) expect_op(",");
      if (is_op(cur(), "]")) break;
      node->items.push_back(parse_expression());
    }
    expect_op("]");
    return node;
  }
  if (is_op(t, "{")) {
    auto node = std::make_unique<DictExpr>(t.line);
    advance();
    while (!is_op(cur(), "}")) {
      if (!node->items.empty()) expect_op(",");
      if (is_op(cur(), "}")) break;
      ExprPtr key = parse_expression();
      expect_op(":");
      node->items.emplace_back(std::move(key), parse_expression());
    }
    expect_op("}");
    return node;
  }
  fail(t, fmt::format("unexpected {}; an expression is expected", describe(t)));
}

ExprPtr Parser::parse_tuple(bool simplified, bool with_condexpr, const char* extra_end, bool explicit_parentheses,
                            bool with_namespace) {
  const int line = cur().line;
  std::vector<ExprPtr> args;
  bool is_tuple = false;
  while (true) {
    if (!args.empty()) expect_op(",");
    if (is_tuple_end(extra_end)) break;
    args.push_back(simplified ? parse_primary(with_namespace) : parse_expression(with_condexpr));
    if (is_op(cur(), ",")) is_tuple = true;
    else break;
  }
  if (!is_tuple) {
    if (!args.empty()) return std::move(args[0]);
    if (!explicit_parentheses) fail(cur(), fmt::format("expected an expression, found {}", describe(cur())));
  }
  auto node = std::make_unique<ListExpr>(true, line);
  node->items = std::move(args);
  return node;
}

ExprPtr Parser::parse_postfix(ExprPtr node) {
  while (true) {
    if (is_op(cur(), ".") || is_op(cur(), "[")) {
      node = parse_subscript(std::move(node));
    } else if (is_op(cur(), "(")) {
      const int line = cur().line;
      auto call = std::make_unique<CallExpr>(std::move(node), line);
      call->args = parse_call_args();
      node = std::move(call);
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (is_op(cur(), "|")) {
      node = parse_filter(std::move(node), false);
    } else if (is_name(cur(), "is")) {
      node = parse_test(std::move(node));
    } else if (is_op(cur(), "(")) {
      const int line = cur().line;
      auto call = std::make_unique<CallExpr>(std::move(node), line);
      call->args = parse_call_args();
      node = std::move(call);
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr node) {
  const Token& t = advance();
  if (t.value == ".") {
    const Token& attr = cur();
    if (attr.type == TokenType::kName) {
      advance();
      return std::make_unique<GetAttrExpr>(std::move(node), attr.value, t.line);
    }
    if (attr.type != TokenType::kInteger) fail(attr, "expected a name or a number after '.'");
    auto index = parse_primary();
    return std::make_unique<GetItemExpr>(std::move(node), std::move(index), t.line);
  }
  std::vector<ExprPtr> args;
  while (!is_op(cur(), "]")) {
    if (!args.empty()) expect_op(",");
    args.push_back(parse_subscribed());
  }
  expect_op("]");
  if (args.empty()) fail(t, "expected a subscript expression inside '[]'");
  ExprPtr index;
  if (args.size() == 1) {
    index = std::move(args[0]);
  } else {
    auto tuple = std::make_unique<ListExpr>(true, t.line);
    tuple->items = std::move(args);
    index = std::move(tuple);
  }
  return std::make_unique<GetItemExpr>(std::move(node), std::move(index), t.line);
}

ExprPtr Parser::parse_subscribed() {
  const int line = cur().line;
  ExprPtr first;
  if (!is_op(cur(), ":")) {
    first = parse_expression();
    if (!is_op(cur(), ":")) return first;
  }
  advance();  // the first ':'
  auto slice = std::make_unique<SliceExpr>(line);
  slice->start = std::move(first);
  if (!is_op(cur(), ":") && !is_op(cur(), "]") && !is_op(cur(), ",")) slice->stop = parse_expression();
  if (skip_op(":")) {
    if (!is_op(cur(), "]") && !is_op(cur(), ",")) slice->step = parse_expression();
  }
  return slice;
}

Arguments Parser::parse_call_args() {
  const Token& open = expect_op("(");
  Arguments args;
  bool require_comma = false;
  auto ensure = [&](bool ok) {
    if (!ok) fail(open, "invalid syntax for a call: positional arguments must come before keyword arguments");
  };
  while (!is_op(cur(), ")")) {
    if (require_comma) {
      expect_op(",");
      if (is_op(cur(), ")")) break;
    }
    if (skip_op("*")) {
      ensure(!args.star_args && !args.star_kwargs);
      args.star_args = parse_expression();
    } else if (skip_op("**")) {
      ensure(!args.star_kwargs);
      args.star_kwargs = parse_expression();
    } else if (cur().type == TokenType::kName && is_op(look(), "=")) {
      ensure(!args.star_kwargs);
      const std::string key = advance().value;
      advance();
      args.keyword.emplace_back(key, parse_expression());
    } else {
      ensure(!args.star_args && !args.star_kwargs && args.keyword.empty());
      args.positional.push_back(parse_expression());
    }
    require_comma = true;
  }
  expect_op(")");
  return args;
}

ExprPtr Parser::parse_filter(ExprPtr node, bool start_inline) {
  while (is_op(cur(), "|") || start_inline) {
    if (!start_inline) advance();
    start_inline = false;
    const Token& name = expect_name();
    std::string full = name.value;
    while (skip_op(".")) full += "." + expect_name().value;
    auto filter = std::make_unique<FilterExpr>(Expr::Kind::kFilter, std::move(node), full, name.line);
    if (is_op(cur(), "(")) filter->args = parse_call_args();
    node = std::move(filter);
  }
  return node;
}

ExprPtr Parser::parse_test(ExprPtr node) {
  const int line = advance().line;  // 'is'
  const bool negated = skip_name("not");
  std::string name = expect_name().value;
  while (skip_op(".")) name += "." + expect_name().value;
  auto test = std::make_unique<FilterExpr>(Expr::Kind::kTest, std::move(node), name, line);
  const Token& t = cur();
  const bool arg_start = t.type == TokenType::kName || t.type == TokenType::kString || t.type == TokenType::kInteger ||
                         t.type == TokenType::kFloat || is_op(t, "[") || is_op(t, "{");
  if (is_op(t, "(")) {
    test->args = parse_call_args();
  } else if (arg_start && !is_name(t, "else") && !is_name(t, "or") && !is_name(t, "and")) {
    if (is_name(t, "is")) fail(t, "tests cannot be chained with 'is'");
    test->args.positional.push_back(parse_postfix(parse_primary()));  // `is divisibleby 3`, `is sameas false`
  }
  if (negated) return std::make_unique<UnaryExpr>('!', std::move(test), line);
  return test;
}

}  // namespace

Program parse_tokens(const std::vector<Token>& tokens) { return Parser(tokens).run(); }

}  // namespace fsdpp::data::jinja
