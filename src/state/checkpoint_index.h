#pragma once
// Private to src/state: a checkpoint's index.json, the one description of the format that
// save, load, the async snapshot, consolidate and reshard all read and write
// (docs/state-dicts.md shows a whole file):
//
//   {"format": "fsdpp.sharded", "version": 1, "world_size": 2,
//    "params": {"<fqn>": ENTRY, ...},
//    "optim": {"type": "AdamW", "params": {"<fqn>": {"step": 3, "states": {"exp_avg": ENTRY}}}},
//    "buffers": {"file": "buffers.safetensors",
//                "tensors": {"<name>": {"shape": [..], "dtype": "F32", "checksum": "<hex>"}}}}
//   ENTRY = {"shape": [..], "dtype": "F32", "dim0": D, "row_numel": R, "chunk_rows": C,
//            "pieces": [{"file": F, "tensor": T, "row_begin": B, "row_end": E,
//                        "checksum": "<16 hex digits: XXH3-64 of the piece's bytes>"}]}
//
// A tensor is D rows of R elements (a 0-dim one is one row); each piece holds rows [B, E) of it
// as tensor T of file F. SHARDED pieces tile the rows; FULL has one piece per tensor; LOCAL
// pieces are whole padded shards, [0, C) in every rank's file.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fsdpp/state/state_dict.h"

namespace fsdpp::state::detail {

inline constexpr const char* kIndexFile = "index.json";
inline constexpr const char* kModelFile = "model.safetensors";
inline constexpr const char* kOptimFile = "optim.safetensors";
inline constexpr const char* kBuffersFile = "buffers.safetensors";
inline constexpr const char* kFormatSharded = "fsdpp.sharded";
inline constexpr const char* kFormatFull = "fsdpp.full";
inline constexpr const char* kFormatLocal = "fsdpp.local";
// The index format versions this build reads. fsdpp has only ever written version 1; an index
// without "version" is read as 1.
inline constexpr int kIndexVersion = 1;

const char* format_name(StateDictType type);
// shard-<rank>.safetensors (SHARDED), local-<rank>.safetensors (LOCAL).
std::string rank_file(bool local, int64_t rank);
// How an optimizer state's tensor is named in the files: "optim.<fqn>.<state>", and its step in
// a FULL checkpoint's optim.safetensors: "optim.<fqn>.step".
std::string optim_tensor_name(const std::string& fqn, const std::string& state);
std::string optim_step_name(const std::string& fqn);
std::string checksum_hex(uint64_t sum);  // 16 lower-case hex digits

// Entries in the order of the file (a read index: sorted by name).
template <typename T>
using Named = std::vector<std::pair<std::string, T>>;
template <typename T>
const T* find(const Named<T>& entries, const std::string& name) {
  for (const auto& [n, e] : entries) {
    if (n == name) return &e;
  }
  return nullptr;
}

struct Piece {
  std::string file, tensor;
  int64_t row_begin = 0, row_end = 0;
  std::optional<uint64_t> checksum;  // always in an index; none in a bare model.safetensors
};

struct Entry {
  std::vector<int64_t> shape;
  std::string dtype;  // safetensors' name ("F32"); may be empty in a read index
  int64_t dim0 = 1, row_numel = 1;
  std::optional<int64_t> chunk_rows;  // rows per rank when saved
  std::vector<Piece> pieces;
  // A tensor held whole by one piece (chunk_rows = dim0).
  static Entry whole(std::vector<int64_t> shape, std::string dtype, std::string file,
                     std::string tensor, std::optional<uint64_t> checksum);
  int64_t numel() const { return dim0 * row_numel; }
};

struct BufferEntry {
  std::vector<int64_t> shape;
  std::string dtype;
  std::optional<uint64_t> checksum;
  static BufferEntry of(const at::Tensor& t);  // its shape, dtype and checksum
};

struct OptimEntry {
  int64_t step = 0;
  Named<Entry> states;  // by optim::state_names() entry
};

struct CheckpointIndex {
  std::string format;  // kFormat*; empty when the file has none
  int64_t world_size = 0;
  Named<Entry> params;
  std::optional<std::string> buffers_file;  // the "buffers" section, when there is one
  Named<BufferEntry> buffers;
  std::optional<std::string> optim_type;  // the "optim" section, when there is one
  Named<OptimEntry> optim;

  // A buffer as an entry of its own: every row in one piece of buffers_file.
  Entry buffer_entry(const std::string& name, const BufferEntry& b) const;
};

// Reads and checks DIR/index.json: a regular file (a directory would read as empty text, a FIFO
// block forever), JSON, a version this build reads, every field fsdpp writes of the right type
// (a piece's "tensor" defaults to its entry's name), each entry consistent (sizes >= 0 whose
// product fits in 64 bits, dim0 x row_numel = the shape's elements, pieces inside [0, dim0)),
// file names inside the directory, checksums hexadecimal. Throws CheckpointError naming the
// index file.
CheckpointIndex read_index(const std::filesystem::path& dir);

// How write_index orders an object's keys: as this header lists them (save_state_dict and the
// async save), or sorted (write_full_checkpoint and reshard_checkpoint have always written them
// so). Readers do not care; the bytes of a checkpoint stay what they were.
enum class KeyOrder { kAsListed, kSorted };
// Writes DIR/index.json (one space of indent, a newline at the end).
void write_index(const std::filesystem::path& dir, const CheckpointIndex& index,
                 KeyOrder order = KeyOrder::kAsListed);

// The pieces of `e` must cover its rows exactly once (SHARDED and FULL; LOCAL pieces overlap).
void check_rows_tiled(const std::string& name, const Entry& e);

// `path` must be a regular file (follows symlinks); `what` names it in the error.
void require_regular_file(const std::filesystem::path& path, const char* what);

// Files other than index.json that go into the directory before it is committed (fsdpp-train's
// trainer_state.json): plain names, written whole.
void write_extra_files(const std::filesystem::path& dir,
                       const std::map<std::string, std::string>& files);

}  // namespace fsdpp::state::detail
