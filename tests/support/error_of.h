#pragma once
// The message of the error a call throws, for tests that check what it says.

#include <functional>
#include <string>

#include "fsdpp/common/error.h"

namespace fsdpp::test {

// The message of the ConfigError that f throws; "" when it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace fsdpp::test
