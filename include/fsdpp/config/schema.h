#pragma once
// The config layer's schema engine, generic over the struct it reads (TrainConfig's keys are
// train's config_keys.cpp): a tree of sections and keys, each key knowing how to read its value
// strictly from YAML and how to write it back. It reads one YAML document plus `key.path=value` overrides into a config struct; every
// error is a ConfigError "[config] ..." naming the key's full path, the value found, where it came
// from ("(config.yaml, line 12)" or "(override 'a.b=c')") and what is accepted, with "did you
// mean" suggestions for unknown keys and names.
//
//   const Schema s{section("", {section("model", {leaf<Cfg>("dim", [](auto& c) -> auto& {
//                                                   return c.model.dim; })})}),
//                  /*elsewhere=*/{{"hidden_size", "model.dim"}}, "a map with model:"};
//   Cfg cfg;
//   read_document(s, &cfg, text, overrides, "config.yaml");
//   std::string yaml = write_document(s, &cfg, "the effective configuration");

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "fsdpp/config/choice.h"

namespace fsdpp::config::schema {

// Small string helpers, shared with the key table's checks.
std::string lower(std::string s);
std::string trim(std::string_view s);
std::string join(const std::vector<std::string>& items, std::string_view sep);
std::string join_path(const std::string& parent, const std::string& key);
// A value as it appears in a message: quoted, shortened, control bytes escaped.
std::string quote(std::string_view s);
// Levenshtein distance, ignoring case: how near a misspelt name is to a known one.
size_t edit_distance(std::string_view a, std::string_view b);

// One key being read: its full path and where it came from (" (test.yaml, line 4)").
struct Loc {
  std::string path;
  std::string where;
};

// "[config] training.seed='x' (test.yaml, line 4): expected an integer >= 0".
[[noreturn]] void type_error(const Loc& loc, const YAML::Node& value, std::string_view expected);

// Strict reads: an integer key takes an integer (or an exactly integral float such as 1e8), a
// bool key true or false (not YAML 1.1's yes/no), a string key a scalar (null: ""), a list of
// names a list or one comma-separated string, a list of integers also ranges such as 10-12.
template <class T>
T read_value(const YAML::Node& value, const Loc& loc);
template <> int64_t read_value<int64_t>(const YAML::Node&, const Loc&);
template <> uint64_t read_value<uint64_t>(const YAML::Node&, const Loc&);
template <> double read_value<double>(const YAML::Node&, const Loc&);
template <> bool read_value<bool>(const YAML::Node&, const Loc&);
template <> std::string read_value<std::string>(const YAML::Node&, const Loc&);
template <>
std::vector<std::string> read_value<std::vector<std::string>>(const YAML::Node&, const Loc&);
template <> std::vector<int64_t> read_value<std::vector<int64_t>>(const YAML::Node&, const Loc&);

// "[config] path='FOO' (where): expected one of A, B, C[; did you mean 'B'?]". `found` is the
// name as normalised for the table.
[[noreturn]] void choice_error(const Loc& loc, const std::string& found,
                               const std::vector<std::string>& accepted);

template <class E>
Choice<E> read_choice(const YAML::Node& value, const Loc& loc) {
  const std::string name = Choice<E>::normalize(read_value<std::string>(value, loc));
  if (auto v = Choice<E>::find(name)) return *v;
  if constexpr (kHasOwnLookup<E>) FSDPP_THROW(ConfigError, "{}", ChoiceNames<E>::unknown(loc.path, name));
  std::vector<std::string> accepted;
  for (const auto& entry : ChoiceNames<E>::kNames) accepted.emplace_back(entry.second);
  if constexpr (kHasNullChoice<E>) accepted.emplace_back("null");
  choice_error(loc, name, accepted);
}

// Writing values back, so that reading the text gives the same value (doubles bit-exact).
void emit_value(YAML::Emitter& out, int64_t v);
void emit_value(YAML::Emitter& out, uint64_t v);
void emit_value(YAML::Emitter& out, double v);
void emit_value(YAML::Emitter& out, bool v);
void emit_value(YAML::Emitter& out, const std::string& v);
void emit_value(YAML::Emitter& out, const std::vector<std::string>& v);
void emit_value(YAML::Emitter& out, const std::vector<int64_t>& v);
template <class E>
void emit_value(YAML::Emitter& out, Choice<E> v) {
  emit_value(out, std::string(v.name()));
}

// A section (with children) or a key (with read and emit). The config is passed type-erased;
// leaf<C> and key<C> below cast it back to the C the schema was made for.
struct Key {
  std::string name;
  std::string alias;  // another accepted spelling (fsdp_config keys without "fsdp_"), or empty
  std::function<void(void* config, const YAML::Node& value, const Loc& loc)> read;
  std::function<void(const void* config, YAML::Emitter& out)> emit;
  std::vector<Key> children;  // a section's keys
  // Strings and names: an override's value is taken literally unless it starts with a quote,
  // so that data.path=/tmp/a: b or training.sample_prompt=Once upon a time need no YAML quoting.
  bool literal = false;

