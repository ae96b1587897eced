// tokenizer.json post-processors. See post_processors.h.
#include "post_processors.h"

#include <climits>
#include <string>

namespace fsdpp::data {
namespace {

constexpr const char* kSupported =
    "TemplateProcessing, RobertaProcessing, BertProcessing, ByteLevel, Sequence";

SpecialTemplate text_alone() { return {TemplateItem{true, {}}}; }

// `outer` with every $A replaced by `inner` (a Sequence: the later processor wraps the earlier).
SpecialTemplate compose(const SpecialTemplate& outer, const SpecialTemplate& inner) {
  SpecialTemplate out;
  for (const auto& item : outer) {
    if (item.is_text) {
      out.insert(out.end(), inner.begin(), inner.end());
    } else {
      out.push_back(item);
    }
  }
  return out;
}

SpecialTemplate template_processing(const JsonSection& s) {
  const nlohmann::json empty = nlohmann::json::object();
  const nlohmann::json& specials =
      s.json().contains("special_tokens") && s.json()["special_tokens"].is_object()
          ? s.json()["special_tokens"] : empty;
  const auto& single = s.array("single");
  SpecialTemplate out;
  for (size_t i = 0; i < single.size(); ++i) {
    const auto& piece = single[i];
    if (piece.is_object() && piece.contains("Sequence")) {
      const JsonSection seq = s.child(piece["Sequence"], fmt::format(".single[{}].Sequence", i));
      if (const std::string id = seq.string("id"); id != "A") {
        seq.fail("is sequence '{}'; expected A (the single template has one text)", id);
      }
      out.push_back({true, {}});
    } else if (piece.is_object() && piece.contains("SpecialToken")) {
      const JsonSection tok = s.child(piece["SpecialToken"], fmt::format(".single[{}].SpecialToken", i));
      const std::string name = tok.string("id");
      if (!specials.contains(name)) s.fail("has no special_tokens entry for '{}'", name);
      const JsonSection entry = s.child(specials[name], fmt::format(".special_tokens['{}']", name));
      TemplateItem item;
      for (const auto& id : entry.array("ids")) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
          entry.fail("has id {}; expected a non-negative integer", id.dump());
        }
        item.ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
      }
      out.push_back(std::move(item));
    } else {
      s.fail("single[{}] is {}; expected {{\"Sequence\": ...}} or {{\"SpecialToken\": ...}}", i,
             piece.dump());
    }
  }
  return out;
}

// RobertaProcessing / BertProcessing: "cls": [token, id] $A "sep": [token, id].
SpecialTemplate cls_sep(const JsonSection& s) {
  auto id_of = [&](const char* key) {
    const auto& v = s.json().contains(key) ? s.json()[key] : nlohmann::json();
    if (!v.is_array() || v.size() != 2 || !v[1].is_number_integer() || v[1].get<int64_t>() < 0) {
      s.fail("\"{}\" is {}; expected [token, id]", key, v.dump());
    }
    return static_cast<int32_t>(v[1].get<int64_t>());
  };
  return {TemplateItem{false, {id_of("cls")}}, TemplateItem{true, {}}, TemplateItem{false, {id_of("sep")}}};
}

}  // namespace

SpecialTemplate make_post_processor(const JsonSection& s) {
  const std::string type = s.type();
  if (type == "TemplateProcessing") return template_processing(s);
  if (type == "RobertaProcessing" || type == "BertProcessing") return cls_sep(s);
  if (type == "ByteLevel") return text_alone();  // offsets only
  if (type == "Sequence") {
    SpecialTemplate t = text_alone();
    const auto& list = s.array("processors");
    for (size_t i = 0; i < list.size(); ++i) {
      t = compose(make_post_processor(s.child(list[i], fmt::format(".processors[{}]", i))), t);
    }
    return t;
  }
  s.fail("'{}' is not supported; supported: {}", type, kSupported);
}

SpecialTemplate template_around(std::optional<int32_t> bos, std::optional<int32_t> eos) {
  SpecialTemplate t;
  if (bos) t.push_back({false, {*bos}});
  t.push_back({true, {}});
  if (eos) t.push_back({false, {*eos}});
  return t;
}

std::vector<int32_t> apply_template(const SpecialTemplate& t, const std::vector<int32_t>& text_ids) {
  std::vector<int32_t> out;
  out.reserve(text_ids.size() + 4);
  for (const auto& item : t) {
    const auto& ids = item.is_text ? text_ids : item.ids;
    out.insert(out.end(), ids.begin(), ids.end());
  }
  return out;
}

std::optional<int32_t> single_id_before(const SpecialTemplate& t) {
  std::vector<int32_t> before;
  for (const auto& item : t) {
    if (item.is_text) break;
    before.insert(before.end(), item.ids.begin(), item.ids.end());
  }
  if (before.size() != 1) return std::nullopt;
  return before[0];
}

std::optional<int32_t> single_id_after(const SpecialTemplate& t) {
  std::vector<int32_t> after;
  for (auto it = t.rbegin(); it != t.rend() && !it->is_text; ++it) {
    after.insert(after.begin(), it->ids.begin(), it->ids.end());
  }
  if (after.size() != 1) return std::nullopt;
  return after[0];
}

}  // namespace fsdpp::data
