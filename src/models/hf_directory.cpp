#include "hf_directory.h"

#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include <fmt/ranges.h>

#include "fsdpp/state/atomic_dir.h"
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

void check_model_type(const json& j, const std::string& source, const std::string& expected) {
  FSDPP_CHECK_AS(ConfigError, j.is_object(), "[models] '{}' is not a JSON object", source);
  const std::string type = field<std::string>(j, "model_type", source, expected);
  FSDPP_CHECK_AS(ConfigError, type == expected,
                 "[models] '{}': model_type '{}' is not supported here; expected '{}'", source,
                 type, expected);
  const std::string act = field<std::string>(j, "hidden_act", source, std::string("silu"));
  FSDPP_CHECK_AS(ConfigError, act == "silu",
                 "[models] '{}': hidden_act '{}' is not supported; expected 'silu'", source, act);
}

double read_rope_theta(const json& j, const std::string& source) {
  double theta = field<double>(j, "rope_theta", source, 10000.0);
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    const auto& rp = j["rope_parameters"];
    theta = field<double>(rp, "rope_theta", source + " rope_parameters", theta);
    const std::string rt = field<std::string>(rp, "rope_type", source + " rope_parameters",
                                              std::string("default"));
    FSDPP_CHECK_AS(ConfigError, rt == "default",
                   "[models] '{}': rope_parameters.rope_type '{}' (RoPE scaling) is not "
                   "supported; expected 'default'", source, rt);
  }
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    FSDPP_THROW(ConfigError, "[models] '{}': rope_scaling {} is not supported; expected null",
                source, j["rope_scaling"].dump());
  }
  return theta;
}

void write_decoder_keys(json& j, double rope_theta) {
  j["rope_theta"] = rope_theta;                                                   // transformers 4
  j["rope_parameters"] = {{"rope_theta", rope_theta}, {"rope_type", "default"}};  // 5
  j["rope_scaling"] = nullptr;
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
}

void check_shape(const std::string& what, const std::vector<int64_t>& got,
                 const std::vector<int64_t>& want) {
  FSDPP_CHECK_AS(ConfigError, got == want, "[models] '{}' has shape {} but the config gives {}",
                 what, got, want);
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

namespace {

int64_t bytes_of(const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

void write_text(const fs::path& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
  f.close();
  FSDPP_CHECK_AS(CheckpointError, f.good(), "[models] cannot write '{}'", path.string());
}

// Writes `tensors` (HF names, in order) as model.safetensors, or, with max_shard_bytes > 0, as
// save_pretrained's numbered shards and their index. Returns the number of files.
int64_t write_hf_tensors(const fs::path& dir, const NamedTensors& tensors, int64_t max_shard_bytes) {
  const std::map<std::string, std::string> meta = {{"format", "pt"}};
  if (max_shard_bytes <= 0) {
    state::save_safetensors(dir / "model.safetensors", tensors, meta);
    return 1;
  }
  // Greedy in the model's order, as transformers' split_torch_state_dict_into_shards does.
  std::vector<NamedTensors> shards(1);
  int64_t in_shard = 0, total = 0;
  for (const auto& nt : tensors) {
    const int64_t b = bytes_of(nt.second);
    if (!shards.back().empty() && in_shard + b > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(nt);
    in_shard += b;
    total += b;
  }
  json index;
  index["metadata"] = {{"total_size", total}};
  index["weight_map"] = json::object();
  const auto n = static_cast<int64_t>(shards.size());
  for (int64_t k = 0; k < n; ++k) {
    const std::string file = fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, n);
    state::save_safetensors(dir / file, shards[static_cast<size_t>(k)], meta);
    for (const auto& [name, t] : shards[static_cast<size_t>(k)]) index["weight_map"][name] = file;
  }
  write_text(dir / "model.safetensors.index.json", index.dump(2) + "\n");
  return n;
}

}  // namespace

int64_t write_hf_directory(const fs::path& dir, const NamedTensors& hf,
                           const std::map<std::string, std::string>& files,
                           int64_t max_shard_bytes) {
  state::AtomicDir adir(dir);
  const int64_t n = write_hf_tensors(adir.path(), hf, max_shard_bytes);
  for (const auto& [name, bytes] : files) write_text(adir.path() / name, bytes);
  adir.commit();
  return n;
}

}  // namespace fsdpp::models::detail
