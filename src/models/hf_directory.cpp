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

at::Tensor HfSource::whole(const std::string& name) const {
  const auto s = shape(name);
  return rows(name, 0, s.empty() ? 1 : s[0]).view(s);
}

HfMemory::HfMemory(const NamedTensors& tensors) {
  for (const auto& [name, t] : tensors) {
    FSDPP_CHECK_AS(ConfigError, by_name_.emplace(name, t).second,
                   "[models] the Hugging Face checkpoint names a tensor twice ('{}')", name);
    names_.push_back(name);
  }
}

std::vector<int64_t> HfMemory::shape(const std::string& name) const {
  return by_name_.at(name).sizes().vec();
}

at::Tensor HfMemory::rows(const std::string& name, int64_t first, int64_t count) const {
  const auto& t = by_name_.at(name);
  return (t.dim() == 0 ? t.reshape({1}) : t).narrow(0, first, count).contiguous();
}

HfFiles::HfFiles(const fs::path& dir) {
  std::vector<fs::path> paths;
  if (fs::exists(dir / "model.safetensors")) {
    paths.push_back(dir / "model.safetensors");
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
    for (const auto& n : names) paths.push_back(dir / n);
  }
  for (const auto& p : paths) {
    files_.push_back(state::SafetensorsFile::open(p));
    for (const auto& name : files_.back().names()) {
      FSDPP_CHECK_AS(ConfigError, file_of_.emplace(name, files_.size() - 1).second,
                     "[models] the Hugging Face checkpoint names a tensor twice ('{}', in '{}' "
                     "and '{}')",
                     name, files_[file_of_.at(name)].path().string(), p.string());
      names_.push_back(name);
    }
  }
}

const state::SafetensorsFile& HfFiles::file(const std::string& name) const {
  return files_.at(file_of_.at(name));
}

std::vector<int64_t> HfFiles::shape(const std::string& name) const {
  return file(name).info(name).shape;
}

at::Tensor HfFiles::rows(const std::string& name, int64_t first, int64_t count) const {
  return file(name).read_rows(name, first, count);
}

NamedTensors read_hf_tensors(const fs::path& dir) {
  const HfFiles files(dir);
  NamedTensors hf;
  for (const auto& name : files.names()) hf.emplace_back(name, files.whole(name));
  return hf;
}

}  // namespace fsdpp::models::detail
