#pragma once
// One object of a tokenizer.json (the model, a normalizer, a pre-tokenizer...) with the file and
// the path inside it, so that what reads a field says in its error which file, which component
// and which field is wrong and what it accepts.
//
//   JsonSection pre(j["pre_tokenizer"], "models/x/tokenizer.json", "pre_tokenizer");
//   bool prefix = pre.boolean("add_prefix_space", false);   // absent: the default
//   pre.fail("'{}' is not supported; supported: {}", type, list);
//   -> [data] models/x/tokenizer.json: pre_tokenizer 'Whitespace' is not supported; supported: ...

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fsdpp/common/error.h"

namespace fsdpp::data {

class JsonSection {
 public:
  JsonSection(const nlohmann::json& j, std::string file, std::string path)
      : j_(j), file_(std::move(file)), path_(std::move(path)) {
    if (!j_.is_object()) fail("is {}; expected an object", j_.type_name());
  }

  const nlohmann::json& json() const { return j_; }
  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }
  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }

  // "[data] <file>: <path> <message>"
  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) const {
    FSDPP_THROW(ConfigError, "[data] {}: {} {}", file_, path_,
                fmt::format(format, std::forward<Args>(args)...));
  }

  // The component's "type" (required).
  std::string type() const { return string("type"); }

  std::string string(const char* key) const {
    if (!j_.contains(key)) fail("has no \"{}\"; expected a string", key);
    return string_or(key, "");
  }
  std::string string_or(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const auto& v = j_[key];
    if (!v.is_string()) fail("\"{}\" is {}; expected a string", key, v.type_name());
    return v.get<std::string>();
  }
  std::optional<std::string> optional_string(const char* key) const {
    if (!has(key)) return std::nullopt;
    return string_or(key, "");
  }
  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const auto& v = j_[key];
    if (!v.is_boolean()) fail("\"{}\" is {}; expected true or false", key, v.type_name());
    return v.get<bool>();
  }
  int64_t integer(const char* key, int64_t fallback) const {
    if (!has(key)) return fallback;
    const auto& v = j_[key];
    if (!v.is_number_integer()) fail("\"{}\" is {}; expected an integer", key, v.dump());
    return v.get<int64_t>();
  }
  // A single character (Metaspace's replacement, Strip's content).
  std::string character(const char* key, const std::string& fallback) const;

  // The object at `key` as a section ("pre_tokenizer.pretokenizers[2]").
  JsonSection child(const nlohmann::json& j, const std::string& suffix) const {
    return JsonSection(j, file_, path_ + suffix);
  }
  // The array at `key` (required).
  const nlohmann::json& array(const char* key) const {
    if (!j_.contains(key) || !j_[key].is_array()) {
      fail("\"{}\" is {}; expected an array", key,
           j_.contains(key) ? j_[key].type_name() : "missing");
    }
    return j_[key];
  }

 private:
  const nlohmann::json& j_;
  std::string file_;
  std::string path_;
};

inline std::string JsonSection::character(const char* key, const std::string& fallback) const {
  std::string s = string_or(key, fallback);
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xc0) != 0x80;
  if (n != 1) fail("\"{}\" is '{}'; expected one character", key, s);
  return s;
}

}  // namespace fsdpp::data
