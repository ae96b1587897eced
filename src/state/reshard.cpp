// Offline resharding: a SHARDED (or FULL) checkpoint rewritten into the SHARDED layout of
// another number of ranks. See reshard_checkpoint in include/fsdpp/state/consolidate.h.
#include <ATen/ATen.h>

#include <algorithm>
#include <fstream>
#include <memory>

#include "checkpoint_index.h"
#include "checkpoint_reader.h"
#include "fsdpp/common/error.h"
#include "fsdpp/state/atomic_dir.h"
#include "fsdpp/state/consolidate.h"
#include "fsdpp/state/output_path.h"
#include "fsdpp/state/safetensors.h"

namespace fs = std::filesystem;

namespace fsdpp::state {
namespace {

using namespace detail;

// One tensor to rewrite: a parameter, or one optimizer state of one.
struct Item {
  std::string name;  // the tensor's name in the shard files ("w", "optim.w.exp_avg")
  const Entry* entry;
  Entry* out;        // where its new pieces go in the output index
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
  const auto src = read_index(in);
  FSDPP_CHECK_AS(CheckpointError, src.format != kFormatLocal,
                 "[state] reshard: '{}' is a LOCAL checkpoint: its padded shards belong to the {} "
                 "ranks it was saved on (load it there and save it SHARDED)",
                 in.string(), src.world_size);
  FSDPP_CHECK_AS(CheckpointError, src.format == kFormatSharded || src.format == kFormatFull,
                 "[state] reshard: '{}' has format '{}'; expected fsdpp.sharded or fsdpp.full",
                 in.string(), src.format);
  CheckpointReader r(in, CheckpointReader::Naming::kIndexName);

  // The output index: the same tensors, new pieces. Filled in place, so sized before pointers
  // into it are taken.
  CheckpointIndex index;
  index.format = kFormatSharded;
  index.world_size = world_size;
  index.params = src.params;
  index.optim_type = src.optim_type;
  index.optim = src.optim;
  std::vector<Item> items;
  for (size_t i = 0; i < src.params.size(); ++i) {
    items.push_back({src.params[i].first, &src.params[i].second, &index.params[i].second});
  }
  for (size_t i = 0; i < src.optim.size(); ++i) {
    const auto& [fqn, o] = src.optim[i];
    for (size_t k = 0; k < o.states.size(); ++k) {
      items.push_back({optim_tensor_name(fqn, o.states[k].first), &o.states[k].second,
                       &index.optim[i].second.states[k].second});
    }
  }

  AtomicDir adir(out);
  // Rank k's rows of a tensor of dim0 rows: [k*c, k*c + rows_of(k)), as fully_shard shards them.
  auto chunk = [&](int64_t dim0) { return (dim0 + world_size - 1) / world_size; };
  auto rows_of = [&](int64_t dim0, int64_t k) {
    return std::clamp<int64_t>(dim0 - k * chunk(dim0), 0, chunk(dim0));
  };
  // Declare every piece of every file first (the writers need their headers), then stream one
  // tensor at a time.
  std::vector<std::unique_ptr<SafetensorsWriter>> writers(static_cast<size_t>(world_size));
  for (const auto& it : items) {
    const auto dtype = entry_dtype(it.name, *it.entry);
    for (int64_t k = 0; k < world_size; ++k) {
      const int64_t rows = rows_of(it.entry->dim0, k);
      if (rows == 0) continue;
      auto& w = writers[static_cast<size_t>(k)];
      if (!w) {
        w = std::make_unique<SafetensorsWriter>(adir.path() / rank_file(false, k),
                                                std::map<std::string, std::string>{{"format", "pt"}});
      }
      w->declare(it.name, dtype, piece_shape(it.entry->shape, rows));
    }
  }
  ReshardResult result;
  for (const auto& it : items) {
    const Entry& e = *it.entry;
    auto full = r.assemble(it.name, e);
    auto rows2d = full.view({e.dim0, e.row_numel});
    Entry& oe = *it.out;
    oe.chunk_rows = chunk(e.dim0);
    oe.pieces.clear();
    for (int64_t k = 0; k < world_size; ++k) {
      const int64_t rows = rows_of(e.dim0, k);
      if (rows == 0) continue;
      const int64_t begin = k * chunk(e.dim0);
      auto piece = rows2d.narrow(0, begin, rows).view(piece_shape(e.shape, rows));
      writers[static_cast<size_t>(k)]->write(it.name, piece);
      oe.pieces.push_back({rank_file(false, k), it.name, begin, begin + rows, checksum(piece)});
    }
    ++result.tensors;
  }
  for (auto& w : writers) {
    if (!w) continue;
    w->commit();
    ++result.files;
  }
  // Buffers, verified, into buffers.safetensors.
  index.buffers_file = kBuffersFile;
  std::vector<std::pair<std::string, at::Tensor>> buffers;
  for (const auto& [name, b] : src.buffers) {
    auto t = r.buffer(src, name, b);
    index.buffers.emplace_back(name, BufferEntry::of(t));
    buffers.emplace_back(name, std::move(t));
  }
  save_safetensors(adir.path() / kBuffersFile, buffers, {{"format", "pt"}});
  // Whatever else the directory holds (fsdpp-train's trainer_state.json, model_config.json).
  for (const auto& f : fs::directory_iterator(in)) {
    const std::string name = f.path().filename().string();
    if (!f.is_regular_file() || name == kIndexFile || f.path().extension() == ".safetensors") continue;
    copy_file_bytes(f.path(), adir.path() / name);
  }
  write_index(adir.path(), index, KeyOrder::kSorted);
  adir.commit();
  return result;
}

}  // namespace fsdpp::state
