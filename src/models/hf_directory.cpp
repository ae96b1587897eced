#include "hf_directory.h"

#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "fsdpp/state/safetensors.h"

namespace fs = std::filesystem;

namespace fsdpp::models::detail {

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  FSDPP_CHECK_AS(ConfigError, in.good(), "[models] cannot read '{}'", path.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

json parse_json(const std::string& text, const std::string& source) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    FSDPP_THROW(ConfigError, "[models] '{}' is not valid JSON: {}", source, e.what());
  }
}

std::string read_hf_config(const fs::path& dir) {
  const fs::path config = dir / "config.json";
  FSDPP_CHECK_AS(ConfigError, fs::exists(config),
                 "[models] '{}' has no config.json; expected a save_pretrained directory",
                 dir.string());
  return read_text(config);
}

NamedTensors read_hf_tensors(const fs::path& dir) {
  std::vector<fs::path> files;
  if (fs::exists(dir / "model.safetensors")) {
    files.push_back(dir / "model.safetensors");
  } else {
    const fs::path index = dir / "model.safetensors.index.json";
    FSDPP_CHECK_AS(ConfigError, fs::exists(index),
                   "[models] '{}' has neither model.safetensors nor model.safetensors.index.json "
                   "(only safetensors weights are read)", dir.string());
    const json j = parse_json(read_text(index), index.string());
    FSDPP_CHECK_AS(ConfigError, j.contains("weight_map") && j["weight_map"].is_object(),
                   "[models] '{}' has no weight_map object", index.string());
    std::set<std::string> names;
    for (const auto& [tensor, file] : j["weight_map"].items()) {
      FSDPP_CHECK_AS(ConfigError, file.is_string(), "[models] '{}': weight_map['{}'] is not a file name",
                     index.string(), tensor);
      names.insert(file.get<std::string>());
    }
    for (const auto& n : names) files.push_back(dir / n);
  }
  NamedTensors hf;
  for (const auto& f : files) {
    auto st = state::SafetensorsFile::open(f);
    for (const auto& name : st.names()) hf.emplace_back(name, st.get(name));
  }
  return hf;
}

}  // namespace fsdpp::models::detail