  bool is_section() const { return !children.empty(); }
  bool matches(const std::string& n) const { return n == name || (!alias.empty() && n == alias); }
  const Key* child(const std::string& n) const;
  std::vector<std::string> child_names() const;
};

template <class T>
inline constexpr bool kIsChoice = false;
template <class E>
inline constexpr bool kIsChoice<Choice<E>> = true;

// A key read with read_value (or read_choice) into the field `acc` picks:
// leaf<Cfg>("dim", [](auto& c) -> auto& { return c.model.dim; }).
template <class C, class Acc>
Key leaf(std::string name, Acc acc, std::string alias = {}) {
  using T = std::remove_cvref_t<decltype(acc(std::declval<C&>()))>;
  Key k;
  k.name = std::move(name);
  k.alias = std::move(alias);
  k.read = [acc](void* c, const YAML::Node& value, const Loc& loc) {
    if constexpr (kIsChoice<T>) {
      acc(*static_cast<C*>(c)) = read_choice<typename T::Enum>(value, loc);
    } else {
      acc(*static_cast<C*>(c)) = read_value<T>(value, loc);
    }
  };
  k.emit = [acc](const void* c, YAML::Emitter& out) {
    emit_value(out, acc(*static_cast<const C*>(c)));
  };
  k.literal = std::is_same_v<T, std::string> || kIsChoice<T>;
  return k;
}

// A key with its own reading and writing (one YAML value setting several fields, say).
template <class C>
Key key(std::string name, std::function<void(C&, const YAML::Node&, const Loc&)> read,
        std::function<void(const C&, YAML::Emitter&)> emit) {
  Key k;
  k.name = std::move(name);
  k.read = [read = std::move(read)](void* c, const YAML::Node& value, const Loc& loc) {
    read(*static_cast<C*>(c), value, loc);
  };
  k.emit = [emit = std::move(emit)](const void* c, YAML::Emitter& out) {
    emit(*static_cast<const C*>(c), out);
  };
  return k;
}

Key section(std::string name, std::vector<Key> children);

struct Schema {
  Key root;  // a section named ""
  // Other frameworks' names for keys (Hugging Face's hidden_size, nanoGPT's n_embd, ...) and the
  // full path of ours that unknown-key errors suggest instead.
  std::map<std::string, std::string> elsewhere;
  std::string top_level;  // what a document must be, for messages ("a YAML map with ...")
  // Hydra config groups that other tools' overrides start with: "distillation.training.fsdp=x"
  // (the group `distillation`, whose file holds a `training:` section) is read as
  // "training.fsdp=x" when the name after the group is a top-level section.
  std::vector<std::string> override_groups;
};

// Parses `text` (one YAML document, a map), applies `overrides` in order ("a.b=value", the value
// read as a YAML scalar, list or map, literally for literal keys; see override_groups), then
// reads every key into
// `config`, which must be the schema's C. `source` names the text in messages.
void read_document(const Schema& schema, void* config, const std::string& text,
                   const std::vector<std::string>& overrides, const std::string& source);

// Every key of `config`, sections as maps in schema order, after a comment line.
std::string write_document(const Schema& schema, const void* config, const std::string& comment);

}  // namespace fsdpp::config::schema
