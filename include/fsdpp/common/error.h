#pragma once
// fsdpp's exceptions. Every message starts with its component in brackets ("[dist] ...") and
// says what was expected and what was found.

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace fsdpp {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A configuration value, environment variable or argument is wrong.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A collective or the rendezvous failed.
class CommError : public Error {
 public:
  using Error::Error;
};

// A blocking wait ran out of time.
class TimeoutError : public CommError {
 public:
  using CommError::CommError;
};

// A checkpoint cannot be written or read.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <typename E, typename... Args>
[[noreturn]] void throw_error(fmt::format_string<Args...> format, Args&&... args) {
  throw E(fmt::format(format, std::forward<Args>(args)...));
}
}  // namespace detail

}  // namespace fsdpp

// FSDPP_CHECK(cond, "[fsdp] parameter '{}' has {} dims", name, n) throws fsdpp::Error;
// FSDPP_CHECK_AS(ConfigError, cond, ...) throws the named fsdpp exception type.
#define FSDPP_CHECK(cond, ...)                                              \
  do {                                                                      \
    if (!(cond)) ::fsdpp::detail::throw_error<::fsdpp::Error>(__VA_ARGS__); \
  } while (0)

#define FSDPP_CHECK_AS(type, cond, ...)                                    \
  do {                                                                     \
    if (!(cond)) ::fsdpp::detail::throw_error<::fsdpp::type>(__VA_ARGS__); \
  } while (0)

#define FSDPP_THROW(type, ...) ::fsdpp::detail::throw_error<::fsdpp::type>(__VA_ARGS__)
