// The schema engine's documents: loading one YAML document, reading its sections key by key
// (unknown keys with suggestions, keys given twice), applying overrides, writing it back. See
// fsdpp/config/schema.h.
#include <yaml-cpp/eventhandler.h>

#include <set>
#include <sstream>

#include "fsdpp/config/schema.h"
#include "fsdpp/common/error.h"

namespace fsdpp::config::schema {
namespace {

// Offset of the first byte that is not UTF-8 text (invalid UTF-8, or a control character other
// than tab, newline and carriage return), or npos.
size_t first_non_text_byte(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f) return i;
    const size_t len =
        c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (len == 0 || i + len > s.size()) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

// ---------------------------------------------------------------------------------------------
// Where a value came from, for messages: "(config.yaml, line 12)" or "(override 'a.b=c')".

struct Reader {
  std::string source;
  std::map<std::string, std::string> override_of;  // canonical key path -> the override's text

  std::string where(const std::string& path, const YAML::Node& key_node) const {
    for (std::string p = path;;) {
      if (auto it = override_of.find(p); it != override_of.end()) {
        return fmt::format(" (override {})", quote(it->second));
      }
      const auto dot = p.rfind('.');
      if (dot == std::string::npos) break;
      p.resize(dot);
    }
    if (key_node.IsDefined() && !key_node.Mark().is_null()) {
      return fmt::format(" ({}, line {})", source, key_node.Mark().line + 1);
    }
    return fmt::format(" ({})", source);
  }
};

// ---------------------------------------------------------------------------------------------
// Sections: keys read one by one, unknown ones with a suggestion.

// Every key's full path, for suggestions across sections.
void collect_paths(const Key& k, const std::string& path,
                   std::vector<std::pair<std::string, const Key*>>& out) {
  for (const auto& c : k.children) {
    const std::string p = join_path(path, c.name);
    out.emplace_back(p, &c);
    collect_paths(c, p, out);
  }
}

// "; did you mean 'learning_rate'?" or "."
std::string suggestion(const Schema& schema, const Key& sec, const std::string& name) {
  // The same name in another section: `seed:` under model: belongs in training:.
  std::vector<std::pair<std::string, const Key*>> all;
  collect_paths(schema.root, "", all);
  for (const auto& [path, key] : all) {
    if (key->matches(name)) return fmt::format("; did you mean '{}'?", path);
  }
  // Other frameworks' names for our keys (Hugging Face's LlamaConfig, nanoGPT, ...).
  if (auto it = schema.elsewhere.find(lower(name)); it != schema.elsewhere.end()) {
    return fmt::format("; did you mean '{}'?", it->second);
  }
  // A near spelling in this section.
  const Key* best = nullptr;
  size_t best_d = SIZE_MAX;
  for (const auto& c : sec.children) {
    for (const auto* spelling : {&c.name, &c.alias}) {
      if (spelling->empty()) continue;
      const size_t d = edit_distance(name, *spelling);
      if (d < best_d) best_d = d, best = &c;
    }
  }
  if (best && best_d <= std::max<size_t>(2, name.size() / 3)) {
    return fmt::format("; did you mean '{}'?", best->name);
  }
  // A part of a longer name: batch_size -> per_device_train_batch_size.
  if (name.size() >= 4) {
    for (const auto& c : sec.children) {
      if (c.name.find(lower(name)) != std::string::npos) {
        return fmt::format("; did you mean '{}'?", c.name);
      }
    }
  }
  return ".";
}

[[noreturn]] void unknown_key(const Schema& schema, const Key& sec, const std::string& sec_path,
                              const std::string& name, const std::string& where) {
  const std::string path = join_path(sec_path, name);
  FSDPP_THROW(ConfigError, "[config] unknown key '{}'{}{} Accepted keys in {}: {}", path, where,
              suggestion(schema, sec, name),
              sec_path.empty() ? std::string("the top level") : sec_path,
              join(sec.child_names(), ", "));
}

std::string describe_section(const Key& sec, const std::string& path) {
  return fmt::format("a map with the keys of {} ({})", path.empty() ? "the top level" : path,
                     join(sec.child_names(), ", "));
}

void read_section(const Schema& schema, const Key& sec, void* c, const YAML::Node& node,
                  const Loc& loc, const Reader& r) {
  if (node.IsNull()) return;  // `training:` with nothing under it
  if (!node.IsMap()) type_error(loc, node, describe_section(sec, loc.path));
  std::set<std::string> seen;
  for (const auto& entry : node) {
    const YAML::Node& key_node = entry.first;
    if (!key_node.IsScalar()) {
      FSDPP_THROW(ConfigError, "[config] a key in {} is not a name{}; expected {}",
                  loc.path.empty() ? std::string("the top level") : loc.path,
                  r.where(loc.path, key_node), describe_section(sec, loc.path));
    }
    const std::string& name = key_node.Scalar();
    const Key* child = sec.child(name);
    if (!child) {
      unknown_key(schema, sec, loc.path, name, r.where(join_path(loc.path, name), key_node));
    }
    const Loc child_loc{join_path(loc.path, child->name),
                        r.where(join_path(loc.path, child->name), key_node)};
    if (!seen.insert(child->name).second) {
      FSDPP_THROW(ConfigError, "[config] {} is given twice{}{}; expected it once",
                  child_loc.path, child_loc.where,
                  child->alias.empty() ? std::string()
                                       : fmt::format(" ('{}' and '{}' are the same key)",
                                                     child->name, child->alias));
    }
    if (child->is_section()) {
      read_section(schema, *child, c, entry.second, child_loc, r);
    } else {
      child->read(c, entry.second, child_loc);
    }
  }
}

void emit_section(const Key& sec, const void* c, YAML::Emitter& out) {
  out << YAML::BeginMap;
  for (const auto& child : sec.children) {
    out << YAML::Key << child.name << YAML::Value;
    if (child.is_section()) {
      emit_section(child, c, out);
    } else {
      child.emit(c, out);
    }
  }
  out << YAML::EndMap;
}

// ---------------------------------------------------------------------------------------------
// Documents and overrides.

// Where each document of a YAML stream starts; the rest of the events are not needed.
struct DocumentStarts : YAML::EventHandler {
  std::vector<size_t> pos;
  std::vector<YAML::Mark> marks;
  void OnDocumentStart(const YAML::Mark& m) override {
    pos.push_back(static_cast<size_t>(m.pos));
    marks.push_back(m);
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

YAML::Node load_document(const Schema& schema, const std::string& text,
                         const std::string& source) {
  const std::string& kTopLevel = schema.top_level;
  if (const size_t bad = first_non_text_byte(text); bad != std::string_view::npos) {
    FSDPP_THROW(ConfigError,
                "[config] {} is not a text file (byte 0x{:02x} at offset {} is a control character "
                "or not UTF-8); expected {}",
                source, static_cast<unsigned char>(text[bad]), bad, kTopLevel);
  }
  std::vector<YAML::Node> docs;
  try {
    // yaml-cpp 0.7's LoadAll loops forever on some malformed text (a line starting with ',' at
    // the top level: each "next document" starts where the last one did). Count the documents
    // ourselves, stopping when the parser makes no progress; the fuzzer found this.
    DocumentStarts starts;
    std::istringstream in(text);
    YAML::Parser parser(in);
    while (parser.HandleNextDocument(starts)) {
      const size_t n = starts.pos.size();
      if (n >= 2 && starts.pos[n - 1] <= starts.pos[n - 2]) {
        FSDPP_THROW(ConfigError,
                    "[config] {} is not valid YAML: the parser cannot go on at line {}, column {}; "
                    "expected {}",
                    source, starts.marks.back().line + 1, starts.marks.back().column + 1, kTopLevel);
      }
    }
    if (!starts.pos.empty()) docs.push_back(YAML::Load(text));
    for (size_t i = 1; i < starts.pos.size(); ++i) docs.emplace_back();
  } catch (const YAML::Exception& e) {
    FSDPP_THROW(ConfigError, "[config] {} is not valid YAML: {} (line {}, column {}); expected {}",
                source, e.msg, e.mark.line + 1, e.mark.column + 1, kTopLevel);
  }
  if (docs.size() > 1) {
    FSDPP_THROW(ConfigError, "[config] {} holds {} YAML documents; expected one, {}", source,
                docs.size(), kTopLevel);
  }
  if (docs.empty() || docs[0].IsNull()) {
    FSDPP_THROW(ConfigError, "[config] {} is empty; expected {}", source, kTopLevel);
  }
  const YAML::Node& doc = docs[0];
  if (!doc.IsMap()) {
    FSDPP_THROW(ConfigError, "[config] {}: the top level is {}; expected {}", source,
                doc.IsScalar() ? "a scalar " + quote(doc.Scalar()) : std::string("a list"),
                kTopLevel);
  }
  return doc;
}

// Sets `value` at the key `path` (canonical names) of `doc`, creating maps on the way and
// dropping any other spelling of the same key.
void set_in_tree(YAML::Node doc, const std::vector<const Key*>& keys, const YAML::Node& value,
                 const std::string& source) {
  YAML::Node cur;
  cur.reset(doc);
  std::string path;
  for (size_t i = 0; i < keys.size(); ++i) {
    const Key& k = *keys[i];
    path = join_path(path, k.name);
    if (!k.alias.empty()) cur.remove(k.alias);
    if (i + 1 == keys.size()) {
      cur[k.name] = value;
      return;
    }
    YAML::Node next = cur[k.name];
    if (!next.IsDefined() || next.IsNull()) {
      cur[k.name] = YAML::Node(YAML::NodeType::Map);
    } else if (!next.IsMap()) {  // the file's own error, before the override's
      const auto line = next.Mark().is_null() ? std::string()
                                              : fmt::format(", line {}", next.Mark().line + 1);
      type_error(Loc{path, fmt::format(" ({}{})", source, line)}, next,
                 describe_section(k, path));
    }
    YAML::Node child;
    child.reset(cur[k.name]);
    cur.reset(child);
  }
}

// Applies one override's value at `keys`; a map value on a section sets each key under it.
void apply_value(const Schema& schema, YAML::Node doc, std::vector<const Key*> keys,
                 const YAML::Node& value, const std::string& text, Reader& r) {
  std::string path;
  for (const Key* k : keys) path = join_path(path, k->name);
  const Key& target = *keys.back();
  if (target.is_section()) {
    if (!value.IsMap()) {
      type_error(Loc{path, fmt::format(" (override {})", quote(text))}, value,
                 describe_section(target, path));
    }
    for (const auto& entry : value) {
      const std::string name = entry.first.IsScalar() ? entry.first.Scalar() : std::string("?");
      const Key* child = target.child(name);
      if (!child) {
        unknown_key(schema, target, path, name, fmt::format(" in override {}", quote(text)));
      }
      auto child_keys = keys;
      child_keys.push_back(child);
      apply_value(schema, doc, child_keys, entry.second, text, r);
    }
    return;
  }
  set_in_tree(doc, keys, value, r.source);
  r.override_of[path] = text;
}

void apply_override(const Schema& schema, YAML::Node doc, const std::string& text, Reader& r) {
  const auto eq = text.find('=');
  if (eq == std::string::npos) {
    FSDPP_THROW(ConfigError,
                "[config] override {} has no '='; expected key.path=value, e.g. "
                "training.learning_rate=1e-3",
                quote(text));
  }
  std::string key_path = trim(std::string_view(text).substr(0, eq));
  const std::string value_text = trim(std::string_view(text).substr(eq + 1));
  // A config group's prefix before a top-level section ("distillation.training.fsdp"), as Hydra
  // writes overrides, addresses that section.
  for (const auto& group : schema.override_groups) {
    const std::string prefix = group + ".";
    if (key_path.rfind(prefix, 0) != 0) continue;
    const std::string rest = key_path.substr(prefix.size());
    const Key* top = schema.root.child(rest.substr(0, rest.find('.')));
    if (top && top->is_section() && top->name != group) key_path = rest;
  }
  std::vector<const Key*> keys;
  const Key* sec = &schema.root;
  std::string path;
  std::string_view rest = key_path;
  while (true) {
    const auto dot = rest.find('.');
    const std::string name(rest.substr(0, dot));
    if (name.empty()) {
      FSDPP_THROW(ConfigError,
                  "[config] override {} has an empty key name in '{}'; expected key.path=value, "
                  "e.g. training.learning_rate=1e-3",
                  quote(text), key_path);
    }
    if (!sec->is_section()) {
      FSDPP_THROW(ConfigError,
                  "[config] override {}: {} is a value, not a section, so it has no key '{}'",
                  quote(text), path, name);
    }
    const Key* k = sec->child(name);
    if (!k) unknown_key(schema, *sec, path, name, fmt::format(" in override {}", quote(text)));
    keys.push_back(k);
    path = join_path(path, k->name);
    sec = k;
    if (dot == std::string_view::npos) break;
    rest.remove_prefix(dot + 1);
  }
  YAML::Node value;  // an empty value is the empty string (or null)
  if (keys.back()->literal && !value_text.empty() && value_text[0] != '"' &&
      value_text[0] != '\'') {
    value = YAML::Node(value_text);
  } else if (!value_text.empty()) {
    try {
      value = YAML::Load(value_text);
    } catch (const YAML::Exception& e) {
      FSDPP_THROW(ConfigError, "[config] override {}: the value is not valid YAML ({}); expected "
                  "a scalar such as 4, 1e-3, true, a name, or a list such as [a, b]",
                  quote(text), e.msg);
    }
  }
  apply_value(schema, doc, keys, value, text, r);
}

}  // namespace

void read_document(const Schema& schema, void* config, const std::string& text,
                   const std::vector<std::string>& overrides, const std::string& source) {
  Reader r;
  r.source = source;
  YAML::Node doc = load_document(schema, text, source);
  for (const auto& o : overrides) apply_override(schema, doc, o, r);
  read_section(schema, schema.root, config, doc, Loc{"", ""}, r);
}

std::string write_document(const Schema& schema, const void* config, const std::string& comment) {
  YAML::Emitter out;
  out << YAML::Comment(comment);
  emit_section(schema.root, config, out);
  return std::string(out.c_str()) + "\n";
}

}  // namespace fsdpp::config::schema
