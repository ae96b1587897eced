#pragma once
// Tokens to statements, by jinja2's grammar (jinja2/parser.py): the precedence of
// `x if c else y` < or < and < not < comparisons and in < + - < ~ < * / // % < ** < unary minus
// < filters and tests < calls, attributes and subscripts, so `a + b | trim` trims b only and
// `not x is defined` is `not (x is defined)`.
//
// Statements: if/elif/else, for (with `if` filter and else), set (a name, names, ns.attr, or
// a block), macro, filter and with blocks, break/continue (jinja2.ext.loopcontrols, which
// transformers loads), and generation/endgeneration (transformers' AssistantTracker). Tags
// jinja2 has but chat templates cannot use here (include, extends, import, block, call) are
// refused naming the tag.

#include <vector>

#include "jinja_ast.h"
#include "jinja_lexer.h"

namespace fsdpp::data::jinja {

struct Program {
  Body body;
  bool has_generation = false;  // the template has {% generation %} blocks
};

// Throws SyntaxError at the token where the template stops following the grammar.
Program parse_tokens(const std::vector<Token>& tokens);

}  // namespace fsdpp::data::jinja
