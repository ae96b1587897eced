// Offline resharding: a SHARDED (or FULL) checkpoint rewritten into the SHARDED layout of
// another number of ranks. See reshard_checkpoint in include/fsdpp/state/consolidate.h.
#include <ATen/ATen.h>

#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "checkpoint_reader.h"
#include "fsdpp/common/error.h"
#include "fsdpp/state/atomic_dir.h"
#include "fsdpp/state/consolidate.h"
#include "fsdpp/state/output_path.h"
#include "fsdpp/state/safetensors.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace fsdpp::state {
namespace {

// One tensor to rewrite: a parameter, or one optimizer state of one.
struct Item {
  std::string name;  // the tensor's name in the shard files ("w", "optim.w.exp_avg")
  const json* entry;
  json* out_entry;   // where its new pieces go in the output index
};

std::vector<int64_t> piece_shape(std::vector<int64_t> shape, int64_t rows) {
  if (shape.empty()) return {rows};
  shape[0] = rows;
  return shape;
}

void copy_file_bytes(const fs::path& from, const fs::path& to) {
  std::ifstream in(from, std::ios::binary);
  std::ofstream out(to, std::ios::binary | std::ios::trunc);
  out << in.rdbuf();
  out.flush();
  FSDPP_CHECK_AS(CheckpointError, in.good() || in.eof(), "[state] cannot read '{}'", from.string());
  FSDPP_CHECK_AS(CheckpointError, out.good(), "[state] cannot write '{}'", to.string());
}

}  // namespace

