#pragma once
// The two ways rendering a chat template fails inside the interpreter. Both are caught by
// ChatTemplate, which turns them into fsdpp::ConfigError with the "[data] chat template" prefix:
// a RenderError with the line of the template it happened on (a type error, an undefined value
// used, an unknown filter), a RaisedError as the template's own message (raise_exception(msg):
// "[data] chat template: <msg>", the text a template author wrote for the user).

#include <stdexcept>
#include <string>

namespace fsdpp::data::jinja {

class RenderError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class RaisedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace fsdpp::data::jinja

namespace fsdpp::data::jinja {

// A template that does not parse, at its 1-based line and column (in characters).
class SyntaxError : public std::runtime_error {
 public:
  SyntaxError(int line, int column, const std::string& what)
      : std::runtime_error(what), line_(line), column_(column) {}
  int line() const { return line_; }
  int column() const { return column_; }

 private:
  int line_;
  int column_;
};

}  // namespace fsdpp::data::jinja
