// libFuzzer target: YAML text -> TrainConfig (fsdpp-train's config parser).
// Lines starting with "#= " are also applied as key=value overrides (they are YAML comments, so
// the same input exercises both). A config that parses must survive to_yaml() -> parse ->
// to_yaml() unchanged, as config.h promises.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "fsdpp/train/config.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> overrides;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("#= ", 0) == 0) overrides.push_back(line.substr(3));
  }
  fsdpp::fuzz::expect_clear_error([&] {
    const auto cfg = fsdpp::train::TrainConfig::from_yaml_string(text, overrides, "<fuzz>");
    const std::string yaml = cfg.to_yaml();
    std::string again;
    try {
      again = fsdpp::train::TrainConfig::from_yaml_string(yaml, {}, "<round trip>").to_yaml();
    } catch (const fsdpp::Error& e) {
      fsdpp::fuzz::finding("to_yaml() gave a config that does not parse back", e.what() + ("\n" + yaml));
    }
    if (again != yaml) fsdpp::fuzz::finding("to_yaml() round trip changed the config", yaml + "\n--- became ---\n" + again);
  });
  return 0;
}
