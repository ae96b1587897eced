#include "fsdpp/common/exit_code.h"

#include <cstdio>
#include <exception>

#include "fsdpp/common/error.h"

namespace fsdpp {

int exit_code_of(const std::function<int()>& body) {
  try {
    return body();
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return kExitConfigError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return kExitError;
  }
}

}  // namespace fsdpp
