#pragma once
// A config value that is one of a few names: held as its enum, read and written as its name.
//
//   Choice<LrSchedulerType> t = "linear";        // ConfigError on a name not in the table
//   if (t == LrSchedulerType::LINEAR) ...        // or switch (t)
//   fmt::format("{}", t);                        // "linear", as to_yaml writes it
//
// The config reader types the value once (TrainConfig::from_yaml_string), so nothing after it
// parses the string again. Each enum names its values in a specialisation of ChoiceNames:
//
//   template <> struct ChoiceNames<LrSchedulerType> {
//     static constexpr std::string_view kWhat = "learning-rate schedule";
//     static constexpr bool kAnyCase = false;   // true: read in any case, written in capitals
//     static constexpr std::array<std::pair<LrSchedulerType, std::string_view>, 3> kNames{{
//         {LrSchedulerType::COSINE, "cosine"}, ...}};
//   };
//
// A table may also give YAML's null a meaning (Hugging Face's None, as `fsdp_backward_prefetch:
// null` is "no prefetch"): `static constexpr E kNull = ...;`. Then null, `~`, an empty value and
// the names null and None (any case) read as it; to_yaml still writes its name from the table.
//
// A table whose names another layer already reads in its own way (the pipeline schedules: any
// case, '-', '_' and a "Schedule" prefix ignored) gives that reading and its own refusal:
// `static std::optional<E> lookup(std::string_view text)` and
// `static std::string unknown(std::string_view key, std::string_view text)`, the whole message.

#include <fmt/format.h>

#include <cctype>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

#include "fsdpp/common/error.h"

namespace fsdpp::config {

template <class E>
struct ChoiceNames;  // specialised per enum, see above

// Whether ChoiceNames<E> gives null a meaning (kNull).
template <class E>
inline constexpr bool kHasNullChoice = requires { ChoiceNames<E>::kNull; };
// Whether ChoiceNames<E> reads its names itself (lookup) and says what an unknown one is (unknown).
template <class E>
inline constexpr bool kHasOwnLookup = requires(std::string_view text) {
  ChoiceNames<E>::lookup(text);
  ChoiceNames<E>::unknown(text, text);
};

// YAML's null as a config value reads it: null, ~, the empty string, and Python's None.
inline bool is_null_spelling(std::string_view text) {
  std::string l(text);
  for (char& c : l) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return l.empty() || l == "null" || l == "~" || l == "none";
}

template <class E>
class Choice {
 public:
  using Enum = E;
  using Names = ChoiceNames<E>;

  constexpr Choice(E value) : value_(value) {}  // NOLINT: an enum is a valid choice
  // A name of the table (in any case where the table says so); ConfigError naming the accepted
  // ones otherwise. Implicit, so that code and tests may write `cfg.data.tokenizer = "byte"`.
  Choice(std::string_view name) : value_(parse(name)) {}  // NOLINT
  Choice(const char* name) : Choice(std::string_view(name)) {}  // NOLINT
  Choice(const std::string& name) : Choice(std::string_view(name)) {}  // NOLINT

  constexpr operator E() const { return value_; }  // NOLINT: switch (choice), comparisons
  constexpr E value() const { return value_; }
  std::string_view name() const {
    for (const auto& [v, n] : Names::kNames) {
      if (v == value_) return n;
    }
    return "?";
  }

  // `text` as the table spells it: capitals for kAnyCase tables, else as given.
  static std::string normalize(std::string_view text) {
    std::string s(text);
    if (Names::kAnyCase) {
      for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
    return s;
  }
  // The value named `text`, or nullopt.
  static std::optional<E> find(std::string_view text) {
    if constexpr (kHasOwnLookup<E>) return Names::lookup(text);
    if constexpr (kHasNullChoice<E>) {
      if (is_null_spelling(text)) return Names::kNull;
    }
    const std::string n = normalize(text);
    for (const auto& [v, name] : Names::kNames) {
      if (name == n) return v;
    }
    return std::nullopt;
  }
  // "cosine, linear, constant": the accepted names as error messages list them.
  static std::string accepted() {
    std::string out;
    for (const auto& [v, name] : Names::kNames) {
      if (!out.empty()) out += ", ";
      out += name;
    }
    if constexpr (kHasNullChoice<E>) out += " or null";
    return out;
  }

  friend bool operator==(Choice a, E b) { return a.value_ == b; }
  friend bool operator==(Choice a, std::string_view name) { return a.name() == name; }
  friend std::ostream& operator<<(std::ostream& os, Choice c) { return os << c.name(); }

 private:
  static E parse(std::string_view text) {
    if (auto v = find(text)) return *v;
    FSDPP_THROW(ConfigError, "[config] unknown {} '{}'; expected one of {}", Names::kWhat, text,
                accepted());
  }

  E value_;
};

}  // namespace fsdpp::config

template <class E>
struct fmt::formatter<fsdpp::config::Choice<E>> : fmt::formatter<std::string_view> {
  template <class Ctx>
  auto format(const fsdpp::config::Choice<E>& c, Ctx& ctx) const {
    return fmt::formatter<std::string_view>::format(c.name(), ctx);
  }
};
