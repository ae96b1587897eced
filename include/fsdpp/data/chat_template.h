#pragma once
// A Hugging Face chat template (tokenizer_config.json's "chat_template", a Jinja program),
// rendered as transformers' apply_chat_template renders it: jinja2 in an
// ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the loopcontrols extension
// (break, continue), transformers' {% generation %} tag, raise_exception(), strftime_now(), and
// its tojson (json.dumps: no HTML escaping, non-ASCII kept, ", " and ": " separators).
//
//   auto tmpl = fsdpp::data::ChatTemplate::parse(config["chat_template"]);
//   std::string text = tmpl.render({{"messages", messages}, {"add_generation_prompt", false},
//                                   {"bos_token", "<s>"}, {"eos_token", "</s>"}});
//
// The context is nlohmann::ordered_json because a template prints its inputs (`tool | tojson`)
// in their keys' order, and Python keeps the order JSON gave them; nlohmann::json sorts keys,
// so a tool definition read into it prints its keys alphabetically, unlike transformers.
// render_chat (chat_render.h) builds the context as apply_chat_template does and finds the
// assistant turns in the text.
//
// What the interpreter covers, and what it leaves out, is in docs/chat-templates.md. Errors
// are fsdpp::ConfigError:
//   "[data] chat template: syntax error at line 3, column 14: unexpected '}'"
//   "[data] chat template: <message>"                  the template's raise_exception(message)
//   "[data] chat template: line 7: unknown filter 'foo'; the filters supported are: ..."
//
// A ChatTemplate is immutable after parse(); copies share the parsed program and render() may
// run on many threads at once.

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fsdpp::data {

// A byte range [begin, end) of rendered text.
struct TextSpan {
  size_t begin = 0;
  size_t end = 0;
  bool operator==(const TextSpan&) const = default;
};

// Text and the ranges its {% generation %} blocks wrote (transformers'
// return_assistant_tokens_mask), in bytes of `text`; empty when the template has none.
struct TemplateRender {
  std::string text;
  std::vector<TextSpan> generation_spans;
};

class ChatTemplate {
 public:
  // strftime_now()'s clock. The default is the system clock, read in local time as Python's
  // datetime.now() is.
  using Clock = std::function<std::chrono::system_clock::time_point()>;

  // Throws ConfigError naming the line and column of a syntax error.
  static ChatTemplate parse(std::string source);

  std::string render(const nlohmann::ordered_json& context) const;
  // The same for an unordered context: its objects print with their keys sorted.
  std::string render(const nlohmann::json& context) const;
  TemplateRender render_tracked(const nlohmann::ordered_json& context) const;

  // The template has {% generation %} ... {% endgeneration %} blocks.
  bool has_generation_tags() const;
  const std::string& source() const;

  // A copy whose strftime_now() reads `now` (tests: a fixed date).
  ChatTemplate with_clock(Clock now) const;

 private:
  struct Program;
  explicit ChatTemplate(std::shared_ptr<const Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const Program> program_;
  Clock now_;
};

}  // namespace fsdpp::data
