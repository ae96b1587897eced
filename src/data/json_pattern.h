#pragma once
// A tokenizer.json pattern, {"String": "▁"} (matched literally) or {"Regex": "\\s+"}, compiled
// (Split pre-tokenizers, Replace normalizers and decoders).

#include "json_section.h"
#include "pcre2_regex.h"

namespace fsdpp::data {

inline Pcre2Regex read_pattern(const JsonSection& section, const char* key = "pattern") {
  if (!section.json().contains(key) || !section.json()[key].is_object()) {
    section.fail("has no \"{}\" object; expected {{\"String\": ...}} or {{\"Regex\": ...}}", key);
  }
  const JsonSection p = section.child(section.json()[key], std::string(".") + key);
  const std::string where = section.file() + ": " + p.path();
  if (p.has("Regex")) return Pcre2Regex(p.string("Regex"), where);
  if (p.has("String")) return Pcre2Regex::literal(p.string("String"), where);
  p.fail("is {}; expected {{\"String\": ...}} or {{\"Regex\": ...}}", p.json().dump());
}

}  // namespace fsdpp::data
