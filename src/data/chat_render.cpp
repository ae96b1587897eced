#include "fsdpp/data/chat_render.h"

#include <algorithm>

#include <fmt/format.h>

#include "fsdpp/common/error.h"

namespace fsdpp::data {

namespace {

using Json = nlohmann::ordered_json;

// The fixes a user has when no assistant turn can be located (docs/chat-templates.md).
constexpr const char* kFixes =
    "use a chat template with {% generation %} ... {% endgeneration %} around the assistant's output (TRL ships "
    "such 'training' variants of common templates; see docs/chat-templates.md), or give the data as "
    "prompt/completion records and set data.completion_only_loss";

// Names a message's reasoning is passed under; transformers fills "thinking" and
// "reasoning_content" from the first one present (_alias_reasoning_fields).
constexpr const char* kReasoningFields[] = {"reasoning_content", "thinking", "reasoning"};

Json prepare_message(const Json& message, size_t index) {
  FSDPP_CHECK_AS(ConfigError, message.is_object(),
                 "[data] chat messages: message {} is {} ({}); each message must be an object such as "
                 "{{\"role\": \"user\", \"content\": \"...\"}}",
                 index, message.type_name(), message.dump().substr(0, 80));
  // apply_chat_template drops the keys whose value is None before rendering.
  Json kept = Json::object();
  for (const auto& [k, v] : message.items())
    if (!v.is_null()) kept[k] = v;
  const Json* reasoning = nullptr;
  for (const char* field : kReasoningFields) {
    if (kept.contains(field)) {
      reasoning = &kept[field];
      break;
    }
  }
  if (!reasoning) return kept;
  // Python's {"thinking": reasoning, **message, "reasoning_content": reasoning}.
  Json out = Json::object();
  out["thinking"] = *reasoning;
  for (const auto& [k, v] : kept.items()) out[k] = v;
  out["reasoning_content"] = *reasoning;
  return out;
}

Json prepare_messages(const Json& messages, const char* what) {
  FSDPP_CHECK_AS(ConfigError, messages.is_array(),
                 "[data] chat messages: {} must be a list of messages, not {}", what, messages.type_name());
  Json out = Json::array();
  for (size_t i = 0; i < messages.size(); ++i) out.push_back(prepare_message(messages[i], i));
  return out;
}

Json context_for(const Json& messages, const ChatRenderOptions& o, bool add_generation_prompt) {
  Json ctx = Json::object();
  if (o.special_tokens.is_object())
    for (const auto& [k, v] : o.special_tokens.items()) ctx[k] = v;
  if (o.extra.is_object())
    for (const auto& [k, v] : o.extra.items()) ctx[k] = v;
  ctx["messages"] = messages;
  ctx["tools"] = o.tools;
  ctx["documents"] = o.documents;
  ctx["add_generation_prompt"] = add_generation_prompt;
  return ctx;
}

Json head(const Json& messages, size_t n) {
  Json out = Json::array();
  for (size_t i = 0; i < n && i < messages.size(); ++i) out.push_back(messages[i]);
  return out;
}

// Where `a` stops being a prefix of `b`, shown as two JSON strings of the text around it.
std::string first_difference(const std::string& a, const std::string& b) {
  size_t at = 0;
  while (at < a.size() && at < b.size() && a[at] == b[at]) ++at;
  const size_t from = at > 30 ? at - 30 : 0;
  auto excerpt = [&](const std::string& s) {
    std::string piece = s.substr(from, std::min<size_t>(s.size() - std::min(from, s.size()), at - from + 40));
    return Json(piece).dump(-1, ' ', false, Json::error_handler_t::replace);
  };
  return fmt::format("at byte {}: {} against {}", at, excerpt(a), excerpt(b));
}

bool is_prefix(const std::string& prefix, const std::string& text) {
  return prefix.size() <= text.size() && text.compare(0, prefix.size(), prefix) == 0;
}

std::string render_or_explain(const ChatTemplate& tmpl, const Json& ctx, size_t index, size_t n, const char* what) {
  try {
    return tmpl.render(ctx);
  } catch (const ConfigError& e) {
    FSDPP_THROW(ConfigError,
                "[data] chat template: cannot find assistant message {} (of {} messages) in the rendered "
                "conversation: rendering {} failed: {}; {}",
                index, n, what, e.what(), kFixes);
  }
}

}  // namespace

Json special_tokens_from_config(const Json& tokenizer_config) {
  Json out = Json::object();
  if (!tokenizer_config.is_object()) return out;
  for (const char* name : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    const auto it = tokenizer_config.find(name);
    if (it == tokenizer_config.end()) continue;
    if (it->is_string()) out[name] = *it;
    else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) out[name] = (*it)["content"];
  }
  return out;
}

