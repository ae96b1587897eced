// Python's two ways of formatting a string that templates use: str.format() and printf-style
// '%s' % args (jinja2's format filter and the % operator on a string).
#include <cstdio>

#include <fmt/format.h>

#include "jinja_builtins.h"
#include "jinja_error.h"
#include "jinja_eval.h"
#include "jinja_text.h"

namespace fsdpp::data::jinja {

std::string str_format(const std::string& fmt_str, CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt_str.size(); ++i) {
    const char c = fmt_str[i];
    if (c == '}' ) {
      if (i + 1 < fmt_str.size() && fmt_str[i + 1] == '}') ++i;
      else throw RenderError("str.format(): single '}' encountered in format string");
      out.push_back('}');
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < fmt_str.size() && fmt_str[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t close = fmt_str.find('}', i);
    if (close == std::string::npos) throw RenderError("str.format(): single '{' encountered in format string");
    std::string field = fmt_str.substr(i + 1, close - i - 1);
    i = close;
    char conversion = 0;
    if (const size_t colon = field.find(':'); colon != std::string::npos) {
      if (colon + 1 < field.size())
        throw RenderError(fmt::format("str.format(): format spec '{}' is not supported", field.substr(colon + 1)));
      field.resize(colon);
    }
    if (const size_t bang = field.find('!'); bang != std::string::npos) {
      conversion = bang + 1 < field.size() ? field[bang + 1] : 0;
      field.resize(bang);
    }
    Value v;
    if (field.empty()) {
      if (auto_index >= args.positional.size()) throw RenderError("str.format(): replacement index out of range");
      v = args.positional[auto_index++];
    } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      const size_t k = std::stoul(field);
      if (k >= args.positional.size()) throw RenderError("str.format(): replacement index out of range");
      v = args.positional[k];
    } else {
      const auto it = std::find_if(args.keyword.begin(), args.keyword.end(), [&](const auto& kv) { return kv.first == field; });
      if (it == args.keyword.end()) throw RenderError(fmt::format("str.format(): no argument named '{}'", field));
      v = it->second;
    }
    out += conversion == 'r' ? to_repr(v) : to_str(v);
  }
  return out;
}

namespace {

// One conversion of printf-style formatting: %[(key)][flags][width][.precision]type.
std::string convert(const Value& v, const std::string& flags, int width, int precision, char type) {
  std::string body;
  switch (type) {
    case 's': body = to_str(v); break;
    case 'r':
    case 'a': body = to_repr(v); break;
    case 'c':
      if (v.is_string()) body = v.as_string();
      else body = text::encode(std::u32string(1, static_cast<char32_t>(v.int_value())));
      break;
    default: {
      if (!v.is_number())
        throw RenderError(fmt::format("%{} format: a real number is required, not {}", type, v.type_name()));
      std::string spec = "%" + flags;
      if (width >= 0) spec += std::to_string(width);
      if (precision >= 0) spec += "." + std::to_string(precision);
      char buf[512];
      if (type == 'd' || type == 'i' || type == 'u' || type == 'x' || type == 'X' || type == 'o') {
        const long long n = v.is_float() ? static_cast<long long>(v.as_float()) : static_cast<long long>(v.int_value());
        spec += std::string("ll") + (type == 'i' || type == 'u' ? 'd' : type);
        std::snprintf(buf, sizeof(buf), spec.c_str(), n);
      } else {
        spec.push_back(type);
        std::snprintf(buf, sizeof(buf), spec.c_str(), v.float_value());
      }
      return buf;
    }
  }
  if (precision >= 0) body = text::encode(text::decode(body).substr(0, static_cast<size_t>(precision)));
  const auto len = static_cast<int>(text::length(body));
  if (width > len) {
    const std::string pad(static_cast<size_t>(width - len), ' ');
    body = flags.find('-') != std::string::npos ? body + pad : pad + body;
  }
  return body;
}

}  // namespace

std::string percent_format(const std::string& format, const Value& args) {
  const bool mapping = args.is_dict();
  // Python checks for leftover arguments only when args has no __getitem__: a list or jinja2's
  // Undefined may be given to a format without conversions.
  const bool indexable = mapping || args.is_list() || args.is_undefined();
  const ValueList positional = args.is_tuple() ? args.items() : ValueList{args};
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out.push_back(format[i]);
      continue;
    }
    if (++i >= format.size()) throw RenderError("incomplete format: a '%' ends the format string");
    Value v;
    bool have_value = false;
    if (format[i] == '(') {
      const size_t close = format.find(')', i);
      if (close == std::string::npos || !mapping) throw RenderError("format requires a mapping for %(name)s");
      const Value* found = args.as_dict().find(format.substr(i + 1, close - i - 1));
      if (!found) throw RenderError(fmt::format("format: no key '{}' in the mapping", format.substr(i + 1, close - i - 1)));
      v = *found;
      have_value = true;
      i = close + 1;
    }
    std::string flags;
    while (i < format.size() && std::string("-+ 0#").find(format[i]) != std::string::npos) flags.push_back(format[i++]);
    int width = -1, precision = -1;
    while (i < format.size() && format[i] >= '0' && format[i] <= '9') width = std::max(width, 0) * 10 + (format[i++] - '0');
    if (i < format.size() && format[i] == '.') {
      precision = 0;
      for (++i; i < format.size() && format[i] >= '0' && format[i] <= '9'; ++i) precision = precision * 10 + (format[i] - '0');
    }
    if (i >= format.size()) throw RenderError("incomplete format");
    const char type = format[i];
    if (type == '%') {
      out.push_back('%');
      continue;
    }
    if (std::string("sracdiuxXofFeEgG").find(type) == std::string::npos)
      throw RenderError(fmt::format("unsupported format character '{}'", type));
    if (!have_value) {
      if (mapping) {
        v = args;
      } else {
        if (next >= positional.size()) throw RenderError("not enough arguments for format string");
        v = positional[next++];
      }
    }
    out += convert(v, flags, width, precision, type);
  }
  if (!indexable && next < positional.size()) throw RenderError("not all arguments converted during string formatting");
  return out;
}

}  // namespace fsdpp::data::jinja
