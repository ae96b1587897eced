#include "fsdpp/train/config.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string_view>
#include <type_traits>
#include <utility>

#include "fsdpp/common/error.h"

namespace fsdpp::train {

namespace {

// ---------------------------------------------------------------------------------------------
// Small string helpers.

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(first, last - first + 1));
}

std::string join_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += sep;
    out += items[i];
  }
  return out;
}

// A value as it appears in a message: quoted, shortened, control bytes escaped.
std::string quote(std::string_view s) {
  std::string out = "'";
  size_t n = 0;
  for (char c : s) {
    if (++n > 60) {
      out += "...";
      break;
    }
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += c;
    }
  }
  return out + "'";
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      const bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                        std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (same ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

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

// One key being read: its full path and where it came from.
struct Loc {
  std::string path;
  std::string where;
};

// "training.learning_rate='abc'" or "training.learning_rate is a map".
std::string found(const Loc& loc, const YAML::Node& value) {
  switch (value.Type()) {
    case YAML::NodeType::Scalar: return fmt::format("{}={}", loc.path, quote(value.Scalar()));
    case YAML::NodeType::Sequence: return fmt::format("{} is a list", loc.path);
    case YAML::NodeType::Map: return fmt::format("{} is a map", loc.path);
    default: return fmt::format("{} is empty", loc.path);
  }
}

[[noreturn]] void type_error(const Loc& loc, const YAML::Node& value, std::string_view expected) {
  FSDPP_THROW(ConfigError, "[config] {}{}: expected {}", found(loc, value), loc.where, expected);
}

// ---------------------------------------------------------------------------------------------
// Scalars, strictly: an integer key takes an integer, a bool key true or false.

std::string_view strip_plus(std::string_view s) {
  return (s.size() > 1 && s[0] == '+') ? s.substr(1) : s;
}

bool parse_double(std::string_view s, double& out) {
  s = strip_plus(s);
  const std::string l = lower(std::string(s));
  if (l == ".inf" || l == "-.inf" || l == ".nan") {
    out = l == ".nan" ? NAN : (l[0] == '-' ? -INFINITY : INFINITY);
    return true;
  }
  if (s.empty()) return false;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// Integers; an exactly integral float such as 1e8 is accepted too.
bool parse_int(std::string_view s, int64_t& out) {
  s = strip_plus(s);
  if (s.empty()) return false;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec == std::errc() && ptr == s.data() + s.size()) return true;
  double d = 0;
  if (!parse_double(s, d) || !std::isfinite(d) || d != std::trunc(d) || std::fabs(d) > 9.0e15) {
    return false;
  }
  out = static_cast<int64_t>(d);
  return true;
}

const YAML::Node& scalar(const Loc& loc, const YAML::Node& value, std::string_view expected) {
  if (!value.IsScalar()) type_error(loc, value, expected);
  return value;
}

template <class T>
T read_value(const YAML::Node& value, const Loc& loc);

// A number too large for its type: "expected an integer" would send the user looking for a typo.
template <class T>
bool out_of_range(std::string_view s) {
  s = strip_plus(s);
  T v{};
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc::result_out_of_range && ptr == s.data() + s.size();
}

template <>
int64_t read_value<int64_t>(const YAML::Node& value, const Loc& loc) {
  int64_t v = 0;
  constexpr std::string_view kExpected = "an integer";
  if (!parse_int(scalar(loc, value, kExpected).Scalar(), v)) {
    type_error(loc, value, out_of_range<int64_t>(value.Scalar())
                               ? "an integer that fits in 64 bits" : kExpected);
  }
  return v;
}

template <>
uint64_t read_value<uint64_t>(const YAML::Node& value, const Loc& loc) {
  constexpr std::string_view kExpected = "an integer >= 0";
  std::string_view s = strip_plus(scalar(loc, value, kExpected).Scalar());
  uint64_t v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec == std::errc() && ptr == s.data() + s.size() && !s.empty()) return v;
  int64_t i = 0;
  if (parse_int(s, i) && i >= 0) return static_cast<uint64_t>(i);
  type_error(loc, value, kExpected);
}

template <>
double read_value<double>(const YAML::Node& value, const Loc& loc) {
  double v = 0;
  if (!parse_double(scalar(loc, value, "a number").Scalar(), v)) {
    type_error(loc, value, out_of_range<double>(value.Scalar())
                               ? "a number within a double's range (|x| < 1.8e308)" : "a number");
  }
  return v;
}

template <>
bool read_value<bool>(const YAML::Node& value, const Loc& loc) {
  constexpr std::string_view kExpected = "true or false";
  const std::string& s = scalar(loc, value, kExpected).Scalar();
  // YAML 1.2's booleans; YAML 1.1's yes/no/on/off are too easy to write by accident.
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  type_error(loc, value, kExpected);
}

