#include "stack_traces.h"

#include <c10/util/Logging.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <string_view>

namespace fsdpp::dist::detail {

void hide_cpp_stack_traces_unless_asked() {
  const char* show = std::getenv("TORCH_SHOW_CPP_STACKTRACES");
  if (show != nullptr && std::string_view(show) == "1") return;
  c10::SetStackTraceFetcher(std::function<std::string()>([] { return std::string(); }));
}

}  // namespace fsdpp::dist::detail