std::string chat_template_from_config(const Json& tokenizer_config, bool with_tools) {
  const auto it = tokenizer_config.is_object() ? tokenizer_config.find("chat_template") : tokenizer_config.end();
  FSDPP_CHECK_AS(ConfigError, it != tokenizer_config.end() && !it->is_null(),
                 "[data] tokenizer_config.json has no chat_template, so chat messages cannot be rendered; give the "
                 "model's chat template (its chat_template.jinja) or data as text or prompt/completion records");
  if (it->is_string()) return it->get<std::string>();
  FSDPP_CHECK_AS(ConfigError, it->is_array(),
                 "[data] tokenizer_config.json: chat_template must be a string or a list of {{\"name\", \"template\"}}, "
                 "not {}", it->type_name());
  const Json* fallback = nullptr;
  std::string names;
  for (const auto& entry : *it) {
    const std::string name = entry.value("name", "");
    names += (names.empty() ? "" : ", ") + name;
    if (with_tools && name == "tool_use") return entry.value("template", "");
    if (name == "default") fallback = &entry;
  }
  FSDPP_CHECK_AS(ConfigError, fallback != nullptr,
                 "[data] tokenizer_config.json: chat_template lists templates named {} but none named 'default'{}",
                 names, with_tools ? " or 'tool_use'" : "");
  return fallback->value("template", "");
}

std::string render_conversation(const ChatTemplate& tmpl, const Json& messages, const ChatRenderOptions& options) {
  return tmpl.render(context_for(prepare_messages(messages, "messages"), options, options.add_generation_prompt));
}

RenderedChat render_chat(const ChatTemplate& tmpl, const Json& messages, const ChatRenderOptions& options) {
  const Json prepared = prepare_messages(messages, "messages");
  TemplateRender full = tmpl.render_tracked(context_for(prepared, options, options.add_generation_prompt));
  RenderedChat out;
  out.text = std::move(full.text);
  if (tmpl.has_generation_tags()) {
    out.source = RenderedChat::SpanSource::kGenerationTags;
    out.assistant_spans = std::move(full.generation_spans);
    return out;
  }
  out.source = RenderedChat::SpanSource::kPrefixes;
  const size_t n = prepared.size();
  for (size_t i = 0; i < n; ++i) {
    const auto role = prepared[i].find("role");
    if (role == prepared[i].end() || *role != "assistant") continue;
    const std::string prompt = render_or_explain(tmpl, context_for(head(prepared, i), options, true), i, n,
                                                 "the messages before it with add_generation_prompt=true");
    const std::string turn = render_or_explain(tmpl, context_for(head(prepared, i + 1), options, false), i, n,
                                               "the messages up to it");
    FSDPP_CHECK_AS(ConfigError, is_prefix(prompt, turn),
                   "[data] chat template: cannot find assistant message {} (of {} messages) in the rendered "
                   "conversation: the messages before it rendered with add_generation_prompt=true are not a prefix "
                   "of the messages up to it rendered (they differ {}): the template renders earlier turns "
                   "differently once an assistant turn follows them (Mistral's moves the system message into the "
                   "last user turn), or starts an assistant turn otherwise than with its generation prompt; {}",
                   i, n, first_difference(prompt, turn), kFixes);
    FSDPP_CHECK_AS(ConfigError, is_prefix(turn, out.text),
                   "[data] chat template: cannot find assistant message {} (of {} messages) in the rendered "
                   "conversation: the messages up to it render differently when later messages follow (they differ "
                   "{}): the template rewrites earlier turns (Qwen3's drops the thinking of assistant turns before "
                   "the last user message; Mistral's moves the system message into the last user turn); {}",
                   i, n, first_difference(turn, out.text), kFixes);
    out.assistant_spans.push_back(TextSpan{prompt.size(), turn.size()});
  }
  return out;
}

RenderedChat render_prompt_completion(const ChatTemplate& tmpl, const Json& prompt, const Json& completion,
                                      const ChatRenderOptions& options) {
  const Json prepared_prompt = prepare_messages(prompt, "prompt");
  Json all = prepared_prompt;
  for (const auto& m : prepare_messages(completion, "completion")) all.push_back(m);
  const std::string prompt_text = tmpl.render(context_for(prepared_prompt, options, true));
  RenderedChat out;
  out.text = tmpl.render(context_for(all, options, false));
  out.source = RenderedChat::SpanSource::kPrefixes;
  FSDPP_CHECK_AS(ConfigError, is_prefix(prompt_text, out.text),
                 "[data] chat template: the prompt rendered with add_generation_prompt=true is not a prefix of the "
                 "prompt and completion rendered together (they differ {}), so the completion's tokens cannot be "
                 "told from the prompt's; a template that renders the prompt's turns the same whichever turns follow "
                 "is needed (see docs/chat-templates.md)",
                 first_difference(prompt_text, out.text));
  out.assistant_spans.push_back(TextSpan{prompt_text.size(), out.text.size()});
  return out;
}

}  // namespace fsdpp::data
