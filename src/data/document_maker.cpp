// Examples into documents. See include/fsdpp/data/document_maker.h.
#include "fsdpp/data/document_maker.h"

#include <xxhash.h>

#include <algorithm>

#include <fmt/format.h>

#include "fsdpp/common/error.h"

namespace fsdpp::data {
namespace {

// A maker's rules change what a preparation holds: part of every prepared spec, so a directory
// made by other rules is prepared again.
constexpr int kRulesVersion = 1;

}  // namespace

DocumentMaker::DocumentMaker(const Tokenizer& tokenizer, DocumentMakerOptions options)
    : tok_(tokenizer), options_(std::move(options)), eos_(tokenizer.special_token_ids().eos) {
  if (auto source = tokenizer.chat_template()) template_ = ChatTemplate::parse(*source);
  const auto ids = tokenizer.special_token_ids();
  auto name = [&](const char* key, std::optional<int32_t> id) {
    if (!id) return;
    if (auto token = tokenizer.id_to_token(*id)) render_.special_tokens[key] = *token;
  };
  name("bos_token", ids.bos);
  name("eos_token", ids.eos);
  name("pad_token", ids.pad);
  name("unk_token", ids.unk);
  render_.extra = options_.template_kwargs;
}

std::string DocumentMaker::describe() const {
  std::string out = fmt::format("rules={} completion_only_loss={} assistant_only_loss={}",
                                kRulesVersion, options_.completion_only_loss,
                                options_.assistant_only_loss);
  if (template_) {
    const auto& src = template_->source();
    out += fmt::format(" chat_template={:016x}", XXH3_64bits(src.data(), src.size()));
  }
  if (!options_.template_kwargs.empty()) out += " template_kwargs=" + options_.template_kwargs.dump();
  return out;
}

PreparedDocument DocumentMaker::make(const Example& e) const {
  switch (e.kind) {
    case ExampleKind::TEXT:
      return text(e);
    case ExampleKind::PROMPT_COMPLETION:
      return prompt_completion(e);
    case ExampleKind::MESSAGES:
    case ExampleKind::CONVERSATIONAL_PROMPT_COMPLETION:
      return conversation(e);
  }
  FSDPP_THROW(Error, "[data] {}: an example of unknown kind", e.origin.str());
}

PreparedDocument DocumentMaker::text(const Example& e) const {
  PreparedDocument d;
  d.ids = tok_.encode_with_special_tokens(e.text);
  if (eos_ && (d.ids.empty() || d.ids.back() != *eos_)) d.ids.push_back(*eos_);
  return d;
}

PreparedDocument DocumentMaker::prompt_completion(const Example& e) const {
  PreparedDocument d;
  d.ids = tok_.encode_with_special_tokens(e.prompt + e.completion);
  if (eos_ && (d.ids.empty() || d.ids.back() != *eos_)) d.ids.push_back(*eos_);
  if (!options_.completion_only_loss) return d;
  // TRL's completion_mask: as many tokens as the prompt alone encodes to are the prompt's.
  const size_t prompt = std::min(tok_.encode_with_special_tokens(e.prompt).size(), d.ids.size());
  d.mask.assign(d.ids.size(), 1);
  std::fill(d.mask.begin(), d.mask.begin() + static_cast<std::ptrdiff_t>(prompt), uint8_t{0});
  if (prompt == d.ids.size()) {
    d = PreparedDocument{};
    d.skipped = "no completion tokens";
  }
  return d;
}

PreparedDocument DocumentMaker::conversation(const Example& e) const {
  FSDPP_CHECK_AS(ConfigError, template_.has_value(),
                 "[data] {}: a conversation ({}) needs the tokenizer's chat template, and "
                 "tokenizer '{}' has none (tokenizer_config.json's \"chat_template\"); use the "
                 "model's own tokenizer directory, or records with a text field",
                 e.origin.str(), example_kind_name(e.kind), tok_.name());
  RenderedChat chat;
  bool mask;
  if (e.kind == ExampleKind::MESSAGES) {
    mask = options_.assistant_only_loss;
    if (mask) {
      chat = render_chat(*template_, e.messages, render_);
    } else {
      chat.text = render_conversation(*template_, e.messages, render_);
    }
  } else {
    mask = options_.completion_only_loss || options_.assistant_only_loss;
    chat = render_prompt_completion(*template_, e.messages, e.completion_messages, render_);
  }
  if (mask && chat.assistant_spans.empty()) {
    PreparedDocument d;
    d.skipped = "no assistant turn";
    return d;
  }
  return encode_spans(chat.text, chat.assistant_spans, mask, e.origin);
}

PreparedDocument DocumentMaker::encode_spans(const std::string& text,
                                             const std::vector<TextSpan>& spans, bool mask_spans,
                                             const RecordOrigin& origin) const {
  PreparedDocument d;
  d.ids = tok_.encode(text);
  if (!mask_spans) return d;
  std::vector<size_t> cuts;  // the spans' ends inside the text, sorted
  for (const auto& s : spans) {
    for (size_t c : {s.begin, s.end}) {
      if (c > 0 && c < text.size()) cuts.push_back(c);
    }
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  // The token index at each cut: from the pieces between cuts, encoded apart, when together they
  // are the whole text's ids; else from encoding the text up to each cut.
  std::vector<size_t> at(cuts.size());
  std::vector<int32_t> joined;
  size_t from = 0;
  for (size_t i = 0; i <= cuts.size(); ++i) {
    const size_t to = i < cuts.size() ? cuts[i] : text.size();
    const auto piece = tok_.encode(std::string_view(text).substr(from, to - from));
    joined.insert(joined.end(), piece.begin(), piece.end());
    if (i < cuts.size()) at[i] = joined.size();
    from = to;
  }
  if (joined != d.ids) {
    for (size_t i = 0; i < cuts.size(); ++i) {
      const auto head = tok_.encode(std::string_view(text).substr(0, cuts[i]));
      FSDPP_CHECK_AS(ConfigError,
                     head.size() <= d.ids.size() && std::equal(head.begin(), head.end(), d.ids.begin()),
                     "[data] {}: an assistant turn's edge at byte {} of the rendered conversation "
                     "falls inside a token (the text up to it does not encode to the start of the "
                     "whole text's ids: ...{:?}|{:?}...), so the loss mask cannot be given exact "
                     "tokens; the chat template should end turns at special tokens or line ends",
                     origin.str(), cuts[i], text.substr(cuts[i] - std::min<size_t>(cuts[i], 20), std::min<size_t>(cuts[i], 20)),
                     text.substr(cuts[i], 20));
      at[i] = head.size();
    }
  }
  auto token_at = [&](size_t byte) {
    if (byte == 0) return size_t{0};
    if (byte >= text.size()) return d.ids.size();
    return at[static_cast<size_t>(std::lower_bound(cuts.begin(), cuts.end(), byte) - cuts.begin())];
  };
  d.mask.assign(d.ids.size(), 0);
  for (const auto& s : spans) {
    std::fill(d.mask.begin() + static_cast<std::ptrdiff_t>(token_at(s.begin)),
              d.mask.begin() + static_cast<std::ptrdiff_t>(token_at(s.end)), uint8_t{1});
  }
  return d;
}

}  // namespace fsdpp::data
