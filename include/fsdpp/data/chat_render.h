#pragma once
// A conversation rendered with its model's chat template as transformers' apply_chat_template
// renders it, and where its assistant turns are in the text: the spans data.assistant_only_loss
// puts the loss on (TRL's SFTTrainer), and the completion of a conversational
// prompt/completion record (data.completion_only_loss).
//
//   ChatRenderOptions opts;
//   opts.special_tokens = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
//   RenderedChat chat = render_chat(tmpl, messages, opts);
//   for (TextSpan s : chat.assistant_spans) ... chat.text.substr(s.begin, s.end - s.begin) ...
//
// The context the template sees is apply_chat_template's: the special tokens, then the extra
// keyword arguments (enable_thinking, date_string, ...), then messages, tools, documents (None
// when not given, so `tools is not none` is false) and add_generation_prompt. Each message
// loses its keys whose value is null, and a message with reasoning (reasoning_content,
// thinking or reasoning) carries it under both "thinking" and "reasoning_content", as
// transformers passes them.
//
// The assistant turns, in this order of preference:
// 1. The template has {% generation %} blocks: their ranges in the text, as transformers'
//    return_assistant_tokens_mask finds them (TRL's "training" templates add these tags).
// 2. Otherwise by prefixes: for assistant message i, the conversation up to message i rendered
//    with add_generation_prompt=true (the prompt the model answers) must be a prefix of the
//    conversation up to and including message i, which must be a prefix of the whole text; the
//    turn is what the second adds to the first, the template's end of turn included
//    ("Hi!<|im_end|>\n" for ChatML templates, " Hi!</s>" for Mistral's). A template for which
//    this does not hold rewrites earlier turns when later messages follow (Qwen3's drops the
//    thinking of assistant turns before the last user message; Mistral v0.3's moves the system
//    message into the last user turn); render_chat then throws a ConfigError naming the turn,
//    what differs, and the ways out.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fsdpp/data/chat_template.h"

namespace fsdpp::data {

struct ChatRenderOptions {
  // The tokenizer's special tokens (bos_token, eos_token, pad_token, unk_token, ...), as
  // tokenizer_config.json names them; templates read bos_token and eos_token.
  nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object();
  // Further template variables, apply_chat_template's **kwargs; they override special tokens.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  nlohmann::ordered_json tools;      // a list of tool schemas; null: none
  nlohmann::ordered_json documents;  // a list of documents; null: none
  // Add the assistant's header at the end (a prompt for generation). For training text: false.
  bool add_generation_prompt = false;
};

struct RenderedChat {
  enum class SpanSource {
    kGenerationTags,  // the template's {% generation %} blocks
    kPrefixes,        // the prefix renders (see above)
  };
  std::string text;
  // Byte ranges of `text` the loss goes on, in order.
  std::vector<TextSpan> assistant_spans;
  SpanSource source = SpanSource::kPrefixes;
};

// What apply_chat_template reads from a tokenizer's tokenizer_config.json:
// - its named special tokens (bos_token, eos_token, unk_token, sep_token, pad_token, cls_token,
//   mask_token; a token written as {"content": ...} gives its content), for
//   ChatRenderOptions::special_tokens;
// - its chat template: "chat_template" as a string, or as a list of {"name", "template"} of
//   which "tool_use" is taken when `with_tools` and there is one, else "default". Throws
//   ConfigError when there is none. (A model directory may instead hold chat_template.jinja.)
nlohmann::ordered_json special_tokens_from_config(const nlohmann::ordered_json& tokenizer_config);
std::string chat_template_from_config(const nlohmann::ordered_json& tokenizer_config, bool with_tools);

// The text alone (apply_chat_template(messages, tokenize=False)).
std::string render_conversation(const ChatTemplate& tmpl, const nlohmann::ordered_json& messages,
                                const ChatRenderOptions& options);

// The text and its assistant turns. Throws ConfigError when messages is not a list of objects,
// when the template fails, or when an assistant turn cannot be found.
RenderedChat render_chat(const ChatTemplate& tmpl, const nlohmann::ordered_json& messages,
                         const ChatRenderOptions& options);

// TRL's conversational prompt/completion: the prompt rendered with add_generation_prompt=true,
// then prompt + completion rendered whole; the first must be a prefix of the second, and the
// completion's span (the one assistant_spans entry) is what follows it, end of turn included.
// options.add_generation_prompt is ignored.
RenderedChat render_prompt_completion(const ChatTemplate& tmpl, const nlohmann::ordered_json& prompt,
                                      const nlohmann::ordered_json& completion, const ChatRenderOptions& options);

}  // namespace fsdpp::data
