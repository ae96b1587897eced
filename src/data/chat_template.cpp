#include "fsdpp/data/chat_template.h"

#include <fmt/format.h>

#include "fsdpp/common/error.h"
#include "jinja_error.h"
#include "jinja_eval.h"
#include "jinja_lexer.h"
#include "jinja_parser.h"

namespace fsdpp::data {

struct ChatTemplate::Program {
  std::string source;
  jinja::Program program;
};

ChatTemplate ChatTemplate::parse(std::string source) {
  auto program = std::make_shared<Program>();
  try {
    program->program = jinja::parse_tokens(jinja::tokenize(source));
  } catch (const jinja::SyntaxError& e) {
    FSDPP_THROW(ConfigError, "[data] chat template: syntax error at line {}, column {}: {}", e.line(), e.column(),
                e.what());
  }
  program->source = std::move(source);
  return ChatTemplate(std::move(program));
}

TemplateRender ChatTemplate::render_tracked(const nlohmann::ordered_json& context) const {
  FSDPP_CHECK_AS(ConfigError, context.is_object(),
                 "[data] chat template: the context must be a JSON object of variables (messages, "
                 "add_generation_prompt, ...), not {}", context.type_name());
  jinja::RenderEnvironment env{now_};
  jinja::Evaluator evaluator(program_->program, env);
  jinja::RenderOutput out;
  try {
    out = evaluator.render(context);
  } catch (const jinja::RaisedError& e) {
    FSDPP_THROW(ConfigError, "[data] chat template: {}", e.what());
  } catch (const jinja::RenderError& e) {
    FSDPP_THROW(ConfigError, "[data] chat template: {}", e.what());
  }
  TemplateRender result{std::move(out.text), {}};
  for (const auto& [b, e] : out.generation_spans) result.generation_spans.push_back(TextSpan{b, e});
  return result;
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const { return render_tracked(context).text; }

std::string ChatTemplate::render(const nlohmann::json& context) const {
  return render(nlohmann::ordered_json(context));  // keys in nlohmann::json's (sorted) order
}

bool ChatTemplate::has_generation_tags() const { return program_->program.has_generation; }

const std::string& ChatTemplate::source() const { return program_->source; }

ChatTemplate ChatTemplate::with_clock(Clock now) const {
  ChatTemplate copy = *this;
  copy.now_ = std::move(now);
  return copy;
}

}  // namespace fsdpp::data
