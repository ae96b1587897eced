// What a rank contributes to a checkpoint, and the index entries made from it. See records.h.
#include "records.h"

#include <torch/optim/optimizer.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "fsdpp/common/error.h"
#include "fsdpp/state/safetensors.h"

namespace fsdpp::state::detail {

std::vector<ShardedParam> model_params(torch::nn::Module& root) {
  auto params = sharded_params(root, "a state dict");
  for (const auto& p : params) {
    FSDPP_CHECK_AS(CheckpointError, p.at_rest,
                   "[state] parameter '{}' is unsharded right now; save and load state dicts "
                   "between steps, not inside forward or backward", p.fqn);
  }
  return params;
}

std::optional<OptimizerKind> optimizer_kind_of(torch::optim::Optimizer* optimizer) {
  if (!optimizer) return std::nullopt;
  auto kind = optim::optimizer_kind(*optimizer);
  FSDPP_CHECK_AS(CheckpointError, kind.has_value(),
                 "[state] optimizer state dicts support {}; got another optimizer",
                 optim::supported_optimizers());
  return kind;
}

Rows rows_of(const ShardedParam& p) {
  Rows r;
  int64_t numel = 1;
  for (auto d : p.global_shape) numel *= d;
  r.dim0 = p.global_shape.empty() ? 1 : p.global_shape[0];
  r.row_numel = r.dim0 == 0 ? 0 : numel / r.dim0;
  r.chunk_rows = p.chunk_rows();
  r.own_begin = p.row_begin();
  r.own_rows = p.own_rows();
  return r;
}

std::vector<int64_t> piece_shape(const ShardedParam& p, int64_t rows) {
  std::vector<int64_t> s = p.global_shape;
  if (s.empty()) return {rows};
  s[0] = rows;
  return s;
}

std::string Record::name() const {
  return state.empty() ? param->fqn : optim_tensor_name(param->fqn, state);
}

std::vector<Record> make_records(const std::vector<ShardedParam>& params,
                                 torch::optim::Optimizer* optimizer,
                                 std::optional<OptimizerKind> kind) {
  std::vector<Record> out;
  for (const auto& p : params) {
    out.push_back({&p, "", p.local_shard, at::Tensor(), 0});
    if (!kind) continue;
    const auto st = optim::get_param_state(*optimizer, *kind, p.param);
    for (const auto& k : optim::state_names(*kind)) {
      Record rec{&p, k, at::Tensor(), at::Tensor(), st ? st->step : 0};
      if (st && st->tensors.count(k)) {
        rec.shard = st->tensors.at(k);
        FSDPP_CHECK_AS(CheckpointError, rec.shard.numel() == p.local_shard.numel(),
                       "[state] optimizer state '{}' of parameter '{}' has {} elements; expected "
                       "the shard's {}", k, p.fqn, rec.shard.numel(), p.local_shard.numel());
      }
      out.push_back(std::move(rec));
    }
  }
  return out;
}

void gather_record_rows(std::vector<Record>& records) {
  std::vector<const ShardedParam*> split;
  std::vector<at::Tensor> locals;
  std::vector<Record*> targets;
  for (auto& r : records) {
    if (!r.param->splits_rows()) {
      r.rows = r.shard;
      continue;
    }
    split.push_back(r.param);
    locals.push_back(r.shard);
    targets.push_back(&r);
  }
  if (split.empty()) return;
  auto rows = gather_rows(split, locals);
  for (size_t i = 0; i < targets.size(); ++i) targets[i]->rows = std::move(rows[i]);
}

void copy_rows_into(const ShardedParam& p, const at::Tensor& rows, const at::Tensor& dst) {
  const int64_t n = rows.size(0);
  if (n == 0) return;
  auto local = p.local_of_rows(rows);
  const int64_t chunk = p.chunk_rows();
  dst.view({chunk, dst.numel() / std::max<int64_t>(chunk, 1)}).narrow(0, 0, n).copy_(local.reshape({n, -1}));
}

std::vector<RecordMeta> metas_of(const std::vector<Record>& records) {
  std::vector<RecordMeta> out;
  out.reserve(records.size());
  for (const auto& r : records) {
    const auto& p = *r.param;
    out.push_back({p.fqn, r.state, r.name(), p.global_shape, rows_of(p),
                   r.shard.defined() ? r.shard.scalar_type() : p.local_shard.scalar_type(), r.step,
                   r.shard.defined()});
  }
  return out;
}

OwnPiece own_piece(const Record& r, bool local) {
  if (!r.shard.defined()) return {};
  FSDPP_CHECK_AS(CheckpointError, r.rows.defined(), "[state] '{}': its rows were not gathered", r.name());
  const auto& p = *r.param;
  const Rows rows = rows_of(p);
  if (local) return {r.rows, 0, rows.chunk_rows};
  if (!p.writes_rows()) return {};  // another rank holds the same rows
  if (rows.own_rows == 0) return {};
  return {r.rows.reshape({rows.chunk_rows, rows.row_numel})
              .narrow(0, 0, rows.own_rows)
              .view(piece_shape(p, rows.own_rows)),
          rows.own_begin, rows.own_begin + rows.own_rows};
}

void set_report(at::TensorAccessor<int64_t, 1> row, const OwnPiece& piece, uint64_t sum, int64_t step) {
  row[0] = 1;
  row[1] = piece.begin;
  row[2] = piece.end;
  int64_t bits;
  std::memcpy(&bits, &sum, sizeof bits);
  row[3] = bits;
  row[4] = step;
}

NamedTensors model_buffers(torch::nn::Module& root, const std::function<bool(const std::string&)>& skip) {
  NamedTensors out;
  for (const auto& b : root.named_buffers(/*recurse=*/true)) {
    if (skip && skip(b.key())) continue;
    if (!b.value().defined()) continue;
    out.emplace_back(b.key(), b.value());
  }
  return out;
}

void gather_full_records(const std::vector<Record>& records,
                         const std::function<void(bool, const std::string&, const at::Tensor&)>& sink) {
  // Records come parameter by parameter, a parameter's state after it, units one after another.
  size_t begin = 0;
  while (begin < records.size()) {
    const std::string& unit = records[begin].param->unit;
    size_t end = begin;
    while (end < records.size() && records[end].param->unit == unit) ++end;
    std::vector<const ShardedParam*> params;
    std::vector<at::Tensor> shards;
    std::map<std::string, std::vector<const Record*>> states;  // by state name
    std::vector<std::string> state_order;
    for (size_t i = begin; i < end; ++i) {
      const auto& r = records[i];
      if (r.state.empty()) {
        params.push_back(r.param);
        shards.push_back(r.shard);
        continue;
      }
      if (!states.count(r.state)) state_order.push_back(r.state);
      states[r.state].push_back(&r);
    }
    const auto full = gather_full(params, shards);
    for (size_t i = 0; i < params.size(); ++i) sink(false, params[i]->fqn, full[i]);
    for (const auto& k : state_order) {
      const auto& recs = states.at(k);
      std::vector<at::Tensor> locals;
      bool any = false;
      for (const auto* r : recs) {
        locals.push_back(r->shard);
        any |= r->shard.defined();
      }
      if (!any) continue;  // the same on every rank: every rank's optimizer stepped the same params
      const auto gathered = gather_full(params, locals);
      for (size_t i = 0; i < recs.size(); ++i) {
        if (gathered[i].defined()) sink(true, recs[i]->name(), gathered[i]);
      }
    }
    begin = end;
  }
}

NamedTensors full_steps(const std::vector<RecordMeta>& metas) {
  NamedTensors out;
  std::set<std::string> stepped;
  for (const auto& r : metas) {
    if (!r.state.empty() && r.defined && stepped.insert(r.fqn).second) {
      out.emplace_back(optim_step_name(r.fqn), at::scalar_tensor(r.step, at::kLong));
    }
  }
  return out;
}

CheckpointIndex new_index(StateDictType type, int64_t world_size, std::optional<OptimizerKind> kind) {
  CheckpointIndex index;
  index.format = format_name(type);
  index.world_size = world_size;
  if (kind) index.optim_type = optim::to_string(*kind);
  return index;
}

namespace {

Entry entry_of(const RecordMeta& m) {
  Entry e;
  e.shape = m.shape;
  e.dtype = std::string(safetensors_dtype_name(m.dtype));
  e.dim0 = m.rows.dim0;
  e.row_numel = m.rows.row_numel;
  e.chunk_rows = m.rows.chunk_rows;
  return e;
}

void add_entry(CheckpointIndex& index, const RecordMeta& m, Entry e) {
  if (m.state.empty()) {
    index.params.emplace_back(m.fqn, std::move(e));
    return;
  }
  if (index.optim.empty() || index.optim.back().first != m.fqn) {
    index.optim.emplace_back(m.fqn, OptimEntry{});
  }
  auto& oe = index.optim.back().second;
  oe.step = m.step;
  oe.states.emplace_back(m.state, std::move(e));
}

}  // namespace

void add_full_entries(CheckpointIndex& index, const std::vector<RecordMeta>& metas,
                      const std::map<std::string, uint64_t>& sums) {
  for (const auto& m : metas) {
    if (!m.defined) continue;
    auto e = entry_of(m);
    const char* file = m.state.empty() ? kModelFile : kOptimFile;
    e.pieces.push_back({file, m.name, 0, m.rows.dim0, sums.at(m.name)});
    add_entry(index, m, std::move(e));
  }
}

void add_sharded_entries(CheckpointIndex& index, const std::vector<RecordMeta>& metas, bool local,
                         const at::Tensor& reports) {
  auto rep = reports.accessor<int64_t, 3>();
  for (size_t i = 0; i < metas.size(); ++i) {
    const auto& m = metas[i];
    if (!m.defined) continue;
    auto e = entry_of(m);
    for (int64_t q = 0; q < reports.size(0); ++q) {
      if (rep[q][i][0] == 0) continue;
      uint64_t sum;
      int64_t bits = rep[q][i][3];
      std::memcpy(&sum, &bits, sizeof sum);
      e.pieces.push_back({rank_file(local, q), m.name, rep[q][i][1], rep[q][i][2], sum});
    }
    add_entry(index, m, std::move(e));
  }
}

void add_buffers(CheckpointIndex& index, const NamedTensors& buffers, const std::string& file) {
  index.buffers_file = file;
  for (const auto& [name, t] : buffers) index.buffers.emplace_back(name, BufferEntry::of(t));
}

}  // namespace fsdpp::state::detail
