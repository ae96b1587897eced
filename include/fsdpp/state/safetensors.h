#pragma once
// The Hugging Face safetensors format, read and written without Python:
//
//   [8 bytes: N, little-endian u64][N bytes: JSON header, space-padded][data area]
//   header = {"__metadata__": {str: str},                      (optional)
//             name: {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
//
// Offsets are relative to the data area; the tensors tile it exactly (no holes, no overlap,
// nothing after the last one), which is also what the Rust/Python reader demands, so every file
// this reader accepts loads in Python and vice versa.
//
//   fsdpp::state::save_safetensors("model.safetensors", {{"w", w}, {"b", b}}, {{"step", "10"}});
//   auto f = fsdpp::state::SafetensorsFile::open("model.safetensors");   // reads the header
//   at::Tensor w2 = f.get("w");             // a copy
//   at::Tensor r = f.read_rows("w", 1, 1);  // rows [1, 2) of w: only their bytes are read
//   at::Tensor b2 = f.view("b");            // zero-copy, over a mapping of b's bytes
//
// Everything that goes wrong (I/O, a malformed or truncated file) throws fsdpp::CheckpointError
// with a "[state] '<file>': ..." message that names the tensor or header field.

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fsdpp::state {

// "F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL".
// Throws CheckpointError for a dtype safetensors (as supported here) has no name for.
std::string_view safetensors_dtype_name(at::ScalarType dtype);
// The inverse; nullopt for an unknown name.
std::optional<at::ScalarType> safetensors_dtype_from_name(std::string_view name);

// Writes `tensors` (any device, any strides: copied to CPU-contiguous one at a time) and
// `metadata` to `path` atomically: a temporary file beside it, fsync, rename, fsync of the
// directory. A reader never sees a half-written file under `path`. Duplicate names, an
// undefined tensor or an unsupported dtype throw before anything is renamed.
void save_safetensors(const std::filesystem::path& path,
                      const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// A streaming writer for files too big to stage in memory: it holds at most one tensor's
// CPU-contiguous copy at a time.
//
//   SafetensorsWriter w(path, {{"format", "pt"}});
//   for (auto& [name, t] : params) w.declare(name, t.scalar_type(), t.sizes());
//   for (auto& [name, t] : params) w.write(name, t);   // in declared order, or any order
//   w.commit();                                         // fsync + rename; else nothing appears
//
// All tensors are declared first so that the header (and so every offset) is known before the
// first byte of data. The data area is laid out by item size, largest first (ties keep the
// declared order), the same rule the Python writer uses: every tensor then starts at a multiple
// of its item size and SafetensorsFile::view() can map it without copying. write() puts each
// tensor at its own offset, so the order of write() calls does not matter; each declared tensor
// must be written exactly once before commit(). Destroying the writer without commit() removes
// the temporary file.
class SafetensorsWriter {
 public:
  explicit SafetensorsWriter(std::filesystem::path path,
                             std::map<std::string, std::string> metadata = {});
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  void declare(const std::string& name, at::ScalarType dtype, c10::IntArrayRef shape);
  // `tensor` must have the declared dtype and shape; its device and strides are free.
  void write(const std::string& name, const at::Tensor& tensor);
  void commit();

  const std::filesystem::path& path() const { return path_; }

 private:
  struct Entry {
    std::string name;
    at::ScalarType dtype;
    std::vector<int64_t> shape;
    uint64_t nbytes = 0;
    uint64_t begin = 0;  // offset in the data area, set when the header is written
    bool written = false;
  };
  void write_header();

  std::filesystem::path path_;
  std::filesystem::path tmp_path_;
  std::map<std::string, std::string> metadata_;
  std::vector<Entry> entries_;            // declared order
  std::map<std::string, size_t> index_;   // name -> entries_ index
  int fd_ = -1;
  uint64_t data_start_ = 0;  // 8 + header length, once the header is written
  bool header_written_ = false;
  bool committed_ = false;
};

// A safetensors file, its header fully validated by open(), which reads only the header: the
// tensors' bytes are read when asked for, so that a rank loading its rows of a model holds
// those rows, not the file. Copies share the open file; a view() tensor keeps its own mapping.
class SafetensorsFile {
 public:
  struct TensorInfo {
    at::ScalarType dtype;
    std::vector<int64_t> shape;
    uint64_t data_begin = 0;  // byte offsets in the data area
    uint64_t data_end = 0;
    uint64_t nbytes() const { return data_end - data_begin; }
  };

  // Checks: the header length against the file size, the header is JSON (one object, no
  // duplicate keys), every entry has exactly a known dtype, a shape of non-negative integers and
  // two data_offsets that lie in the data area and match numel * item size, the entries tile the
  // data area with no overlap, hole or trailing bytes, and __metadata__ maps strings to strings.
  static SafetensorsFile open(const std::filesystem::path& path);

  const std::filesystem::path& path() const;
  // In file (data offset) order, which is also the cheapest order to read them in.
  const std::vector<std::string>& names() const;
  bool contains(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const;
  const TensorInfo& info(const std::string& name) const;

  // A fresh CPU tensor with the data copied out of the file.
  at::Tensor get(const std::string& name) const;
  // Rows [first, first + rows) along dim 0 (a 0-dim tensor is one row): a fresh CPU tensor of the
  // tensor's shape with dim 0 `rows`, read from the file without the rest. Throws
  // CheckpointError for rows outside the tensor.
  at::Tensor read_rows(const std::string& name, int64_t first, int64_t rows) const;
  // A CPU tensor over a mapping of the tensor's own bytes, which it keeps alive (the file may
  // be closed). The mapping is private (copy-on-write): writing to a view never changes the
  // file, nor another view. Throws if the tensor's data is not aligned to its item size (only
  // possible in a file from another writer); use get() then.
  at::Tensor view(const std::string& name) const;

  struct Impl;

 private:
  explicit SafetensorsFile(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// XXH3-64 of the tensor's bytes in contiguous (row-major) order, whatever its device or strides:
// equal tensors of equal dtype give equal checksums. For checkpoint indexes, which record it per
// shard and check it on load.
uint64_t checksum(const at::Tensor& tensor);

}  // namespace fsdpp::state
