#pragma once
// Private to src/state: what a rank contributes to a checkpoint, read from fsdp's public view of
// the sharded parameters (fsdpp/fsdp/sharded_param.h) and the optimizer-state adapter
// (fsdpp/optim/optimizer_state.h), and the index entries made from it. Shared by the
// synchronous save (save.cpp), the asynchronous one (async_save.cpp) and load (load.cpp).

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint_index.h"
#include "fsdpp/fsdp/sharded_param.h"
#include "fsdpp/optim/optimizer_state.h"

namespace torch::optim {
class Optimizer;
}

namespace fsdpp::state::detail {

using optim::OptimizerKind;
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// The parameters of `root` (the module given last to fully_shard), between steps. However they
// are placed, a checkpoint stores rows of the whole tensor (ShardedParam::row_begin ...): a
// parameter that tensor parallelism cut along another dim is gathered along it first.
std::vector<ShardedParam> model_params(torch::nn::Module& root);
// The optimizer's kind; nullopt for no optimizer. Throws for one the adapter does not know.
std::optional<OptimizerKind> optimizer_kind_of(torch::optim::Optimizer* optimizer);

// A parameter's dim-0 rows: dim0 rows of row_numel elements (of the whole parameter), this
// rank's tensor holding chunk_rows of them, own_rows of which from own_begin (the rest is
// padding).
struct Rows {
  int64_t dim0 = 1, row_numel = 1, chunk_rows = 1;
  int64_t own_begin = 0, own_rows = 1;
};
Rows rows_of(const ShardedParam& p);
// The parameter's shape with `rows` rows (a 0-dim parameter's piece is 1-D).
std::vector<int64_t> piece_shape(const ShardedParam& p, int64_t rows);

// Every tensor a rank contributes, in the same order on every rank: per parameter the
// parameter, then (with an optimizer) each of optim::state_names(kind).
struct Record {
  const ShardedParam* param = nullptr;
  std::string state;  // "" for the parameter
  at::Tensor shard;   // (chunk_rows, rest...) padded shard; undefined when absent
  // The shard's rows whole along dims past 0 (gathered where tensor parallelism cut them, see
  // gather_record_rows): what SHARDED and LOCAL saves write. Undefined when `shard` is.
  at::Tensor rows;
  int64_t step = 0;
  std::string name() const;  // the tensor's name in the files
};
std::vector<Record> make_records(const std::vector<ShardedParam>& params,
                                 torch::optim::Optimizer* optimizer,
                                 std::optional<OptimizerKind> kind);

// Fills every record's `rows`: the shard itself, or for a parameter split along a dim past 0 the
// shard gathered along it (collective over those groups, in record order on every rank).
void gather_record_rows(std::vector<Record>& records);
// The reverse on load: this rank's part of `rows` (whole-width rows read from a checkpoint, as
// many as it reads) into the first rows of `dst`, laid out like the parameter's local shard.
void copy_rows_into(const ShardedParam& p, const at::Tensor& rows, const at::Tensor& dst);

// What the index says about one record, copied out of the model so that an asynchronous save
// can build the index after the model has moved on.
struct RecordMeta {
  std::string fqn, state, name;
  std::vector<int64_t> shape;
  Rows rows;
  at::ScalarType dtype = at::kFloat;
  int64_t step = 0;
  bool defined = false;
};
std::vector<RecordMeta> metas_of(const std::vector<Record>& records);

// The rows of a record that this rank writes in a SHARDED or LOCAL save (t undefined: none):
// SHARDED the rows the shard holds without padding (one rank per row range: replica 0, the
// first of each group that splits the rows), LOCAL the padded shard's rows.
struct OwnPiece {
  at::Tensor t;
  int64_t begin = 0, end = 0;
};
OwnPiece own_piece(const Record& r, bool local);

// A rank's report of what it wrote, one row of kReportFields per record: present, row_begin,
// row_end, checksum, step. Rank 0 builds a SHARDED or LOCAL index from every rank's.
inline constexpr int kReportFields = 5;
void set_report(at::TensorAccessor<int64_t, 1> row, const OwnPiece& piece, uint64_t sum, int64_t step);

// The model's buffers that a save writes (defined, and not skipped).
NamedTensors model_buffers(torch::nn::Module& root, const std::function<bool(const std::string&)>& skip);

// Gathers every unit's parameters, then each kind of its optimizer state, to full size, one
// unit at a time, and hands each full tensor to sink(is_optim, name, tensor) on every rank (the
// tensor is only valid during the call). Collective over the units' shard groups.
void gather_full_records(const std::vector<Record>& records,
                         const std::function<void(bool, const std::string&, const at::Tensor&)>& sink);
// The optimizer steps of a FULL save: one 0-dim I64 tensor optim_step_name(fqn) per parameter
// with state, in record order.
NamedTensors full_steps(const std::vector<RecordMeta>& metas);

// Index contents.
CheckpointIndex new_index(StateDictType type, int64_t world_size, std::optional<OptimizerKind> kind);
// A FULL index: one piece per tensor, the whole of it, with the checksums the writer computed.
void add_full_entries(CheckpointIndex& index, const std::vector<RecordMeta>& metas,
                      const std::map<std::string, uint64_t>& sums);
// A SHARDED or LOCAL index from every rank's report, (world, records, kReportFields).
void add_sharded_entries(CheckpointIndex& index, const std::vector<RecordMeta>& metas, bool local,
                         const at::Tensor& reports);
void add_buffers(CheckpointIndex& index, const NamedTensors& buffers, const std::string& file);

}  // namespace fsdpp::state::detail
