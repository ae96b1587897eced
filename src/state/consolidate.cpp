#include "fsdpp/state/consolidate.h"

#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "fsdpp/common/error.h"
#include "fsdpp/state/safetensors.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace fsdpp::state {
namespace {

json read_json(const fs::path& path) {
  std::ifstream in(path);
  FSDPP_CHECK_AS(CheckpointError, in.good(), "[state] cannot read '{}'", path.string());
  try {
    return json::parse(in);
  } catch (const std::exception& e) {
    FSDPP_THROW(CheckpointError, "[state] '{}' is not valid JSON: {}", path.string(), e.what());
  }
}

json read_index(const fs::path& dir) {
  FSDPP_CHECK_AS(CheckpointError, fs::is_directory(dir), "[state] '{}' is not a checkpoint directory",
                 dir.string());
  const fs::path index = dir / "index.json";
  FSDPP_CHECK_AS(CheckpointError, fs::exists(index),
                 "[state] '{}' has no index.json; is it an fsdpp checkpoint?", dir.string());
  return read_json(index);
}

std::vector<int64_t> shape_of(const json& e) { return e.at("shape").get<std::vector<int64_t>>(); }

at::ScalarType dtype_of(const json& e, const std::string& name) {
  const auto s = e.at("dtype").get<std::string>();
  auto t = safetensors_dtype_from_name(s);
  FSDPP_CHECK_AS(CheckpointError, t.has_value(), "[state] tensor '{}' has unknown dtype '{}'", name, s);
  return *t;
}

uint64_t parse_checksum(const json& piece) {
  return std::stoull(piece.at("checksum").get<std::string>(), nullptr, 16);
}

// Opens each safetensors file of the checkpoint once.
class Files {
 public:
  explicit Files(fs::path dir) : dir_(std::move(dir)) {}
  SafetensorsFile& at(const std::string& name) {
    auto it = files_.find(name);
    if (it == files_.end()) {
      const fs::path p = dir_ / name;
      FSDPP_CHECK_AS(CheckpointError, fs::exists(p), "[state] checkpoint file '{}' is missing",
                     p.string());
      it = files_.emplace(name, std::make_unique<SafetensorsFile>(SafetensorsFile::open(p))).first;
    }
    return *it->second;
  }

 private:
  fs::path dir_;
  std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;
};

at::Tensor verified(Files& files, const json& piece, const std::string& tensor_name) {
  const auto file = piece.at("file").get<std::string>();
  const auto stored = piece.value("tensor", tensor_name);
  auto& f = files.at(file);
  FSDPP_CHECK_AS(CheckpointError, f.contains(stored), "[state] '{}' has no tensor '{}'", file, stored);
  auto t = f.get(stored);
  FSDPP_CHECK_AS(CheckpointError, checksum(t) == parse_checksum(piece),
                 "[state] checksum mismatch in '{}' for tensor '{}': the file is corrupted", file,
                 stored);
  return t;
}

// One parameter at full size from its row pieces.
at::Tensor assemble(Files& files, const std::string& name, const json& e) {
  const auto shape = shape_of(e);
  const auto dtype = dtype_of(e, name);
  const int64_t dim0 = e.at("dim0").get<int64_t>();
  const int64_t row_numel = e.at("row_numel").get<int64_t>();
  auto full = at::empty(shape, at::TensorOptions().dtype(dtype));
  auto rows = full.view({dim0, row_numel});
  std::vector<bool> covered(static_cast<size_t>(dim0), false);
  for (const auto& piece : e.at("pieces")) {
    const int64_t b = piece.at("row_begin").get<int64_t>();
    const int64_t end = piece.at("row_end").get<int64_t>();
    FSDPP_CHECK_AS(CheckpointError, 0 <= b && b < end && end <= dim0,
                   "[state] tensor '{}': piece rows [{}, {}) are outside [0, {})", name, b, end, dim0);
    auto t = verified(files, piece, name);
    FSDPP_CHECK_AS(CheckpointError, t.numel() == (end - b) * row_numel && t.scalar_type() == dtype,
                   "[state] tensor '{}': piece rows [{}, {}) hold {} {} elements; expected {} {}",
                   name, b, end, t.numel(), c10::toString(t.scalar_type()), (end - b) * row_numel,
                   c10::toString(dtype));
    for (int64_t r = b; r < end; ++r) {
      FSDPP_CHECK_AS(CheckpointError, !covered[r], "[state] tensor '{}': row {} is in two pieces", name, r);
      covered[r] = true;
    }
    rows.narrow(0, b, end - b).copy_(t.reshape({end - b, row_numel}));
  }
  for (int64_t r = 0; r < dim0; ++r) {
    FSDPP_CHECK_AS(CheckpointError, covered[r], "[state] tensor '{}': row {} is in no piece", name, r);
  }
  return full;
}

}  // namespace

