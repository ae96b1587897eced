#pragma once
// One example (example.h: a text, a prompt and its completion, a conversation) into the tokens a
// model trains on and the loss mask TRL's SFT keys ask for, as TRL's SFTTrainer tokenizes them:
//
//   TEXT               encode_with_special_tokens(text) (BOS where the tokenizer adds one), then
//                      EOS unless it is already last; every token counts.
//   PROMPT_COMPLETION  encode_with_special_tokens(prompt + completion) + EOS; with
//                      completion_only_loss the first len(encode_with_special_tokens(prompt))
//                      tokens carry no loss (TRL's completion_mask).
//   MESSAGES           the conversation rendered by the tokenizer's chat template and encoded
//                      without special tokens (apply_chat_template(tokenize=True)); with
//                      assistant_only_loss only the assistant turns' tokens count (render_chat
//                      finds them: {% generation %} blocks, else by prefixes).
//   CONVERSATIONAL_PROMPT_COMPLETION
//                      prompt + completion rendered whole; with completion_only_loss only the
//                      completion's turn counts (render_prompt_completion).
// Conversations get no EOS appended: the template ends each turn itself, as in TRL.
//
// A turn's byte span becomes tokens by encoding the text cut at the span's ends: the pieces'
// ids, joined, must be the whole text's ids (a template puts its turns' edges at special tokens
// or line ends, where tokenization starts afresh); where they are not, each end is checked by
// encoding the text up to it. A span whose ends fall inside a token cannot be given exact tokens
// and is a ConfigError naming the record. make() is const and may run on many threads at once.
//
//   data::DocumentMaker maker(*tokenizer, {.assistant_only_loss = true});
//   data::PreparedDocument doc = maker.make(example);   // ids, mask (empty: all count), skipped

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fsdpp/data/chat_render.h"
#include "fsdpp/data/chat_template.h"
#include "fsdpp/data/example.h"
#include "fsdpp/data/prepare.h"
#include "fsdpp/data/tokenizer.h"

namespace fsdpp::data {

struct DocumentMakerOptions {
  bool completion_only_loss = true;  // prompt/completion examples: loss on the completion only
  bool assistant_only_loss = false;  // conversations: loss on the assistant turns only
  // Template variables apply_chat_template would get as keyword arguments (enable_thinking, ...).
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();
};

class DocumentMaker {
 public:
  // `tokenizer` must outlive the maker. Conversations need the tokenizer's chat template:
  // without one, make() refuses them naming the tokenizer.
  DocumentMaker(const Tokenizer& tokenizer, DocumentMakerOptions options);

  PreparedDocument make(const Example& example) const;

  // What decides the documents besides the tokenizer's ids (options, the template's digest), as
  // one line for the prepared directory's spec and the log.
  std::string describe() const;

 private:
  PreparedDocument text(const Example& e) const;
  PreparedDocument prompt_completion(const Example& e) const;
  PreparedDocument conversation(const Example& e) const;
  // The ids of `text` without special tokens and the mask of the bytes in `spans` (or of every
  // token when mask_spans is false).
  PreparedDocument encode_spans(const std::string& text, const std::vector<TextSpan>& spans,
                                bool mask_spans, const RecordOrigin& origin) const;

  const Tokenizer& tok_;
  DocumentMakerOptions options_;
  std::optional<ChatTemplate> template_;
  ChatRenderOptions render_;
  std::optional<int32_t> eos_;
};

}  // namespace fsdpp::data
