// The public view of sharded parameters, and the one gather of sharded tensors to full size.
// See include/fsdpp/fsdp/sharded_param.h.
#include "fsdpp/fsdp/sharded_param.h"

#include <ATen/ATen.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "fsdp_unit.h"
#include "fsdpp/common/error.h"

namespace fsdpp {

int64_t ShardPlacement::rows_of(int k) const {
  return std::clamp<int64_t>(size - k * chunk, 0, chunk);
}

at::Tensor ShardedParam::gather(const at::Tensor& local) const { return gather_full({this}, {local})[0]; }

std::vector<ShardedParam> FSDPUnit::sharded_params() const {
  const auto& mesh = *options_.mesh;
  // The mesh dim the unit shards over: "shard" of a HYBRID mesh, else the 1-D mesh's only dim.
  const std::string mesh_dim = mesh.ndim() == 2 ? "shard" : mesh.dim_names().at(0);
  std::vector<ShardedParam> out;
  out.reserve(params_.size());
  for (const auto& p : params_) {
    ShardedParam v;
    v.fqn = p->fqn;
    v.unit = name_;
    v.global_shape = p->shape;
    if (shard_group_) {
      v.placements.push_back({mesh_dim, shard_group_, /*dim=*/0, p->dim0, p->shard_world,
                              p->shard_rank, p->chunk_rows});
    }
    v.replicate_group = replicate_group_;
    v.param = p->param;
    v.local_shard = p->shard;
    v.device = compute_device_;
    v.at_rest = p->on_shard();
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<ShardedParam> sharded_params(torch::nn::Module& root, const char* what) {
  FSDPUnit* unit = find_unit(root);
  FSDPP_CHECK(unit, "[fsdp] {} needs the root module given to fully_shard; module '{}' is not a "
              "unit", what, root.name());
  FSDPP_CHECK(unit->is_root(), "[fsdp] {} needs the root unit; '{}' is inside another unit", what,
              unit->name());
  std::vector<ShardedParam> out;
  for (auto* u : unit->all_units()) {
    for (auto& v : u->sharded_params()) out.push_back(std::move(v));
  }
  return out;
}

namespace {

// The shapes a parameter has between its placements: levels[0] is the whole parameter (a 0-dim
// one as one row), levels[i + 1] what placement i leaves of levels[i] (its dim cut to the chunk).
std::vector<std::vector<int64_t>> levels_of(const ShardedParam& p) {
  std::vector<std::vector<int64_t>> levels;
  levels.push_back(p.global_shape.empty() ? std::vector<int64_t>{1} : p.global_shape);
  for (const auto& pl : p.placements) {
    auto next = levels.back();
    FSDPP_CHECK(pl.dim >= 0 && pl.dim < static_cast<int>(next.size()) && next[pl.dim] == pl.size &&
                    pl.world > 1 && pl.chunk * pl.world >= pl.size,
                "[fsdp] parameter '{}': placement over '{}' cuts dim {} of size {} into {} chunks of "
                "{}; the shape there is {}",
                p.fqn, pl.mesh_dim, pl.dim, pl.size, pl.world, pl.chunk, next);
    next[pl.dim] = pl.chunk;
    levels.push_back(std::move(next));
  }
  return levels;
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

// Parameters gathered by the same collectives: the same groups along the same dims, one dtype,
// one device.
bool same_gather(const ShardedParam& a, const ShardedParam& b) {
  if (a.placements.size() != b.placements.size() || a.device != b.device ||
      a.local_shard.scalar_type() != b.local_shard.scalar_type()) {
    return false;
  }
  for (size_t i = 0; i < a.placements.size(); ++i) {
    const auto &x = a.placements[i], &y = b.placements[i];
    if (x.group != y.group || x.dim != y.dim || x.world != y.world) return false;
  }
  return true;
}

// Gathers one set of parameters that same_gather() groups together.
void gather_together(const std::vector<const ShardedParam*>& ps, const std::vector<at::Tensor>& locals,
                     std::vector<at::Tensor>& out) {
  const size_t n = ps.size();
  std::vector<std::vector<std::vector<int64_t>>> levels(n);
  for (size_t j = 0; j < n; ++j) levels[j] = levels_of(*ps[j]);
  const auto& first = *ps[0];
  const auto comm = first.local_shard.options().device(first.device).pinned_memory(false);
  const size_t depth = first.placements.size();
  // cur[j]: parameter j at levels[j][i + 1], starting from the local shard.
  std::vector<at::Tensor> cur(n);
  for (size_t j = 0; j < n; ++j) {
    if (!locals[j].defined()) continue;
    FSDPP_CHECK(locals[j].numel() == numel_of(levels[j][depth]),
                "[fsdp] gathering '{}': the local tensor has {} elements; expected the shard's {}",
                ps[j]->fqn, locals[j].numel(), numel_of(levels[j][depth]));
    cur[j] = locals[j];
  }
  for (size_t i = depth; i-- > 0;) {
    // One flat buffer with every parameter's piece, all-gathered as one.
    int64_t total = 0;
    std::vector<int64_t> offset(n);
    for (size_t j = 0; j < n; ++j) {
      offset[j] = total;
      total += numel_of(levels[j][i + 1]);
    }
    auto flat = at::zeros({total}, comm);
    for (size_t j = 0; j < n; ++j) {
      if (cur[j].defined()) flat.narrow(0, offset[j], cur[j].numel()).copy_(cur[j].reshape({-1}));
    }
    const auto& pl = first.placements[i];
    auto gathered = at::empty({pl.world * total}, comm);
    pl.group->all_gather_into_tensor(gathered, flat, {first.unit});
    auto rows = gathered.view({pl.world, total});
    for (size_t j = 0; j < n; ++j) {
      if (!locals[j].defined()) continue;
      const auto& pj = ps[j]->placements[i];
      // The last step writes the whole parameter where its shard lives.
      auto next = i == 0 ? at::empty(levels[j][0], ps[j]->local_shard.options().pinned_memory(false))
                         : at::empty(levels[j][i], comm);
      for (int k = 0; k < pj.world; ++k) {
        const int64_t r = pj.rows_of(k);
        if (r == 0) continue;
        auto piece = rows[k].narrow(0, offset[j], numel_of(levels[j][i + 1])).view(levels[j][i + 1]);
        next.narrow(pj.dim, pj.begin_of(k), r).copy_(piece.narrow(pj.dim, 0, r));
      }
      cur[j] = next;
    }
  }
  for (size_t j = 0; j < n; ++j) {
    if (!locals[j].defined()) continue;
    if (depth == 0) {  // held whole: a copy, so that the result never aliases the shard
      out[j] = at::empty(levels[j][0], ps[j]->local_shard.options().pinned_memory(false));
      out[j].copy_(cur[j].reshape(levels[j][0]));
    } else {
      out[j] = cur[j];
    }
    out[j] = out[j].view(ps[j]->global_shape);
  }
}

}  // namespace

std::vector<at::Tensor> gather_full(const std::vector<const ShardedParam*>& params,
                                    const std::vector<at::Tensor>& locals) {
  FSDPP_CHECK(params.size() == locals.size(), "[fsdp] gather_full: {} parameters but {} tensors",
              params.size(), locals.size());
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> out(params.size());
  std::vector<bool> done(params.size(), false);
  for (size_t a = 0; a < params.size(); ++a) {
    if (done[a]) continue;
    std::vector<size_t> idx;
    for (size_t b = a; b < params.size(); ++b) {
      if (!done[b] && same_gather(*params[a], *params[b])) {
        idx.push_back(b);
        done[b] = true;
      }
    }
    std::vector<const ShardedParam*> ps;
    std::vector<at::Tensor> ls;
    for (size_t b : idx) {
      ps.push_back(params[b]);
      ls.push_back(locals[b]);
    }
    std::vector<at::Tensor> got(idx.size());
    gather_together(ps, ls, got);
    for (size_t k = 0; k < idx.size(); ++k) out[idx[k]] = std::move(got[k]);
  }
  return out;
}

}  // namespace fsdpp
