#pragma once
// tokenizer.json's "post_processor", as what encode(text, add_special_tokens=True) puts around
// the text's ids: a template of fixed ids and the text ($A). Only the single-text template is
// read (fsdpp encodes one text at a time); type ids and offsets are not kept.

#include <cstdint>
#include <optional>
#include <vector>

#include "json_section.h"

namespace fsdpp::data {

struct TemplateItem {
  bool is_text = false;        // $A
  std::vector<int32_t> ids;    // the special tokens' ids otherwise
};
using SpecialTemplate = std::vector<TemplateItem>;

// The template `section` describes (null JSON: the text alone). ConfigError naming an unsupported
// type and listing the supported ones.
SpecialTemplate make_post_processor(const JsonSection& section);

// transformers' update_post_processor: "[BOS] $A [EOS]", each where given.
SpecialTemplate template_around(std::optional<int32_t> bos, std::optional<int32_t> eos);

// `text_ids` with the template around it.
std::vector<int32_t> apply_template(const SpecialTemplate& t, const std::vector<int32_t>& text_ids);

// The one id the template puts before (after) the text, when it puts exactly one there.
std::optional<int32_t> single_id_before(const SpecialTemplate& t);
std::optional<int32_t> single_id_after(const SpecialTemplate& t);

}  // namespace fsdpp::data