template <>
std::string read_value<std::string>(const YAML::Node& value, const Loc& loc) {
  if (value.IsNull()) return {};  // `key:` or `key: null` is the empty string
  return scalar(loc, value, "a string").Scalar();
}

// A list, or one string of comma-separated items as Hugging Face accepts.
template <>
std::vector<std::string> read_value<std::vector<std::string>>(const YAML::Node& value,
                                                              const Loc& loc) {
  constexpr std::string_view kExpected = "a list of names or a comma-separated string";
  std::vector<std::string> out;
  if (value.IsNull()) return out;
  if (value.IsScalar()) {
    std::string_view s = value.Scalar();
    while (!s.empty()) {
      const auto comma = s.find(',');
      std::string item = trim(s.substr(0, comma));
      if (!item.empty()) out.push_back(std::move(item));
      if (comma == std::string_view::npos) break;
      s.remove_prefix(comma + 1);
    }
    return out;
  }
  if (!value.IsSequence()) type_error(loc, value, kExpected);
  for (size_t i = 0; i < value.size(); ++i) {
    const Loc item_loc{fmt::format("{}[{}]", loc.path, i), loc.where};
    if (!value[i].IsScalar()) type_error(item_loc, value[i], "a name");
    out.push_back(trim(value[i].Scalar()));
  }
  return out;
}

