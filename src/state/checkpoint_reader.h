#pragma once
// Private to src/state: reading a checkpoint's data files through its index, as load_state_dict,
// fsdpp-ckpt (consolidate, inspect) and reshard do: each file opened once, each piece checked
// against its index entry (the tensor is in the file, with the entry's rows, row size and
// dtype) and against its checksum (once per piece), rows of a tensor gathered from whichever
// pieces hold them. Every error is a CheckpointError naming the file and the tensor.

#include <ATen/core/Tensor.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "checkpoint_index.h"
#include "fsdpp/state/safetensors.h"

namespace fsdpp::state::detail {

class CheckpointReader {
 public:
  // How errors name a data file: by its path (load_state_dict, in a job whose checkpoint
  // directory may be anywhere), or as the index names it (fsdpp-ckpt, which was given the
  // directory: "checksum mismatch in 'shard-1.safetensors' for tensor ...").
  enum class Naming { kPath, kIndexName };
  explicit CheckpointReader(std::filesystem::path dir, Naming naming = Naming::kPath)
      : dir_(std::move(dir)), naming_(naming) {}
  const std::filesystem::path& dir() const { return dir_; }

  // A data file of the checkpoint (a name from the index, checked by read_index).
  const SafetensorsFile& file(const std::string& name);
  // The tensor piece `pc` of entry `e` names, checked and (the first time) checksum-verified.
  at::Tensor piece(const Piece& pc, const Entry& e);
  // Rows [begin, begin + rows) of the tensor `e` describes, from whichever pieces hold them,
  // into dst (rows, row_numel); with dst undefined it only checks (coverage, checksums).
  // `only_file` restricts the pieces to one file (LOCAL). `what` names the tensor.
  void fill(const std::string& what, const Entry& e, int64_t begin, int64_t rows,
            const at::Tensor& dst, const std::string& only_file = "");
  // The whole tensor, in the entry's dtype. Its pieces must tile its rows; they and their
  // headers are checked before anything is allocated (a corrupt index gives an error, not an
  // allocation of its made-up size).
  at::Tensor assemble(const std::string& name, const Entry& e);
  // A buffer of `index`, as a fresh tensor of its shape.
  at::Tensor buffer(const CheckpointIndex& index, const std::string& name, const BufferEntry& b);

 private:
  // The piece's tensor is in its file with (rows x row_numel) elements of the entry's dtype.
  const SafetensorsFile::TensorInfo& check_header(const Piece& pc, const Entry& e);
  std::string named(const std::string& file) const;

  std::filesystem::path dir_;
  Naming naming_;
  std::map<std::string, SafetensorsFile> files_;
  std::set<std::pair<std::string, std::string>> verified_;  // (file, tensor)
};

// An entry's dtype; throws naming the tensor for one safetensors does not know.
at::ScalarType entry_dtype(const std::string& name, const Entry& e);

}  // namespace fsdpp::state::detail
