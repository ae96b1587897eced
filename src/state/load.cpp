// load_state_dict: any layout, on any number of ranks (LOCAL: on the one it was saved on), checked
// whole before anything changes. See include/fsdpp/state/state_dict.h.
#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "agree.h"
#include "checkpoint_index.h"
#include "checkpoint_reader.h"
#include "fsdpp/common/error.h"
#include "fsdpp/state/safetensors.h"
#include "fsdpp/state/state_dict.h"
#include "parts.h"
#include "records.h"

namespace fsdpp::state {
namespace {

namespace fs = std::filesystem;
using namespace detail;

// The index of `dir`, or for a directory with only a model.safetensors (as Hugging Face writes
// one) an index that describes that file: FULL, whole tensors, the model's buffers as buffers.
CheckpointIndex index_of(const fs::path& dir, const std::set<std::string>& buffer_names) {
  std::error_code ec;
  if (fs::exists(dir / kIndexFile, ec)) return read_index(dir);
  FSDPP_CHECK_AS(CheckpointError, fs::exists(dir / kModelFile, ec),
                 "[state] '{}': no {} and no {}; not a checkpoint directory", dir.string(), kIndexFile,
                 kModelFile);
  CheckpointIndex ix;
  ix.format = kFormatFull;
  ix.buffers_file = kModelFile;
  auto f = SafetensorsFile::open(dir / kModelFile);
  for (const auto& name : f.names()) {
    const auto& info = f.info(name);
    const std::string dtype(safetensors_dtype_name(info.dtype));
    if (buffer_names.count(name)) {
      ix.buffers.emplace_back(name, BufferEntry{info.shape, dtype, std::nullopt});
    } else {
      ix.params.emplace_back(name, Entry::whole(info.shape, dtype, kModelFile, name, std::nullopt));
    }
  }
  return ix;
}

std::string shape_str(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

}  // namespace

void load_state_dict(const fs::path& dir, torch::nn::Module& root, torch::optim::Optimizer* optimizer,
                     const std::shared_ptr<dist::ProcessGroup>& group, const LoadOptions& options) {
  load_state_dict(dir, std::vector<torch::nn::Module*>{&root}, optimizer, group, options);
}

void load_state_dict(const fs::path& dir, const std::vector<torch::nn::Module*>& parts,
                     torch::optim::Optimizer* optimizer,
                     const std::shared_ptr<dist::ProcessGroup>& group, const LoadOptions& options) {
  const Comm c{group};
  at::NoGradGuard no_grad;
  std::vector<ShardedParam> params;
  std::optional<OptimizerKind> kind;
  CheckpointIndex ck;
  CheckpointReader reader(dir);
  // This rank's buffers (every one, defined or not, by name), and what all ranks hold together:
  // the checkpoint must have nothing beyond that.
  std::vector<std::pair<std::string, at::Tensor>> my_buffers;
  std::set<std::string> seen_buffers;
  for (auto* part : parts) {
    for (const auto& b : part->named_buffers(true)) {
      if (seen_buffers.insert(b.key()).second) my_buffers.emplace_back(b.key(), b.value());
    }
  }
  std::vector<std::string> param_names, buffer_names_mine;
  agreed(c, [&] {
    params = parts_params(parts);
    for (const auto& p : params) param_names.push_back(p.fqn);
  });
  for (const auto& [name, t] : my_buffers) {
    if (t.defined()) buffer_names_mine.push_back(name);
  }
  const std::set<std::string> every_param = all_names(c, param_names);
  const std::set<std::string> every_buffer = all_names(c, buffer_names_mine);
  agreed(c, [&] {
    kind = optimizer_kind_of(optimizer);
    ck = index_of(dir, every_buffer);
  });
  const bool local = ck.format == kFormatLocal;
  const std::string own_file = rank_file(/*local=*/true, c.rank());
  const std::string where = dir.string();
  std::map<std::string, const Entry*> saved;  // parameters by name
  for (const auto& [name, e] : ck.params) saved[name] = &e;

  // Where this rank's rows of a tensor come from: (begin, rows) in the entry's row space.
  auto own_rows = [&](const Rows& r) -> std::pair<int64_t, int64_t> {
    if (local) return {0, r.chunk_rows};
    return {r.own_begin, r.own_rows};
  };
  auto check_entry = [&](const std::string& what, const ShardedParam& p, const Entry& e) {
    FSDPP_CHECK_AS(CheckpointError, e.shape == p.global_shape,
                   "[state] '{}': '{}' has shape {} in the checkpoint but {} in the model", where,
                   what, shape_str(e.shape), shape_str(p.global_shape));
    const int64_t chunk_rows = rows_of(p).chunk_rows;
    if (local) {
      // This rank's own piece: ranks of a tensor-parallel group may hold chunks of different
      // sizes (an uneven split), each its own in its own file.
      int64_t saved = e.chunk_rows.value_or(0);
      for (const auto& piece : e.pieces) {
        if (piece.file == own_file) saved = piece.row_end - piece.row_begin;
      }
      FSDPP_CHECK_AS(CheckpointError, saved == chunk_rows,
                     "[state] '{}': LOCAL checkpoint shards '{}' in chunks of {} rows but this "
                     "model's shards have {}; the sharding changed (load a SHARDED or FULL "
                     "checkpoint instead)", where, what, saved, chunk_rows);
    }
  };
  // Rows into a (chunk_rows, row_numel) view of `dst` (the padded shard); undefined: check only.
  auto load_rows = [&](const std::string& what, const ShardedParam& p, const Entry& e,
                       const at::Tensor& dst) {
    const Rows r = rows_of(p);
    auto [begin, rows] = own_rows(r);
    at::Tensor d;
    // Rows whole along every dim past 0; a parameter that tensor parallelism split along one
    // reads them into a buffer and keeps its part.
    const bool split = p.splits_rows();
    if (dst.defined()) {
      d = split ? at::empty({rows, r.row_numel}, dst.options())
                : dst.view({r.chunk_rows, r.row_numel}).narrow(0, 0, rows);
    }
    if (rows > 0) reader.fill(what, e, begin, rows, d, local ? own_file : "");
    if (split && dst.defined()) copy_rows_into(p, d.view(piece_shape(p, rows)), dst);
  };
  const bool load_optim = kind && ck.optim_type;

  // Phase 1: check everything, change nothing.
  agreed(c, [&] {
    FSDPP_CHECK_AS(CheckpointError,
                   ck.format == kFormatSharded || ck.format == kFormatFull || ck.format == kFormatLocal,
                   "[state] '{}': unknown format '{}'; expected {}, {} or {}", (dir / kIndexFile).string(),
                   ck.format, kFormatSharded, kFormatFull, kFormatLocal);
    if (local) {
      FSDPP_CHECK_AS(CheckpointError, ck.world_size == c.size(),
                     "[state] '{}': a LOCAL checkpoint saved on {} rank{} cannot be loaded on {} "
                     "rank{}; save it as SHARDED or FULL to change the world size",
                     where, ck.world_size, ck.world_size == 1 ? "" : "s", c.size(),
                     c.size() == 1 ? "" : "s");
    }
    for (const auto& p : params) {
      auto it = saved.find(p.fqn);
      FSDPP_CHECK_AS(CheckpointError, it != saved.end(),
                     "[state] '{}': parameter '{}' of the model is missing from the checkpoint",
                     where, p.fqn);
      check_entry(p.fqn, p, *it->second);
      load_rows(p.fqn, p, *it->second, at::Tensor());
    }
    for (const auto& [name, e] : ck.params) {
      FSDPP_CHECK_AS(CheckpointError, every_param.count(name),
                     "[state] '{}': unexpected tensor '{}' in the checkpoint: the model has no "
                     "parameter or buffer of that name", where, name);
    }
    for (const auto& [key, value] : my_buffers) {
      if (!value.defined()) continue;
      const BufferEntry* be = find(ck.buffers, key);
      if (!be) {
        FSDPP_CHECK_AS(CheckpointError, options.skip_buffer && options.skip_buffer(key),
                       "[state] '{}': buffer '{}' of the model is missing from the checkpoint",
                       where, key);
        continue;
      }
      FSDPP_CHECK_AS(CheckpointError, be->shape == value.sizes().vec(),
                     "[state] '{}': buffer '{}' has shape {} in the checkpoint but {} in the "
                     "model", where, key, shape_str(be->shape), shape_str(value.sizes().vec()));
      reader.buffer(ck, key, *be);
    }
    for (const auto& [name, e] : ck.buffers) {
      FSDPP_CHECK_AS(CheckpointError, every_buffer.count(name),
                     "[state] '{}': unexpected buffer '{}' in the checkpoint: the model has no "
                     "buffer of that name", where, name);
    }
    if (!load_optim) return;
    FSDPP_CHECK_AS(CheckpointError, *ck.optim_type == optim::to_string(*kind),
                   "[state] '{}': the checkpoint holds {} state but the optimizer is {}", where,
                   *ck.optim_type, optim::to_string(*kind));
    std::set<const void*> held;
    for (const auto& g : optimizer->param_groups()) {
      for (const auto& t : g.params()) held.insert(t.unsafeGetTensorImpl());
    }
    std::map<std::string, const ShardedParam*> by_name;
    for (const auto& p : params) by_name[p.fqn] = &p;
    const auto& names = optim::state_names(*kind);
    for (const auto& [name, op] : ck.optim) {
      auto it = by_name.find(name);
      FSDPP_CHECK_AS(CheckpointError, every_param.count(name),
                     "[state] '{}': optimizer state for '{}', which the model does not have", where, name);
      if (it == by_name.end()) continue;  // another rank's part holds it
      const auto& p = *it->second;
      FSDPP_CHECK_AS(CheckpointError, held.count(p.param.unsafeGetTensorImpl()),
                     "[state] '{}': the optimizer does not hold parameter '{}'; make it on "
                     "model->parameters() after fully_shard", where, name);
      for (const auto& [k, e] : op.states) {
        FSDPP_CHECK_AS(CheckpointError, std::find(names.begin(), names.end(), k) != names.end(),
                       "[state] '{}': unknown optimizer state '{}' for '{}'", where, k, name);
        const std::string what = optim_tensor_name(name, k);
        check_entry(what, p, e);
        load_rows(what, p, e, at::Tensor());
      }
    }
  });

  // Phase 2: copy.
  agreed(c, [&] {
    for (const auto& p : params) {
      // Through the registered parameter, so that its version counter moves and a unit that
      // keeps gathered parameters (ZERO1) gathers again.
      auto dst = at::empty_like(p.local_shard);
      dst.copy_(p.local_shard);
      load_rows(p.fqn, p, *saved.at(p.fqn), dst);
      p.param.detach().copy_(dst);
    }
    std::map<std::string, at::Tensor> buffers(my_buffers.begin(), my_buffers.end());
    for (const auto& [name, be] : ck.buffers) {
      auto it = buffers.find(name);
      if (it != buffers.end()) it->second.copy_(reader.buffer(ck, name, be));
    }
    if (!load_optim) return;
    for (const auto& p : params) {
      std::optional<optim::ParamState> st;
      if (const OptimEntry* oe = find(ck.optim, p.fqn)) {
        st.emplace();
        st->step = oe->step;
        for (const auto& [k, e] : oe->states) {
          auto t = at::zeros_like(p.local_shard);
          load_rows(optim_tensor_name(p.fqn, k), p, e, t);
          st->tensors[k] = t;
        }
      }
      optim::set_param_state(*optimizer, *kind, p.param, st);
    }
  });
}

}  // namespace fsdpp::state