// A list of integers, or one comma-separated string ("10,11") as a command-line override gives;
// an item "10-12" is the range 10, 11, 12 (as FSDPP_PROFILE_STEPS writes it).
template <>
std::vector<int64_t> read_value<std::vector<int64_t>>(const YAML::Node& value, const Loc& loc) {
  constexpr std::string_view kExpected =
      "a list of integers or ranges (10-12), or a comma-separated string of them";
  std::vector<int64_t> out;
  if (value.IsNull()) return out;
  for (const auto& item : read_value<std::vector<std::string>>(value, loc)) {
    int64_t a = 0, b = 0;
    const auto dash = item.find('-', 1);
    const bool ok = dash == std::string::npos
                        ? parse_int(item, a) && (b = a, true)
                        : parse_int(trim(item.substr(0, dash)), a) &&
                              parse_int(trim(item.substr(dash + 1)), b) && a <= b &&
                              b - a < 100000;
    if (!ok) type_error(loc, value, kExpected);
    for (int64_t v = a; v <= b; ++v) out.push_back(v);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Writing values back.

// The shortest text that reads back to the same double: fixed notation for everyday magnitudes
// (0.0003, 10000.0), scientific otherwise (1e-8, 1e+20).
std::string format_double(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  char buf[400];
  const double a = std::fabs(v);
  const bool fixed = a == 0 || (a >= 1e-4 && a < 1e15);
  const auto [ptr, ec] = std::to_chars(
      buf, buf + sizeof(buf), v, fixed ? std::chars_format::fixed : std::chars_format::scientific);
  std::string s(buf, ptr);
  if (fixed) {
    if (s.find('.') == std::string::npos) s += ".0";
    return s;
  }
  // "1e-08" -> "1e-8"
  const auto e = s.find('e');
  size_t digits = e + 2;
  while (digits + 1 < s.size() && s[digits] == '0') s.erase(digits, 1);
  return s;
}

// Plain when unambiguous (identifiers, paths), double-quoted otherwise.
void emit_string(YAML::Emitter& out, const std::string& s) {
  const bool plain =
      !s.empty() && (std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_') &&
      std::all_of(s.begin(), s.end(),
                  [](char c) {
                    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' ||
                           c == '/' || c == '-';
                  }) &&
      lower(s) != "null" && lower(s) != "true" && lower(s) != "false";
  if (plain) {
    out << s;
  } else {
    out << YAML::DoubleQuoted << s;
  }
}

void emit_value(YAML::Emitter& out, int64_t v) { out << v; }
void emit_value(YAML::Emitter& out, uint64_t v) { out << v; }
void emit_value(YAML::Emitter& out, double v) { out << format_double(v); }
void emit_value(YAML::Emitter& out, bool v) { out << (v ? "true" : "false"); }
void emit_value(YAML::Emitter& out, const std::string& v) { emit_string(out, v); }
void emit_value(YAML::Emitter& out, const std::vector<std::string>& v) {
  out << YAML::Flow << YAML::BeginSeq;
  for (const auto& s : v) emit_string(out, s);
  out << YAML::EndSeq;
}
void emit_value(YAML::Emitter& out, const std::vector<int64_t>& v) {
  out << YAML::Flow << YAML::BeginSeq;
  for (int64_t i : v) out << i;
  out << YAML::EndSeq;
}

// ---------------------------------------------------------------------------------------------
// The schema: every key, how it is read and written. Sections hold keys; leaves hold values.

struct Key {
  std::string name;
  std::string alias;  // another accepted spelling (fsdp_config keys without "fsdp_"), or empty
  std::function<void(TrainConfig&, const YAML::Node&, const Loc&)> read;
  std::function<void(const TrainConfig&, YAML::Emitter&)> emit;
  std::vector<Key> children;  // a section's keys
  // A string: an override's value is taken literally unless it starts with a quote, so that
  // data.path=/tmp/a: b or training.sample_prompt=Once upon a time need no YAML quoting.
  bool literal = false;

  bool is_section() const { return !children.empty(); }
  bool matches(const std::string& n) const { return n == name || (!alias.empty() && n == alias); }
  const Key* child(const std::string& n) const {
    for (const auto& c : children) {
      if (c.matches(n)) return &c;
    }
    return nullptr;
  }
  std::vector<std::string> child_names() const {
    std::vector<std::string> out;
    for (const auto& c : children) out.push_back(c.name);
    return out;
  }
};

// `acc` maps a (const) TrainConfig& to the field: [](auto& c) -> auto& { return c.model.dim; }.
template <class Acc>
Key leaf(std::string name, Acc acc, std::string alias = {}) {
  Key k;
  k.name = std::move(name);
  k.alias = std::move(alias);
  k.read = [acc](TrainConfig& c, const YAML::Node& value, const Loc& loc) {
    using T = std::remove_cvref_t<decltype(acc(c))>;
    acc(c) = read_value<T>(value, loc);
  };
  k.emit = [acc](const TrainConfig& c, YAML::Emitter& out) { emit_value(out, acc(c)); };
  using T = std::remove_cvref_t<decltype(acc(std::declval<TrainConfig&>()))>;
  k.literal = std::is_same_v<T, std::string>;
  return k;
}

// An enum spelled in capitals (FSDP's names), accepted in any case.
template <class Acc>
Key upper_leaf(std::string name, Acc acc, std::string alias = {}) {
  Key k = leaf(std::move(name), acc, std::move(alias));
  k.read = [acc](TrainConfig& c, const YAML::Node& value, const Loc& loc) {
    acc(c) = upper(read_value<std::string>(value, loc));
  };
  return k;
}

Key section(std::string name, std::vector<Key> children) {
  Key k;
  k.name = std::move(name);
  k.children = std::move(children);
  return k;
}

constexpr std::string_view kStrategies =
    "full_shard, shard_grad_op, zero1, no_shard, hybrid_shard or hybrid_shard_zero2";

// training.fsdp: a strategy name, or Hugging Face's space-separated option list
// ("full_shard auto_wrap", "full_shard offload") or a list of those options.
Key fsdp_key() {
  Key k;
  k.name = "fsdp";
  k.read = [](TrainConfig& c, const YAML::Node& value, const Loc& loc) {
    const std::string expected = fmt::format(
        "one of {} (optionally with Hugging Face's 'auto_wrap' / 'offload')", kStrategies);
    std::vector<std::string> tokens;
    if (value.IsScalar()) {
      std::istringstream in(value.Scalar());
      for (std::string t; in >> t;) tokens.push_back(t);
    } else if (value.IsSequence()) {
      for (const auto& item : value) {
        if (!item.IsScalar()) type_error(loc, value, expected);
        tokens.push_back(trim(item.Scalar()));
      }
    } else {
      type_error(loc, value, expected);
    }
    int n_strategies = 0;
    for (const auto& t : tokens) {
      const std::string l = lower(t);
      if (l == "auto_wrap") continue;  // wrapping follows fsdp_config.fsdp_auto_wrap_policy
      if (l == "offload") {
        c.training.fsdp_config.offload_params = true;
        continue;
      }
      try {
        c.training.fsdp = parse_sharding_strategy(l);
      } catch (const ConfigError&) {
        type_error(loc, value, expected);
      }
      ++n_strategies;
    }
    if (n_strategies != 1) type_error(loc, value, expected + ", exactly one strategy");
  };
  k.emit = [](const TrainConfig& c, YAML::Emitter& out) {
    out << lower(to_string(c.training.fsdp));
  };
  return k;
}

#define FSDPP_KEY(sec, member) \
  leaf(#member, [](auto& c) -> auto& { return c.sec.member; })
#define FSDPP_FSDP_KEY(member) \
  leaf("fsdp_" #member, [](auto& c) -> auto& { return c.training.fsdp_config.member; }, #member)
#define FSDPP_FSDP_ENUM_KEY(member)                                                             \
  upper_leaf("fsdp_" #member, [](auto& c) -> auto& { return c.training.fsdp_config.member; }, \
             #member)

const Key& schema() {
  static const Key root = section(
      "",
      {
          section("model",
                  {
                      FSDPP_KEY(model, vocab_size),
                      FSDPP_KEY(model, dim),
                      FSDPP_KEY(model, n_layers),
                      FSDPP_KEY(model, n_heads),
                      FSDPP_KEY(model, n_kv_heads),
                      FSDPP_KEY(model, ffn_hidden),
                      FSDPP_KEY(model, multiple_of),
                      FSDPP_KEY(model, max_seq_len),
                      FSDPP_KEY(model, norm_eps),
                      FSDPP_KEY(model, rope_theta),
                      FSDPP_KEY(model, init_std),
                      FSDPP_KEY(model, tie_embeddings),
                      FSDPP_KEY(model, init_from),
                  }),
          section("data",
                  {
                      FSDPP_KEY(data, path),
                      FSDPP_KEY(data, tokenizer),
                      FSDPP_KEY(data, tokenizer_model),
                      FSDPP_KEY(data, tokenizer_vocab_size),
                      FSDPP_KEY(data, seq_len),
                      FSDPP_KEY(data, val_fraction),
                      FSDPP_KEY(data, cache_dir),
                  }),
          section("training",
                  {
                      fsdp_key(),
                      section("fsdp_config",
                              {
                                  FSDPP_FSDP_ENUM_KEY(auto_wrap_policy),
                                  FSDPP_FSDP_KEY(transformer_layer_cls_to_wrap),
                                  FSDPP_FSDP_KEY(min_num_params),
                                  FSDPP_FSDP_ENUM_KEY(backward_prefetch),
                                  FSDPP_FSDP_KEY(forward_prefetch),
                                  FSDPP_FSDP_KEY(limit_all_gathers),
                                  FSDPP_FSDP_ENUM_KEY(state_dict_type),
                                  FSDPP_FSDP_KEY(offload_params),
                                  FSDPP_FSDP_KEY(offload_optimizer_state_dir),
                                  FSDPP_FSDP_KEY(hybrid_shard_group_size),
                              }),
                      FSDPP_KEY(training, gradient_checkpointing),
                      FSDPP_KEY(training, gradient_checkpointing_every),
                      FSDPP_KEY(training, bf16),
                      FSDPP_KEY(training, fp16),
                      FSDPP_KEY(training, per_device_train_batch_size),
                      FSDPP_KEY(training, per_device_eval_batch_size),
                      FSDPP_KEY(training, gradient_accumulation_steps),
                      FSDPP_KEY(training, learning_rate),
                      FSDPP_KEY(training, warmup_steps),
                      FSDPP_KEY(training, weight_decay),
                      FSDPP_KEY(training, adam_beta1),
                      FSDPP_KEY(training, adam_beta2),
                      FSDPP_KEY(training, adam_epsilon),
                      FSDPP_KEY(training, max_grad_norm),
                      FSDPP_KEY(training, max_steps),
                      FSDPP_KEY(training, num_train_epochs),
                      FSDPP_KEY(training, logging_steps),
                      FSDPP_KEY(training, eval_steps),
                      FSDPP_KEY(training, eval_max_batches),
                      FSDPP_KEY(training, save_strategy),
                      FSDPP_KEY(training, save_steps),
                      FSDPP_KEY(training, save_only_model),
                      FSDPP_KEY(training, save_total_limit),
                      FSDPP_KEY(training, async_save),
                      FSDPP_KEY(training, resume_from_checkpoint),
                      FSDPP_KEY(training, seed),
                      FSDPP_KEY(training, output_dir),
                      FSDPP_KEY(training, overwrite_output_dir),
                      FSDPP_KEY(training, skip_memory_check),
                      FSDPP_KEY(training, report_to),
                      FSDPP_KEY(training, logging_dir),
                      FSDPP_KEY(training, lr_scheduler_type),
                      FSDPP_KEY(training, min_lr_ratio),
                      FSDPP_KEY(training, sample_tokens),
                      FSDPP_KEY(training, sample_prompt),
                      FSDPP_KEY(training, sample_temperature),
                      FSDPP_KEY(training, sample_top_k),
                      FSDPP_KEY(training, malloc_mmap_threshold),
                      FSDPP_KEY(training, profile_steps),
                  }),
      });
  return root;
}

#undef FSDPP_KEY
#undef FSDPP_FSDP_KEY
#undef FSDPP_FSDP_ENUM_KEY

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
std::string suggestion(const Key& sec, const std::string& sec_path, const std::string& name) {
  // The same name in another section: `seed:` under model: belongs in training:.
  std::vector<std::pair<std::string, const Key*>> all;
  collect_paths(schema(), "", all);
  for (const auto& [path, key] : all) {
    if (key->matches(name)) return fmt::format("; did you mean '{}'?", path);
  }
  // Other frameworks' names for our keys (Hugging Face's LlamaConfig, nanoGPT, ...).
  static const std::map<std::string, std::string> kElsewhere = {
      {"lr", "training.learning_rate"},
      {"epochs", "training.num_train_epochs"},
      {"batch_size", "training.per_device_train_batch_size"},
      {"block_size", "data.seq_len"},
      {"context_length", "data.seq_len"},
      {"n_embd", "model.dim"},
      {"hidden_size", "model.dim"},
      {"num_hidden_layers", "model.n_layers"},
      {"n_layer", "model.n_layers"},
      {"num_attention_heads", "model.n_heads"},
      {"n_head", "model.n_heads"},
      {"num_key_value_heads", "model.n_kv_heads"},
      {"intermediate_size", "model.ffn_hidden"},
      {"rms_norm_eps", "model.norm_eps"},
      {"max_position_embeddings", "model.max_seq_len"},
      {"tie_word_embeddings", "model.tie_embeddings"},
      {"initializer_range", "model.init_std"},
      {"dataset", "data.path"},
  };
  if (auto it = kElsewhere.find(lower(name)); it != kElsewhere.end()) {
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

[[noreturn]] void unknown_key(const Key& sec, const std::string& sec_path, const std::string& name,
                              const std::string& where) {
  const std::string path = join_path(sec_path, name);
  FSDPP_THROW(ConfigError, "[config] unknown key '{}'{}{} Accepted keys in {}: {}", path, where,
              suggestion(sec, sec_path, name),
              sec_path.empty() ? std::string("the top level") : sec_path,
              join(sec.child_names(), ", "));
}

std::string describe_section(const Key& sec, const std::string& path) {
  return fmt::format("a map with the keys of {} ({})", path.empty() ? "the top level" : path,
                     join(sec.child_names(), ", "));
}

void read_section(const Key& sec, TrainConfig& c, const YAML::Node& node, const Loc& loc,
                  const Reader& r) {
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
    if (!child) unknown_key(sec, loc.path, name, r.where(join_path(loc.path, name), key_node));
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
      read_section(*child, c, entry.second, child_loc, r);
    } else {
      child->read(c, entry.second, child_loc);
    }
  }
}

void emit_section(const Key& sec, const TrainConfig& c, YAML::Emitter& out) {
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

constexpr std::string_view kTopLevel = "a YAML map with the sections model:, data: and training:";

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

YAML::Node load_document(const std::string& text, const std::string& source) {
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
void apply_value(YAML::Node doc, std::vector<const Key*> keys, const YAML::Node& value,
                 const std::string& text, Reader& r) {
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
        unknown_key(target, path, name, fmt::format(" in override {}", quote(text)));
      }
      auto child_keys = keys;
      child_keys.push_back(child);
      apply_value(doc, child_keys, entry.second, text, r);
    }
    return;
  }
  set_in_tree(doc, keys, value, r.source);
  r.override_of[path] = text;
}

void apply_override(YAML::Node doc, const std::string& text, Reader& r) {
  const auto eq = text.find('=');
  if (eq == std::string::npos) {
    FSDPP_THROW(ConfigError,
                "[config] override {} has no '='; expected key.path=value, e.g. "
                "training.learning_rate=1e-3",
                quote(text));
  }
  const std::string key_path = trim(std::string_view(text).substr(0, eq));
  const std::string value_text = trim(std::string_view(text).substr(eq + 1));
  std::vector<const Key*> keys;
  const Key* sec = &schema();
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
    if (!k) unknown_key(*sec, path, name, fmt::format(" in override {}", quote(text)));
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
  apply_value(doc, keys, value, text, r);
}

// ---------------------------------------------------------------------------------------------
// validate() helpers.

template <typename... Args>
void check(bool ok, fmt::format_string<Args...> format, Args&&... args) {
  if (!ok) throw ConfigError(fmt::format(format, std::forward<Args>(args)...));
}

void check_one_of(const std::string& path, const std::string& value,
                  const std::vector<std::string>& accepted) {
  check(std::find(accepted.begin(), accepted.end(), value) != accepted.end(),
        "[config] {}={}: expected one of {}", path, quote(value), join(accepted, ", "));
}

// LlamaConfig::validate's "[models] LlamaConfig.dim=..." as "[config] model.dim=...".
void validate_llama(const models::LlamaConfig& cfg) {
  try {
    cfg.validate();
  } catch (const ConfigError& e) {
    std::string msg = e.what();
    constexpr std::string_view kPrefix = "[models] LlamaConfig.";
    if (msg.rfind(kPrefix, 0) == 0) {
      msg = "[config] model." + msg.substr(kPrefix.size());
    } else {
      msg = "[config] model: " + msg;
    }
    throw ConfigError(msg);
  }
}

models::LlamaConfig to_llama(const ModelSection& m, int64_t vocab_size, uint64_t seed) {
  models::LlamaConfig cfg;
  cfg.vocab_size = vocab_size;
  cfg.dim = m.dim;
  cfg.n_layers = m.n_layers;
  cfg.n_heads = m.n_heads;
  cfg.n_kv_heads = m.n_kv_heads;
  cfg.ffn_hidden = m.ffn_hidden;
  cfg.multiple_of = m.multiple_of;
  cfg.max_seq_len = m.max_seq_len;
  cfg.norm_eps = m.norm_eps;
  cfg.rope_theta = m.rope_theta;
  cfg.tie_embeddings = m.tie_embeddings;
  cfg.seed = seed;
  cfg.init_std = m.init_std;
  return cfg;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

TrainConfig TrainConfig::from_yaml_string(const std::string& yaml,
                                          const std::vector<std::string>& overrides,
                                          const std::string& source_name) {
  Reader r;
  r.source = source_name;
  YAML::Node doc = load_document(yaml, source_name);
  for (const auto& o : overrides) apply_override(doc, o, r);
  TrainConfig cfg;
  read_section(schema(), cfg, doc, Loc{"", ""}, r);
  cfg.validate();
  return cfg;
}

TrainConfig TrainConfig::from_file(const std::string& path,
                                   const std::vector<std::string>& overrides) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto st = fs::status(path, ec);
  check(fs::exists(st), "[config] config file '{}' does not exist; expected a YAML file", path);
  check(fs::is_regular_file(st), "[config] config file '{}' is not a regular file; expected a "
        "YAML file", path);
  std::ifstream in(path, std::ios::binary);
  check(static_cast<bool>(in), "[config] cannot open config file '{}': {}", path,
        std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  check(!in.bad(), "[config] cannot read config file '{}'", path);
  return from_yaml_string(text.str(), overrides, path);
}

void TrainConfig::validate() const {
  // model:
  check(model.vocab_size >= 0,
        "[config] model.vocab_size={}: expected 0 (the tokenizer's vocabulary) or > 0",
        model.vocab_size);
  // The vocabulary is checked against the tokenizer in llama_config(); 1 stands in for it here.
  validate_llama(to_llama(model, model.vocab_size > 0 ? model.vocab_size : 1, training.seed));

  // data:
  check(!data.path.empty(),
        "[config] data.path is empty; expected a text file or a directory of text files");
  check_one_of("data.tokenizer", data.tokenizer, {"byte", "sentencepiece"});
  check(data.tokenizer == "sentencepiece" || data.tokenizer_model.empty(),
        "[config] data.tokenizer_model={} is set but data.tokenizer={}; expected "
        "data.tokenizer=sentencepiece with a .model file, or no tokenizer_model",
        quote(data.tokenizer_model), quote(data.tokenizer));
  check(data.tokenizer_vocab_size >= 1, "[config] data.tokenizer_vocab_size={}: expected >= 1",
        data.tokenizer_vocab_size);
  check(data.seq_len >= 1, "[config] data.seq_len={}: expected >= 1", data.seq_len);
  check(data.seq_len <= model.max_seq_len,
        "[config] data.seq_len={} is longer than model.max_seq_len={}; expected 1 <= seq_len <= "
        "max_seq_len",
        data.seq_len, model.max_seq_len);
  check(data.val_fraction >= 0 && data.val_fraction < 1,
        "[config] data.val_fraction={}: expected 0 <= val_fraction < 1", data.val_fraction);
  if (model.vocab_size > 0 && data.tokenizer == "byte") {
    check(model.vocab_size >= 256,
          "[config] model.vocab_size={} is smaller than the byte tokenizer's 256 tokens; expected "
          "0 (the tokenizer's) or >= 256",
          model.vocab_size);
  }
  if (model.vocab_size > 0 && data.tokenizer == "sentencepiece" && data.tokenizer_model.empty()) {
    check(model.vocab_size >= data.tokenizer_vocab_size,
          "[config] model.vocab_size={} is smaller than data.tokenizer_vocab_size={}; expected 0 "
          "(the tokenizer's) or >= {}",
          model.vocab_size, data.tokenizer_vocab_size, data.tokenizer_vocab_size);
  }

  // training.fsdp_config:
  const auto& f = training.fsdp_config;
  check_one_of("training.fsdp_config.fsdp_auto_wrap_policy", f.auto_wrap_policy,
               {"TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP"});
  if (f.auto_wrap_policy == "TRANSFORMER_BASED_WRAP") {
    check(!f.transformer_layer_cls_to_wrap.empty(),
          "[config] training.fsdp_config.fsdp_transformer_layer_cls_to_wrap is empty but "
          "fsdp_auto_wrap_policy=TRANSFORMER_BASED_WRAP; expected class names such as "
          "[TransformerBlock]");
  }
  for (const auto& name : f.transformer_layer_cls_to_wrap) {
    check(!name.empty(),
          "[config] training.fsdp_config.fsdp_transformer_layer_cls_to_wrap has an empty name; "
          "expected class names such as [TransformerBlock]");
  }
  check(f.min_num_params >= 1,
        "[config] training.fsdp_config.fsdp_min_num_params={}: expected >= 1", f.min_num_params);
  check_one_of("training.fsdp_config.fsdp_backward_prefetch", f.backward_prefetch,
               {"BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"});
  check_one_of("training.fsdp_config.fsdp_state_dict_type", f.state_dict_type,
               {"FULL_STATE_DICT", "SHARDED_STATE_DICT", "LOCAL_STATE_DICT"});
  check(f.hybrid_shard_group_size >= 0,
        "[config] training.fsdp_config.fsdp_hybrid_shard_group_size={}: expected 0 "
        "(LOCAL_WORLD_SIZE, one shard group per node) or a number of ranks >= 1",
        f.hybrid_shard_group_size);

  // training:
  const auto& t = training;
  check(!(t.bf16 && t.fp16),
        "[config] training.bf16=true and training.fp16=true; expected at most one of them true");
  check(t.gradient_checkpointing_every >= 1,
        "[config] training.gradient_checkpointing_every={}: expected >= 1 (1: every block, k: "
        "every k-th)",
        t.gradient_checkpointing_every);
  check(t.per_device_train_batch_size >= 1,
        "[config] training.per_device_train_batch_size={}: expected >= 1",
        t.per_device_train_batch_size);
  check(t.per_device_eval_batch_size >= 1,
        "[config] training.per_device_eval_batch_size={}: expected >= 1",
        t.per_device_eval_batch_size);
  check(t.gradient_accumulation_steps >= 1,
        "[config] training.gradient_accumulation_steps={}: expected >= 1",
        t.gradient_accumulation_steps);
  check(t.learning_rate > 0 && std::isfinite(t.learning_rate),
        "[config] training.learning_rate={}: expected a finite number > 0", t.learning_rate);
  check(t.warmup_steps >= 0, "[config] training.warmup_steps={}: expected >= 0", t.warmup_steps);
  check(t.weight_decay >= 0 && std::isfinite(t.weight_decay),
        "[config] training.weight_decay={}: expected a finite number >= 0", t.weight_decay);
  check(t.adam_beta1 >= 0 && t.adam_beta1 < 1,
        "[config] training.adam_beta1={}: expected 0 <= adam_beta1 < 1", t.adam_beta1);
  check(t.adam_beta2 >= 0 && t.adam_beta2 < 1,
        "[config] training.adam_beta2={}: expected 0 <= adam_beta2 < 1", t.adam_beta2);
  check(t.adam_epsilon > 0 && std::isfinite(t.adam_epsilon),
        "[config] training.adam_epsilon={}: expected a finite number > 0", t.adam_epsilon);
  check(t.max_grad_norm >= 0 && std::isfinite(t.max_grad_norm),
        "[config] training.max_grad_norm={}: expected a finite number >= 0 (0: no clipping)",
        t.max_grad_norm);
  check(t.max_steps == -1 || t.max_steps >= 1,
        "[config] training.max_steps={}: expected a number of steps >= 1, or -1 to train for "
        "training.num_train_epochs",
        t.max_steps);
  check(t.num_train_epochs >= 0 && std::isfinite(t.num_train_epochs),
        "[config] training.num_train_epochs={}: expected a finite number >= 0",
        t.num_train_epochs);
  check(t.max_steps > 0 || t.num_train_epochs > 0,
        "[config] training.max_steps={} and training.num_train_epochs={} set no length of "
        "training; expected max_steps >= 1, or max_steps=-1 with num_train_epochs > 0",
        t.max_steps, t.num_train_epochs);
  check(t.logging_steps >= 1, "[config] training.logging_steps={}: expected >= 1",
        t.logging_steps);
  check(t.eval_steps >= 0, "[config] training.eval_steps={}: expected >= 0 (0: only at the end)",
        t.eval_steps);
  check(t.eval_max_batches >= 1, "[config] training.eval_max_batches={}: expected >= 1",
        t.eval_max_batches);
  check(t.save_steps >= 0, "[config] training.save_steps={}: expected >= 0", t.save_steps);
  check_one_of("training.save_strategy", t.save_strategy, {"steps", "epoch", "no"});
  check(t.save_strategy == "steps" || t.save_steps == 0,
        "[config] training.save_steps={} is used only with training.save_strategy=steps, not "
        "'{}'; set one of them",
        t.save_steps, t.save_strategy);
  // glibc refuses thresholds above HEAP_MAX_SIZE / 2 (32 MiB on 64-bit systems).
  check(t.malloc_mmap_threshold >= 0 && t.malloc_mmap_threshold <= (int64_t{32} << 20),
        "[config] training.malloc_mmap_threshold={}: expected bytes in [0, 33554432] (0: glibc's "
        "dynamic threshold)",
        t.malloc_mmap_threshold);
  check(t.save_total_limit >= 0,
        "[config] training.save_total_limit={}: expected >= 0 (0: keep every checkpoint)",
        t.save_total_limit);
  check(!t.output_dir.empty(), "[config] training.output_dir is empty; expected a directory");
  // report_to: Hugging Face's integration names; fsdpp has TensorBoard's. Another one (wandb,
  // mlflow, ...) is an error rather than a run that silently reports nowhere.
  for (const auto& name : t.report_to) {
    check(name == "tensorboard" || name == "all" || name == "none",
          "[config] training.report_to has '{}': fsdpp reports to tensorboard only; expected "
          "tensorboard, all or none (or a list of them)",
          name);
    check(t.report_to.size() == 1 || name == "tensorboard",
          "[config] training.report_to=[{}]: '{}' stands alone; expected tensorboard, all or none",
          join(t.report_to, ", "), name);
  }
  check_one_of("training.lr_scheduler_type", t.lr_scheduler_type, {"cosine", "linear", "constant"});
  check(t.min_lr_ratio >= 0 && t.min_lr_ratio <= 1,
        "[config] training.min_lr_ratio={}: expected 0 <= min_lr_ratio <= 1", t.min_lr_ratio);
  check(t.sample_tokens >= 0, "[config] training.sample_tokens={}: expected >= 0 (0: no sample)",
        t.sample_tokens);
  check(t.sample_tokens == 0 || !t.sample_prompt.empty(),
        "[config] training.sample_prompt is empty but training.sample_tokens={}; expected a "
        "prompt of at least one character, or sample_tokens=0",
        t.sample_tokens);
  check(t.sample_temperature >= 0 && std::isfinite(t.sample_temperature),
        "[config] training.sample_temperature={}: expected a finite number >= 0 (0: greedy)",
        t.sample_temperature);
  check(t.sample_top_k >= 0, "[config] training.sample_top_k={}: expected >= 0 (0: no top-k)",
        t.sample_top_k);
  for (int64_t step : t.profile_steps) {
    check(step >= 1, "[config] training.profile_steps has {}: expected steps >= 1", step);
  }

}

bool TrainingSection::report_to_tensorboard() const {
  return std::any_of(report_to.begin(), report_to.end(),
                     [](const std::string& n) { return n == "tensorboard" || n == "all"; });
}

std::string TrainConfig::to_yaml() const {
  YAML::Emitter out;
  out << YAML::Comment("fsdpp effective configuration (docs/config.md describes every key)");
  emit_section(schema(), *this, out);
  return std::string(out.c_str()) + "\n";
}

models::LlamaConfig TrainConfig::llama_config(int64_t tokenizer_vocab_size) const {
  check(tokenizer_vocab_size >= 1,
        "[config] the tokenizer's vocabulary size {} is not positive; expected >= 1",
        tokenizer_vocab_size);
  check(model.vocab_size == 0 || model.vocab_size >= tokenizer_vocab_size,
        "[config] model.vocab_size={} is smaller than the tokenizer's vocabulary ({} tokens); "
        "expected 0 (use the tokenizer's) or >= {}",
        model.vocab_size, tokenizer_vocab_size, tokenizer_vocab_size);
  const auto cfg = to_llama(model, model.vocab_size > 0 ? model.vocab_size : tokenizer_vocab_size,
                            training.seed);
  validate_llama(cfg);
  return cfg;
}

std::vector<std::string> resolve_data_files(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto st = fs::status(path, ec);
  check(fs::exists(st), "[config] data.path='{}' does not exist; expected a text file or a "
        "directory of text files", path);
  if (!fs::is_directory(st)) return {path};
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    if (!fs::is_regular_file(entry.symlink_status())) continue;  // symlinks, directories, ...
    const std::string ext = entry.path().extension().string();
    if (ext == ".dat" || ext == ".u8") continue;
    files.push_back(entry.path().string());
  }
  check(!ec, "[config] cannot list data.path='{}': {}", path, ec.message());
  std::sort(files.begin(), files.end());
  check(!files.empty(),
        "[config] data.path='{}' is a directory without text files; expected regular files "
        "(not symlinks, *.dat or *.u8) to concatenate in name order",
        path);
  return files;
}

}  // namespace fsdpp::train
