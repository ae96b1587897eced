// The schema engine's values: strict reads of scalars and lists, their error messages, and
// writing them back. See fsdpp/config/schema.h.
#include "fsdpp/config/schema.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

#include "fsdpp/common/error.h"

namespace fsdpp::config::schema {

// ---------------------------------------------------------------------------------------------
// Small string helpers.

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
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

// ---------------------------------------------------------------------------------------------
// Type errors.

namespace {

// "training.learning_rate='abc'" or "training.learning_rate is a map".
std::string found(const Loc& loc, const YAML::Node& value) {
  switch (value.Type()) {
    case YAML::NodeType::Scalar: return fmt::format("{}={}", loc.path, quote(value.Scalar()));
    case YAML::NodeType::Sequence: return fmt::format("{} is a list", loc.path);
    case YAML::NodeType::Map: return fmt::format("{} is a map", loc.path);
    default: return fmt::format("{} is empty", loc.path);
  }
}

}  // namespace

[[noreturn]] void type_error(const Loc& loc, const YAML::Node& value, std::string_view expected) {
  FSDPP_THROW(ConfigError, "[config] {}{}: expected {}", found(loc, value), loc.where, expected);
}

// ---------------------------------------------------------------------------------------------
// Scalars, strictly: an integer key takes an integer, a bool key true or false.

namespace {

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

// A number too large for its type: "expected an integer" would send the user looking for a typo.
template <class T>
bool out_of_range(std::string_view s) {
  s = strip_plus(s);
  T v{};
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc::result_out_of_range && ptr == s.data() + s.size();
}

}  // namespace

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
                              parse_int(trim(item.substr(dash + 1)), b);
    // The item that is wrong, not the whole list ("is a list: expected a list" said nothing).
    const char* why = !ok         ? ""
                      : a > b     ? "; a range runs upwards, such as 1-3"
                      : b - a >= 100000 ? "; a range spans fewer than 100000 integers"
                                        : nullptr;
    if (why != nullptr) {
      FSDPP_THROW(ConfigError, "[config] {} has {}{}: expected {}{}", loc.path, quote(item),
                  loc.where, kExpected, why);
    }
    for (int64_t v = a; v <= b; ++v) out.push_back(v);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Writing values back.

namespace {

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

}  // namespace

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

[[noreturn]] void choice_error(const Loc& loc, const std::string& found,
                               const std::vector<std::string>& accepted) {
  std::string hint;
  size_t best = SIZE_MAX;
  for (const auto& name : accepted) {
    const size_t d = edit_distance(found, name);
    if (d < best && d <= std::max<size_t>(2, found.size() / 3)) {
      best = d;
      hint = fmt::format("; did you mean '{}'?", name);
    }
  }
  FSDPP_THROW(ConfigError, "[config] {}={}{}: expected one of {}{}", loc.path, quote(found),
              loc.where, join(accepted, ", "), hint);
}

// ---------------------------------------------------------------------------------------------
// Keys and sections.

const Key* Key::child(const std::string& n) const {
  for (const auto& c : children) {
    if (c.matches(n)) return &c;
  }
  return nullptr;
}

std::vector<std::string> Key::child_names() const {
  std::vector<std::string> out;
  for (const auto& c : children) out.push_back(c.name);
  return out;
}

Key section(std::string name, std::vector<Key> children) {
  Key k;
  k.name = std::move(name);
  k.children = std::move(children);
  return k;
}

}  // namespace fsdpp::config::schema