ReshardResult reshard_checkpoint(const fs::path& in, const fs::path& out, int64_t world_size,
                                 bool overwrite) {
  // Checked before anything is sized by it: a world size of 10^11 used to end in bad_alloc.
  FSDPP_CHECK_AS(CheckpointError, world_size >= 1 && world_size <= kMaxReshardWorldSize,
                 "[state] reshard: the world size must be between 1 and {}; got {}",
                 kMaxReshardWorldSize, world_size);
  // Before the input is read: an output inside it must not even get its temporary directory.
  check_output_path("reshard", out, {in}, OutputKind::kDirectory, overwrite);
  detail::CheckpointReader r(in);
  const std::string format = r.format();
  FSDPP_CHECK_AS(CheckpointError, format != "fsdpp.local",
                 "[state] reshard: '{}' is a LOCAL checkpoint: its padded shards belong to the {} "
                 "ranks it was saved on (load it there and save it SHARDED)",
                 in.string(), r.index().value("world_size", 0));
  FSDPP_CHECK_AS(CheckpointError, format == "fsdpp.sharded" || format == "fsdpp.full",
                 "[state] reshard: '{}' has format '{}'; expected fsdpp.sharded or fsdpp.full",
                 in.string(), format);

  json index;
  index["format"] = "fsdpp.sharded";
  index["version"] = 1;
  index["world_size"] = world_size;
  index["params"] = json::object();
  std::vector<Item> items;
  const json& src = r.index();
  // The output entries are filled in place, so reserve them before taking pointers.
  for (const auto& [name, e] : src.at("params").items()) index["params"][name] = json::object();
  if (src.contains("optim")) {
    index["optim"] = {{"type", src["optim"].at("type")}, {"params", json::object()}};
    for (const auto& [fqn, o] : src["optim"].at("params").items()) {
      auto& op = index["optim"]["params"][fqn];
      op["step"] = o.at("step");
      op["states"] = json::object();
      for (const auto& [k, e] : o.at("states").items()) op["states"][k] = json::object();
    }
  }
  for (const auto& [name, e] : src.at("params").items()) items.push_back({name, &e, &index["params"][name]});
  if (src.contains("optim")) {
    for (const auto& [fqn, o] : src["optim"].at("params").items()) {
      for (const auto& [k, e] : o.at("states").items()) {
        items.push_back({"optim." + fqn + "." + k, &e, &index["optim"]["params"][fqn]["states"][k]});
      }
    }
  }

  AtomicDir adir(out);
  // Rank k's rows of a tensor of dim0 rows: [k*c, k*c + rows_of(k)), as FSDPParam shards them.
  auto chunk = [&](int64_t dim0) { return (dim0 + world_size - 1) / world_size; };
  auto rows_of = [&](int64_t dim0, int64_t k) {
    return std::clamp<int64_t>(dim0 - k * chunk(dim0), 0, chunk(dim0));
  };
  // Declare every piece of every file first (the writers need their headers), then stream one
  // tensor at a time.
  std::vector<std::unique_ptr<SafetensorsWriter>> writers(static_cast<size_t>(world_size));
  auto file_name = [](int64_t k) { return fmt::format("shard-{}.safetensors", k); };
  for (const auto& it : items) {
    const auto shape = detail::entry_shape(*it.entry);
    const auto dtype = detail::entry_dtype(*it.entry, it.name);
    const int64_t dim0 = it.entry->at("dim0").get<int64_t>();
    for (int64_t k = 0; k < world_size; ++k) {
      const int64_t rows = rows_of(dim0, k);
      if (rows == 0) continue;
      auto& w = writers[static_cast<size_t>(k)];
      if (!w) {
        w = std::make_unique<SafetensorsWriter>(adir.path() / file_name(k),
                                                std::map<std::string, std::string>{{"format", "pt"}});
      }
      w->declare(it.name, dtype, piece_shape(shape, rows));
    }
  }
  ReshardResult result;
  for (const auto& it : items) {
    const json& e = *it.entry;
    const int64_t dim0 = e.at("dim0").get<int64_t>();
    const int64_t row_numel = e.at("row_numel").get<int64_t>();
    auto full = r.assemble(it.name, e);
    auto rows2d = full.view({dim0, row_numel});
    json& oe = *it.out_entry;
    oe["shape"] = e.at("shape");
    oe["dtype"] = e.at("dtype");
    oe["dim0"] = dim0;
    oe["row_numel"] = row_numel;
    oe["chunk_rows"] = chunk(dim0);
    oe["pieces"] = json::array();
    for (int64_t k = 0; k < world_size; ++k) {
      const int64_t rows = rows_of(dim0, k);
      if (rows == 0) continue;
      const int64_t begin = k * chunk(dim0);
      auto piece = rows2d.narrow(0, begin, rows).view(piece_shape(detail::entry_shape(e), rows));
      writers[static_cast<size_t>(k)]->write(it.name, piece);
      oe["pieces"].push_back({{"file", file_name(k)},
                              {"tensor", it.name},
                              {"row_begin", begin},
                              {"row_end", begin + rows},
                              {"checksum", fmt::format("{:016x}", checksum(piece))}});
    }
    ++result.tensors;
  }
  for (auto& w : writers) {
    if (!w) continue;
    w->commit();
    ++result.files;
  }
  // Buffers, verified, into buffers.safetensors.
  json bufs = {{"file", "buffers.safetensors"}, {"tensors", json::object()}};
  std::vector<std::pair<std::string, at::Tensor>> buffers;
  if (src.contains("buffers") && src["buffers"].contains("tensors")) {
    for (const auto& [name, e] : src["buffers"]["tensors"].items()) {
      auto t = r.buffer(name);
      bufs["tensors"][name] = {{"shape", t.sizes().vec()},
                               {"dtype", std::string(safetensors_dtype_name(t.scalar_type()))},
                               {"checksum", fmt::format("{:016x}", checksum(t))}};
      buffers.emplace_back(name, std::move(t));
    }
  }
  save_safetensors(adir.path() / "buffers.safetensors", buffers, {{"format", "pt"}});
  index["buffers"] = bufs;
  // Whatever else the directory holds (fsdpp-train's trainer_state.json, model_config.json).
  for (const auto& f : fs::directory_iterator(in)) {
    const std::string name = f.path().filename().string();
    if (!f.is_regular_file() || name == "index.json" || f.path().extension() == ".safetensors") continue;
    copy_file_bytes(f.path(), adir.path() / name);
  }
  {
    std::ofstream f(adir.path() / "index.json");
    f << index.dump(1) << "\n";
    FSDPP_CHECK_AS(CheckpointError, f.good(), "[state] '{}': cannot write",
                   (adir.path() / "index.json").string());
  }
  adir.commit();
  return result;
}

}  // namespace fsdpp::state