std::string describe_checkpoint(const fs::path& dir) {
  const json index = read_index(dir);
  std::ostringstream out;
  const auto format = index.value("format", std::string("?"));
  out << "checkpoint " << dir.string() << "\n"
      << "  format " << format << ", saved on " << index.value("world_size", 0) << " rank(s)\n";
  int64_t numel = 0;
  out << "  parameters:\n";
  for (const auto& [name, e] : index.at("params").items()) {
    const auto shape = shape_of(e);
    int64_t n = 1;
    for (auto d : shape) n *= d;
    numel += n;
    std::string files;
    for (const auto& p : e.at("pieces")) {
      files += fmt::format(" {}[{}:{}]", p.at("file").get<std::string>(), p.at("row_begin").get<int64_t>(),
                           p.at("row_end").get<int64_t>());
    }
    out << fmt::format("    {} {} {}  ->{}\n", name, fmt::join(shape, "x"), e.at("dtype").get<std::string>(),
                       files);
  }
  out << fmt::format("  {} parameter tensors, {} elements\n", index.at("params").size(), numel);
  if (index.contains("buffers")) {
    out << fmt::format("  {} buffers in {}\n", index["buffers"].at("tensors").size(),
                       index["buffers"].value("file", std::string("?")));
  }
  if (index.contains("optim")) {
    out << fmt::format("  optimizer {} with state for {} parameters\n",
                       index["optim"].value("type", std::string("?")), index["optim"].at("params").size());
  }
  if (fs::exists(dir / "trainer_state.json")) {
    out << "  trainer_state.json: " << read_json(dir / "trainer_state.json").dump() << "\n";
  }
  return out.str();
}

int64_t consolidate_checkpoint(const fs::path& dir, const fs::path& out) {
  const json index = read_index(dir);
  const auto format = index.value("format", std::string());
  FSDPP_CHECK_AS(CheckpointError, format == "fsdpp.sharded" || format == "fsdpp.full",
                 "[state] '{}' is a {} checkpoint; consolidate reads fsdpp.sharded and fsdpp.full "
                 "(LOCAL checkpoints hold padded shards: load one on its world size and save it "
                 "SHARDED)",
                 dir.string(), format.empty() ? "?" : format);
  Files files(dir);
  // Declare everything first so the writer knows the header; then stream one tensor at a time.
  SafetensorsWriter writer(out, {{"format", "pt"}});
  const auto& params = index.at("params");
  json buffers = index.contains("buffers") ? index["buffers"] : json::object();
  for (const auto& [name, e] : params.items()) writer.declare(name, dtype_of(e, name), shape_of(e));
  if (buffers.contains("tensors")) {
    for (const auto& [name, e] : buffers["tensors"].items()) writer.declare(name, dtype_of(e, name), shape_of(e));
  }
  int64_t written = 0;
  for (const auto& [name, e] : params.items()) {
    writer.write(name, assemble(files, name, e));
    ++written;
  }
  if (buffers.contains("tensors")) {
    const auto file = buffers.at("file").get<std::string>();
    for (const auto& [name, e] : buffers["tensors"].items()) {
      json piece = e;
      piece["file"] = file;
      writer.write(name, verified(files, piece, name));
      ++written;
    }
  }
  writer.commit();
  return written;
}

}  // namespace fsdpp::state
