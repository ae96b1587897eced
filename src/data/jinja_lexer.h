#pragma once
// A chat template's source as tokens, with jinja2's whitespace rules applied as transformers
// configures them (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False):
//
// - line breaks (\r\n, \r, \n) become \n, and one final line break of the source is dropped;
// - a block tag or comment ({% %}, {# #}) alone on its line after indentation loses that
//   indentation (lstrip_blocks), unless it opens with {%+;
// - the first newline after a block tag or comment is dropped (trim_blocks), unless it closes
//   with +%};
// - a '-' inside the delimiters ({%- -%}, {{- -}}, {#- -#}) strips all whitespace, newlines
//   included, on that side.
//
// Comments vanish and {% raw %}...{% endraw %} is data. Inside tags, braces must balance before
// a closing delimiter counts, so `{% set d = {'a': {}} %}` lexes as one tag.

#include <cstdint>
#include <string>
#include <vector>

namespace fsdpp::data::jinja {

enum class TokenType : uint8_t {
  kData,           // template text, whitespace rules applied
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,         // value: the decoded literal (Python's escapes applied)
  kInteger,        // value: the digits as written (0x.., 1_000, ...)
  kFloat,
  kOperator,       // value: the operator ("+", "//", "==", "(", ...)
  kEof,
};

struct Token {
  TokenType type;
  std::string value;
  int line;
  int column;
};

// Throws SyntaxError (jinja_error.h) with the position of an unclosed tag, comment or string,
// an unbalanced bracket or a character no token starts with.
std::vector<Token> tokenize(const std::string& source);

// The source as the lexer sees it: line breaks as \n, without one final line break.
std::string normalize_newlines(const std::string& source);

}  // namespace fsdpp::data::jinja
