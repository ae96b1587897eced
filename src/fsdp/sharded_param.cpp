// The public view of sharded parameters, and the one gather of sharded tensors to full size.
// See include/fsdpp/fsdp/sharded_param.h.
#include "fsdpp/fsdp/sharded_param.h"

#include <ATen/ATen.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "fsdp_unit.h"
#include "fsdpp/common/error.h"

namespace fsdpp {

int64_t ShardPlacement::begin_of(int k) const {
  if (!balanced) return k * chunk;
  const int64_t base = size / world, extra = size % world;
  return k * base + std::min<int64_t>(k, extra);
}

int64_t ShardPlacement::rows_of(int k) const {
  if (balanced) return size / world + (k < size % world ? 1 : 0);
  return std::clamp<int64_t>(size - k * chunk, 0, chunk);
}

ShardPlacement balanced_placement(std::string mesh_dim, std::shared_ptr<dist::ProcessGroup> group,
                                  int dim, int64_t size) {
  FSDPP_CHECK(group, "[fsdp] balanced_placement over '{}' needs a group", mesh_dim);
  ShardPlacement pl;
  pl.mesh_dim = std::move(mesh_dim);
  pl.world = group->size();
  pl.rank = group->rank();
  pl.group = std::move(group);
  pl.dim = dim;
  pl.size = size;
  pl.chunk = (size + pl.world - 1) / pl.world;
  pl.balanced = true;
  return pl;
}

at::Tensor ShardedParam::gather(const at::Tensor& local) const { return gather_full({this}, {local})[0]; }

namespace {

// Nests the dim-0 placements into one row range of the whole parameter: {begin, rows, held}.
struct RowRange {
  int64_t begin = 0, rows = 0, held = 0;
};

RowRange row_range(const ShardedParam& p) {
  const int64_t dim0 = p.global_shape.empty() ? 1 : p.global_shape[0];
  RowRange r{0, dim0, dim0};
  for (const auto& pl : p.placements) {
    if (pl.dim != 0) continue;
    // A padded outer chunk's padding is no row of the parameter.
    const int64_t b = pl.begin_of(pl.rank);
    r.rows = std::clamp<int64_t>(r.rows - b, 0, pl.rows_of(pl.rank));
    r.begin += b;
    r.held = pl.held();
  }
  return r;
}

}  // namespace

int64_t ShardedParam::row_begin() const { return row_range(*this).begin; }
int64_t ShardedParam::own_rows() const { return row_range(*this).rows; }
int64_t ShardedParam::chunk_rows() const { return row_range(*this).held; }

bool ShardedParam::splits_rows() const {
  return std::any_of(placements.begin(), placements.end(), [](const auto& pl) { return pl.dim != 0; });
}

bool ShardedParam::writes_rows() const {
  if (replicate_group && replicate_group->rank() != 0) return false;
  for (const auto& g : outer_replicas) {
    if (g->rank() != 0) return false;
  }
  return std::all_of(placements.begin(), placements.end(),
                     [](const auto& pl) { return pl.dim == 0 || pl.rank == 0; });
}

at::Tensor ShardedParam::rows_view(const at::Tensor& local) const { return gather_rows({this}, {local})[0]; }

at::Tensor ShardedParam::local_of_rows(const at::Tensor& rows) const {
  at::Tensor t = rows;
  for (const auto& pl : placements) {
    if (pl.dim == 0) continue;
    t = t.narrow(pl.dim, pl.begin_of(pl.rank), pl.rows_of(pl.rank));
    if (!pl.balanced && pl.rows_of(pl.rank) < pl.chunk) {
      auto padded_shape = t.sizes().vec();
      padded_shape[pl.dim] = pl.chunk;
      auto padded = at::zeros(padded_shape, t.options());
      padded.narrow(pl.dim, 0, t.size(pl.dim)).copy_(t);
      t = padded;
    }
  }
  return t;
}

std::vector<ShardedParam> FSDPUnit::sharded_params() const {
  const auto& mesh = *options_.mesh;
  // The mesh dim the unit shards over: the second of a HYBRID mesh, else the 1-D mesh's only dim.
  const std::string mesh_dim = mesh.dim_names().back();
  std::vector<ShardedParam> out;
  out.reserve(params_.size());
  for (const auto& p : params_) {
    ShardedParam v;
    v.fqn = p->fqn;
    v.unit = name_;
    v.global_shape = whole_shape(p->shape, p->outer.placements);
    v.placements = p->outer.placements;
    v.outer_replicas = p->outer.replicas;
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

std::vector<ShardedParam> placed_params(torch::nn::Module& root, const OuterLayoutOf& layout,
                                        const char* what) {
  if (find_unit(root)) return sharded_params(root, what);
  for (const auto& item : root.named_modules("", /*include_self=*/false)) {
    FSDPP_CHECK(!find_unit(*item.value()),
                "[fsdp] {}: module '{}' holds FSDP units ('{}') but is not one itself; "
                "fully_shard the root too, or pass the units' root",
                what, root.name(), item.key());
  }
  std::vector<ShardedParam> out;
  for (const auto& item : root.named_parameters(/*recurse=*/true)) {
    const auto& param = item.value();
    OuterLayout outer = layout ? layout(param) : OuterLayout{};
    ShardedParam v;
    v.fqn = item.key();
    v.unit = "(not sharded)";
    v.global_shape = whole_shape(param.sizes().vec(), outer.placements);
    v.placements = std::move(outer.placements);
    v.outer_replicas = std::move(outer.replicas);
    v.param = param;
    v.local_shard = param;
    v.device = param.device();
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<int64_t> whole_shape(std::vector<int64_t> held, const std::vector<ShardPlacement>& outer) {
  if (held.empty()) return held;
  for (auto it = outer.rbegin(); it != outer.rend(); ++it) {
    FSDPP_CHECK(it->dim >= 0 && it->dim < static_cast<int>(held.size()),
                "[fsdp] a placement over '{}' cuts dim {} of a {}-dim parameter", it->mesh_dim, it->dim,
                held.size());
    held[it->dim] = it->size;
  }
  return held;
}

namespace {

// The shapes a parameter has between its placements, on this rank: held[0] is the whole
// parameter (a 0-dim one as one row), held[i + 1] what placement i leaves of held[i] here, and
// slot[i + 1] that with the cut dim at `chunk`: the piece every rank of placement i's group
// sends when gathering it (all of them have the same held[i]).
struct Levels {
  std::vector<std::vector<int64_t>> held, slot;
};

Levels levels_of(const ShardedParam& p) {
  Levels lv;
  lv.held.push_back(p.global_shape.empty() ? std::vector<int64_t>{1} : p.global_shape);
  lv.slot.push_back(lv.held.back());
  for (const auto& pl : p.placements) {
    auto next = lv.held.back();
    FSDPP_CHECK(pl.dim >= 0 && pl.dim < static_cast<int>(next.size()) && next[pl.dim] == pl.size &&
                    pl.world > 1 && pl.chunk * pl.world >= pl.size,
                "[fsdp] parameter '{}': placement over '{}' cuts dim {} of size {} into {} chunks of "
                "{}; the shape there is {}",
                p.fqn, pl.mesh_dim, pl.dim, pl.size, pl.world, pl.chunk, next);
    next[pl.dim] = pl.chunk;
    lv.slot.push_back(next);
    next[pl.dim] = pl.held();
    lv.held.push_back(std::move(next));
  }
  return lv;
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
  std::vector<Levels> levels(n);
  for (size_t j = 0; j < n; ++j) levels[j] = levels_of(*ps[j]);
  const auto& first = *ps[0];
  const auto comm = first.local_shard.options().device(first.device).pinned_memory(false);
  const size_t depth = first.placements.size();
  // cur[j]: parameter j at levels[j].held[i + 1], starting from the local shard.
  std::vector<at::Tensor> cur(n);
  for (size_t j = 0; j < n; ++j) {
    if (!locals[j].defined()) continue;
    const auto& shape = levels[j].held[depth];
    FSDPP_CHECK(locals[j].numel() == numel_of(shape),
                "[fsdp] gathering '{}': the local tensor has {} elements; expected the shard's {}",
                ps[j]->fqn, locals[j].numel(), numel_of(shape));
    cur[j] = locals[j].reshape(shape);
  }
  for (size_t i = depth; i-- > 0;) {
    // One flat buffer with every parameter's piece, all-gathered as one.
    int64_t total = 0;
    std::vector<int64_t> offset(n);
    for (size_t j = 0; j < n; ++j) {
      offset[j] = total;
      total += numel_of(levels[j].slot[i + 1]);
    }
    auto flat = at::zeros({total}, comm);
    for (size_t j = 0; j < n; ++j) {
      if (!cur[j].defined()) continue;
      const int d = ps[j]->placements[i].dim;
      flat.narrow(0, offset[j], numel_of(levels[j].slot[i + 1]))
          .view(levels[j].slot[i + 1])
          .narrow(d, 0, cur[j].size(d))
          .copy_(cur[j]);
    }
    const auto& pl = first.placements[i];
    auto gathered = at::empty({pl.world * total}, comm);
    pl.group->all_gather_into_tensor(gathered, flat, {first.unit});
    auto rows = gathered.view({pl.world, total});
    for (size_t j = 0; j < n; ++j) {
      if (!locals[j].defined()) continue;
      const auto& pj = ps[j]->placements[i];
      // The last step writes the whole parameter where its shard lives.
      auto next = i == 0 ? at::empty(levels[j].held[0], ps[j]->local_shard.options().pinned_memory(false))
                         : at::empty(levels[j].held[i], comm);
      const auto& slot = levels[j].slot[i + 1];
      for (int k = 0; k < pj.world; ++k) {
        const int64_t r = pj.rows_of(k);
        if (r == 0) continue;
        auto piece = rows[k].narrow(0, offset[j], numel_of(slot)).view(slot);
        next.narrow(pj.dim, pj.begin_of(k), r).copy_(piece.narrow(pj.dim, 0, r));
      }
      cur[j] = next;
    }
  }
  for (size_t j = 0; j < n; ++j) {
    if (!locals[j].defined()) continue;
    if (depth == 0) {  // held whole: a copy, so that the result never aliases the shard
      out[j] = at::empty(levels[j].held[0], ps[j]->local_shard.options().pinned_memory(false));
      out[j].copy_(cur[j].reshape(levels[j].held[0]));
    } else {
      out[j] = cur[j];
    }
    out[j] = out[j].view(ps[j]->global_shape);
  }
}

}  // namespace

std::vector<at::Tensor> gather_rows(const std::vector<const ShardedParam*>& params,
                                    const std::vector<at::Tensor>& locals) {
  FSDPP_CHECK(params.size() == locals.size(), "[fsdp] gather_rows: {} parameters but {} tensors",
              params.size(), locals.size());
  // The rows as a parameter of their own: this rank's chunk of rows, whole along dims that only
  // the other placements cut.
  std::vector<ShardedParam> rows(params.size());
  std::vector<const ShardedParam*> ptrs;
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& p = *params[i];
    auto& v = rows[i];
    v.fqn = p.fqn;
    v.unit = p.unit;
    v.global_shape = p.global_shape.empty() ? std::vector<int64_t>{1} : p.global_shape;
    v.global_shape[0] = p.chunk_rows();
    for (const auto& pl : p.placements) {
      if (pl.dim != 0) v.placements.push_back(pl);
    }
    v.local_shard = p.local_shard;
    v.device = p.device;
    ptrs.push_back(&v);
  }
  return gather_full(ptrs, locals);
}

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
