#pragma once
// Private to src/state: reading a checkpoint directory offline (no model, no process group),
// as fsdpp-ckpt does: its index, its files (each opened once), every piece checked against
// its checksum, and whole tensors assembled from their row pieces.

#include <ATen/core/Tensor.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fsdpp/state/safetensors.h"

namespace fsdpp::state::detail {

nlohmann::json read_json_file(const std::filesystem::path& path);

class CheckpointReader {
 public:
  // Reads DIR/index.json; throws CheckpointError when DIR is not an fsdpp checkpoint.
  explicit CheckpointReader(std::filesystem::path dir);

  const std::filesystem::path& dir() const { return dir_; }
  const nlohmann::json& index() const { return index_; }
  std::string format() const;  // "fsdpp.sharded", "fsdpp.full", "fsdpp.local"

  SafetensorsFile& file(const std::string& name);
  // The tensor a piece names, its checksum verified (error naming the file and tensor).
  at::Tensor piece(const nlohmann::json& piece, const std::string& tensor_name);
  // A tensor at full size from the row pieces of its index entry; checks that the pieces lie
  // inside the tensor and cover every row exactly once.
  at::Tensor assemble(const std::string& name, const nlohmann::json& entry);
  // A buffer: the index's "buffers" entry for it.
  at::Tensor buffer(const std::string& name);

 private:
  std::filesystem::path dir_;
  nlohmann::json index_;
  std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;
};

std::vector<int64_t> entry_shape(const nlohmann::json& e);
at::ScalarType entry_dtype(const nlohmann::json& e, const std::string& name);

}  // namespace fsdpp::state::detail
