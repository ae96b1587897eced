// Model and optimizer state dicts of fully_shard'ed models: FULL, SHARDED and LOCAL layouts,
// resharding on load. See include/fsdpp/state/state_dict.h and docs/state-dicts.md.
#include "fsdpp/state/state_dict.h"

#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/sgd.h>

#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "../fsdp/fsdp_unit.h"
#include "agree.h"
#include "pending_save.h"
#include "index_checks.h"
#include "fsdpp/common/error.h"
#include "fsdpp/dist/process_group.h"
#include "fsdpp/state/atomic_dir.h"
#include "fsdpp/state/safetensors.h"

namespace fsdpp::state {

const char* to_string(StateDictType type) {
  switch (type) {
    case StateDictType::FULL: return "FULL";
    case StateDictType::SHARDED: return "SHARDED";
    case StateDictType::LOCAL: return "LOCAL";
  }
  return "?";
}

namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

constexpr const char* kIndexFile = "index.json";
constexpr const char* kFormatSharded = "fsdpp.sharded";
constexpr const char* kFormatFull = "fsdpp.full";
constexpr const char* kFormatLocal = "fsdpp.local";
constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimFile = "optim.safetensors";
constexpr const char* kBuffersFile = "buffers.safetensors";
constexpr int kReportFields = 5;  // present, row_begin, row_end, checksum, step

using detail::agreed;
using detail::broadcast_string;
using detail::Comm;
const dist::CollectiveTag& kTag = detail::kStateTag;

// ---------------------------------------------------------------------------------------------
// The model's parameters and the optimizer's state, by name

FSDPUnit& root_unit(torch::nn::Module& root) {
  FSDPUnit* unit = find_unit(root);
  FSDPP_CHECK_AS(CheckpointError, unit,
                 "[state] state dicts need the root module given to fully_shard; module '{}' is "
                 "not a unit", root.name());
  FSDPP_CHECK_AS(CheckpointError, unit->is_root(),
                 "[state] state dicts need the root unit; '{}' is inside another unit",
                 unit->name());
  return *unit;
}

struct ParamRef {
  FSDPUnit* unit;
  FSDPParam* p;
};

std::vector<ParamRef> all_params(torch::nn::Module& root) {
  std::vector<ParamRef> out;
  for (auto* u : root_unit(root).all_units()) {
    for (const auto& p : u->params()) {
      FSDPP_CHECK_AS(CheckpointError, p->on_shard(),
                     "[state] parameter '{}' is unsharded right now; save and load state dicts "
                     "between steps, not inside forward or backward", p->fqn);
      out.push_back({u, p.get()});
    }
  }
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> model_buffers(
    torch::nn::Module& root, const std::function<bool(const std::string&)>& skip) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& b : root.named_buffers(/*recurse=*/true)) {
    if (skip && skip(b.key())) continue;
    if (!b.value().defined()) continue;
    out.emplace_back(b.key(), b.value());
  }
  return out;
}

// What state an optimizer keeps per parameter, as named shard-shaped tensors and a step.
enum class OptimKind { NONE, ADAMW, ADAM, SGD };
const std::vector<std::string> kStateNames = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq",
                                              "momentum_buffer"};

OptimKind optim_kind(torch::optim::Optimizer* opt) {
  if (!opt) return OptimKind::NONE;
  if (dynamic_cast<torch::optim::AdamW*>(opt)) return OptimKind::ADAMW;
  if (dynamic_cast<torch::optim::Adam*>(opt)) return OptimKind::ADAM;
  if (dynamic_cast<torch::optim::SGD*>(opt)) return OptimKind::SGD;
  FSDPP_THROW(CheckpointError,
              "[state] optimizer state dicts support torch::optim::AdamW, Adam and SGD; got "
              "another optimizer");
}

const char* optim_name(OptimKind k) {
  switch (k) {
    case OptimKind::ADAMW: return "AdamW";
    case OptimKind::ADAM: return "Adam";
    case OptimKind::SGD: return "SGD";
    case OptimKind::NONE: return "none";
  }
  return "?";
}

struct OptimState {
  bool present = false;
  int64_t step = 0;
  std::map<std::string, at::Tensor> tensors;  // by kStateNames entry; only defined, non-empty
};

template <typename S>
void read_adam(const S& s, OptimState& out) {
  out.step = s.step();
  if (s.exp_avg().defined()) out.tensors["exp_avg"] = s.exp_avg();
  if (s.exp_avg_sq().defined()) out.tensors["exp_avg_sq"] = s.exp_avg_sq();
  if (s.max_exp_avg_sq().defined() && s.max_exp_avg_sq().numel() > 0) {
    out.tensors["max_exp_avg_sq"] = s.max_exp_avg_sq();
  }
}

OptimState get_state(torch::optim::Optimizer& opt, OptimKind kind, const at::Tensor& param) {
  OptimState out;
  auto it = opt.state().find(param.unsafeGetTensorImpl());
  if (it == opt.state().end() || !it->second) return out;
  out.present = true;
  switch (kind) {
    case OptimKind::ADAMW:
      read_adam(static_cast<torch::optim::AdamWParamState&>(*it->second), out);
      break;
    case OptimKind::ADAM:
      read_adam(static_cast<torch::optim::AdamParamState&>(*it->second), out);
      break;
    case OptimKind::SGD: {
      auto& s = static_cast<torch::optim::SGDParamState&>(*it->second);
      if (s.momentum_buffer().defined()) out.tensors["momentum_buffer"] = s.momentum_buffer();
      break;
    }
    case OptimKind::NONE: break;
  }
  return out;
}

template <typename S>
std::unique_ptr<torch::optim::OptimizerParamState> make_adam(const OptimState& st) {
  auto s = std::make_unique<S>();
  s->step(st.step);
  if (st.tensors.count("exp_avg")) s->exp_avg(st.tensors.at("exp_avg"));
  if (st.tensors.count("exp_avg_sq")) s->exp_avg_sq(st.tensors.at("exp_avg_sq"));
  if (st.tensors.count("max_exp_avg_sq")) s->max_exp_avg_sq(st.tensors.at("max_exp_avg_sq"));
  return s;
}

void set_state(torch::optim::Optimizer& opt, OptimKind kind, const at::Tensor& param,
               const OptimState& st) {
  void* key = param.unsafeGetTensorImpl();
  if (!st.present) {
    opt.state().erase(key);
    return;
  }
  std::unique_ptr<torch::optim::OptimizerParamState> s;
  switch (kind) {
    case OptimKind::ADAMW: s = make_adam<torch::optim::AdamWParamState>(st); break;
    case OptimKind::ADAM: s = make_adam<torch::optim::AdamParamState>(st); break;
    case OptimKind::SGD: {
      auto sgd = std::make_unique<torch::optim::SGDParamState>();
      if (st.tensors.count("momentum_buffer")) sgd->momentum_buffer(st.tensors.at("momentum_buffer"));
      s = std::move(sgd);
      break;
    }
    case OptimKind::NONE: return;
  }
  opt.state()[key] = std::move(s);
}

// ---------------------------------------------------------------------------------------------
// Records: every tensor a rank contributes, in the same order on every rank

struct Record {
  ParamRef ref;
  std::string kind;  // "" for the parameter, else a kStateNames entry
  at::Tensor shard;  // (chunk_rows, rest...) padded shard; undefined when absent
  int64_t step = 0;
  std::string name() const {
    return kind.empty() ? ref.p->fqn : "optim." + ref.p->fqn + "." + kind;
  }
};

std::vector<Record> make_records(const std::vector<ParamRef>& params,
                                 torch::optim::Optimizer* opt, OptimKind kind) {
  std::vector<Record> out;
  for (const auto& r : params) {
    out.push_back({r, "", r.p->shard, 0});
    if (kind == OptimKind::NONE) continue;
    auto st = get_state(*opt, kind, r.p->param);
    for (const auto& k : kStateNames) {
      Record rec{r, k, at::Tensor(), st.step};
      if (st.present && st.tensors.count(k)) {
        rec.shard = st.tensors.at(k);
        FSDPP_CHECK_AS(CheckpointError, rec.shard.numel() == r.p->shard_numel(),
                       "[state] optimizer state '{}' of parameter '{}' has {} elements; expected "
                       "the shard's {}", k, r.p->fqn, rec.shard.numel(), r.p->shard_numel());
      }
      out.push_back(std::move(rec));
    }
  }
  return out;
}

std::vector<int64_t> piece_shape(const FSDPParam& p, int64_t rows) {
  std::vector<int64_t> s = p.shape;
  if (s.empty()) return {rows};
  s[0] = rows;
  return s;
}

std::string hex(uint64_t v) { return fmt::format("{:016x}", v); }

json shape_json(const std::vector<int64_t>& s) {
  json j = json::array();
  for (auto d : s) j.push_back(d);
  return j;
}

void write_json(const fs::path& path, const json& j) {
  std::ofstream f(path);
  f << j.dump(1) << "\n";
  FSDPP_CHECK_AS(CheckpointError, f.good(), "[state] '{}': cannot write", path.string());
}

// What the index says about one record, copied out of the model so that an asynchronous save
// can build the index after the model has moved on.
struct RecordMeta {
  std::string fqn, kind, name;
  std::vector<int64_t> shape;
  int64_t dim0 = 1, row_numel = 1, chunk_rows = 1;
  at::ScalarType dtype = at::kFloat;
  int64_t step = 0;
  bool defined = false;
};

RecordMeta meta_of(const Record& r) {
  const auto& p = *r.ref.p;
  RecordMeta m{p.fqn, r.kind, r.name(), p.shape, p.dim0, p.row_numel, p.chunk_rows,
               r.shard.defined() ? r.shard.scalar_type() : p.shard.scalar_type(), r.step,
               r.shard.defined()};
  return m;
}

json tensor_entry(const RecordMeta& m) {
  json e;
  e["shape"] = shape_json(m.shape);
  e["dtype"] = std::string(safetensors_dtype_name(m.dtype));
  e["dim0"] = m.dim0;
  e["row_numel"] = m.row_numel;
  e["chunk_rows"] = m.chunk_rows;
  e["pieces"] = json::array();
  return e;
}

json piece_json(const std::string& file, const std::string& tensor, int64_t row_begin,
                int64_t row_end, uint64_t sum) {
  return {{"file", file},
          {"tensor", tensor},
          {"row_begin", row_begin},
          {"row_end", row_end},
          {"checksum", hex(sum)}};
}

// The index's "params" and "optim" sections, filled one record at a time.
struct IndexSections {
  json params = json::object();
  json optim = json::object();
  void add(const RecordMeta& r, json entry) {
    if (r.kind.empty()) {
      params[r.fqn] = std::move(entry);
    } else {
      optim[r.fqn]["step"] = r.step;
      optim[r.fqn]["states"][r.kind] = std::move(entry);
    }
  }
  void store(json& index, OptimKind okind) {
    index["params"] = std::move(params);
    if (okind != OptimKind::NONE) index["optim"] = {{"type", optim_name(okind)}, {"params", std::move(optim)}};
  }
};

json buffers_json(const std::vector<std::pair<std::string, at::Tensor>>& buffers,
                  const std::string& file) {
  json b;
  b["file"] = file;
  b["tensors"] = json::object();
  for (const auto& [name, t] : buffers) {
    b["tensors"][name] = {{"shape", shape_json(t.sizes().vec())},
                          {"dtype", std::string(safetensors_dtype_name(t.scalar_type()))},
                          {"checksum", hex(checksum(t))}};
  }
  return b;
}

// ---------------------------------------------------------------------------------------------
// Save

const char* format_name(StateDictType t) {
  return t == StateDictType::SHARDED ? kFormatSharded
         : t == StateDictType::FULL  ? kFormatFull
                                     : kFormatLocal;
}

std::string rank_file(bool local, int rank) {
  return fmt::format("{}-{}.safetensors", local ? "local" : "shard", rank);
}

json new_index(StateDictType type, int world_size) {
  json index;
  index["format"] = format_name(type);
  index["version"] = 1;
  index["world_size"] = world_size;
  return index;
}

// Gathers every unit's parameters, then each kind of its optimizer state, to full size, one
// unit at a time, and hands each full tensor to sink(is_optim, name, tensor) on every rank (the
// tensor is only valid during the call). Collective over the units' shard groups.
template <typename Sink>
void gather_full(torch::nn::Module& root, const std::vector<Record>& records, OptimKind okind,
                 Sink&& sink) {
  size_t ri = 0;
  for (auto* u : root_unit(root).all_units()) {
    const size_t n = u->params().size();
    if (n == 0) continue;
    for (auto& [name, full] : u->full_parameters()) sink(false, name, full);
    const size_t per = okind == OptimKind::NONE ? 1 : 1 + kStateNames.size();
    for (size_t k = 0; okind != OptimKind::NONE && k < kStateNames.size(); ++k) {
      bool any = false;
      for (size_t i = 0; i < n; ++i) any |= records[ri + i * per + 1 + k].shard.defined();
      if (!any) continue;
      at::NoGradGuard no_grad;
      const auto& first = *u->params()[0];
      auto flat = at::zeros({u->shard_numel()}, first.shard.options());
      for (size_t i = 0; i < n; ++i) {
        const auto& t = records[ri + i * per + 1 + k].shard;
        const auto& p = *u->params()[i];
        if (t.defined()) flat.narrow(0, p.offset, p.shard_numel()).copy_(t.reshape({-1}));
      }
      at::Tensor rows;
      if (u->shard_group()) {
        auto gathered = at::empty({u->shard_world() * u->shard_numel()}, flat.options());
        u->shard_group()->all_gather_into_tensor(gathered, flat, {u->name()});
        rows = gathered.view({u->shard_world(), u->shard_numel()});
      }
      for (size_t i = 0; i < n; ++i) {
        const auto& rec = records[ri + i * per + 1 + k];
        if (!rec.shard.defined()) continue;
        const auto& p = *u->params()[i];
        at::Tensor full;
        if (rows.defined()) {
          full = at::empty(p.shape, flat.options());
          p.copy_out(rows, full);
        } else {
          full = flat.narrow(0, p.offset, p.numel()).view(p.shape);
        }
        sink(true, rec.name(), full);
      }
    }
    ri += n * per;
  }
}

// The optimizer steps of a FULL save: one 0-dim I64 tensor "optim.<fqn>.step" per parameter
// with state, in record order.
std::vector<std::pair<std::string, at::Tensor>> full_steps(const std::vector<RecordMeta>& metas) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  std::set<std::string> stepped;
  for (const auto& r : metas) {
    if (!r.kind.empty() && r.defined && stepped.insert(r.fqn).second) {
      out.emplace_back("optim." + r.fqn + ".step", at::scalar_tensor(r.step, at::kLong));
    }
  }
  return out;
}

// A FULL index: one piece per tensor, the whole of it, with the checksums the writer computed.
void store_full_index(const std::vector<RecordMeta>& metas, OptimKind okind,
                      const std::map<std::string, uint64_t>& sums,
                      const std::vector<std::pair<std::string, at::Tensor>>& buffers, json& index) {
  IndexSections sections;
  for (const auto& r : metas) {
    if (!r.defined) continue;
    auto e = tensor_entry(r);
    e["pieces"].push_back(piece_json(r.kind.empty() ? kModelFile : kOptimFile, r.name, 0, r.dim0,
                                     sums.at(r.name)));
    sections.add(r, std::move(e));
  }
  sections.store(index, okind);
  index["buffers"] = buffers_json(buffers, kModelFile);
}

// The rows of a record that this rank writes in a SHARDED or LOCAL save (t undefined: none):
// SHARDED writes the rows the shard owns without padding (replica 0 only), LOCAL the padded
// shard as it is.
struct OwnPiece {
  at::Tensor t;
  int64_t begin = 0, end = 0;
};

OwnPiece own_piece(const Record& r, bool local) {
  if (!r.shard.defined()) return {};
  const auto& p = *r.ref.p;
  if (local) return {r.shard, 0, p.chunk_rows};
  const auto& rg = r.ref.unit->replicate_group();
  if (rg && rg->rank() != 0) return {};  // replicas: replica 0 writes
  const int64_t rows = p.rows_of_rank(p.shard_rank);
  if (rows == 0) return {};
  const int64_t begin = p.shard_rank * p.chunk_rows;
  return {r.shard.reshape({p.chunk_rows, p.row_numel}).narrow(0, 0, rows).view(piece_shape(p, rows)),
          begin, begin + rows};
}

void set_report(at::TensorAccessor<int64_t, 1> rep, const OwnPiece& piece, uint64_t sum, int64_t step) {
  rep[0] = 1;
  rep[1] = piece.begin;
  rep[2] = piece.end;
  int64_t bits;
  std::memcpy(&bits, &sum, sizeof bits);
  rep[3] = bits;
  rep[4] = step;
}

// A SHARDED or LOCAL index from every rank's report, (world, records, kReportFields).
void store_sharded_index(const std::vector<RecordMeta>& metas, OptimKind okind, bool local,
                         const at::Tensor& reports, json& index) {
  auto rep = reports.accessor<int64_t, 3>();
  IndexSections sections;
  for (size_t i = 0; i < metas.size(); ++i) {
    const auto& r = metas[i];
    if (!r.defined) continue;
    auto e = tensor_entry(r);
    for (int q = 0; q < reports.size(0); ++q) {
      if (rep[q][i][0] == 0) continue;
      uint64_t sum;
      int64_t bits = rep[q][i][3];
      std::memcpy(&sum, &bits, sizeof sum);
      e["pieces"].push_back(piece_json(rank_file(local, q), r.name, rep[q][i][1], rep[q][i][2], sum));
    }
    sections.add(r, std::move(e));
  }
  sections.store(index, okind);
}

void write_extra_files(const fs::path& dir, const std::map<std::string, std::string>& files) {
  for (const auto& [name, text] : files) {
    FSDPP_CHECK_AS(CheckpointError,
                   !name.empty() && name.find('/') == std::string::npos && name != kIndexFile,
                   "[state] extra checkpoint file name '{}' is not a plain file name (or is {})",
                   name, kIndexFile);
    std::ofstream f(dir / name, std::ios::binary | std::ios::trunc);
    f << text;
    f.flush();
    FSDPP_CHECK_AS(CheckpointError, f.good(), "[state] '{}': cannot write", (dir / name).string());
  }
}

void save_full(const Comm& c, const fs::path& tmp, std::vector<ParamRef>& params,
               const std::vector<Record>& records, OptimKind okind, torch::nn::Module& root,
               const SaveOptions& options, json& index) {
  const bool writer = c.rank() == 0;
  auto buffers = model_buffers(root, options.skip_buffer);
  std::vector<RecordMeta> metas;
  for (const auto& r : records) metas.push_back(meta_of(r));
  const auto steps = full_steps(metas);
  std::unique_ptr<SafetensorsWriter> model_w, optim_w;
  std::string err;  // rank 0's first error; it keeps joining the gathers after one
  std::map<std::string, uint64_t> sums;
  if (writer) {
    try {
      detail::fault_before_write(c.rank(), (tmp / kModelFile).string());
      model_w = std::make_unique<SafetensorsWriter>(tmp / kModelFile,
                                                    std::map<std::string, std::string>{{"format", "pt"}});
      for (const auto& r : params) model_w->declare(r.p->fqn, r.p->shard.scalar_type(), r.p->shape);
      for (const auto& [name, t] : buffers) model_w->declare(name, t.scalar_type(), t.sizes());
      if (!steps.empty()) {
        optim_w = std::make_unique<SafetensorsWriter>(tmp / kOptimFile,
                                                      std::map<std::string, std::string>{{"format", "pt"}});
        for (const auto& r : metas) {
          if (r.kind.empty() || !r.defined) continue;
          optim_w->declare(r.name, r.dtype, r.shape);
        }
        for (const auto& [name, t] : steps) optim_w->declare(name, at::kLong, {});
      }
    } catch (const std::exception& e) {
      err = e.what();
    }
  }
  auto write = [&](SafetensorsWriter* w, const std::string& name, const at::Tensor& t) {
    if (!writer || !err.empty() || !w) return;
    try {
      w->write(name, t);
      sums[name] = checksum(t);
    } catch (const std::exception& e) {
      err = e.what();
    }
  };
  gather_full(root, records, okind, [&](bool is_optim, const std::string& name, const at::Tensor& full) {
    write(is_optim ? optim_w.get() : model_w.get(), name, full);
  });
  agreed(c, [&] {
    if (!writer) return;
    if (!err.empty()) throw CheckpointError(err);
    for (const auto& [name, t] : buffers) write(model_w.get(), name, t);
    for (const auto& [name, t] : steps) write(optim_w.get(), name, t);
    if (!err.empty()) throw CheckpointError(err);
    model_w->commit();
    if (optim_w) optim_w->commit();
    store_full_index(metas, okind, sums, buffers, index);
  });
}

}  // namespace

void save_state_dict(const fs::path& dir, torch::nn::Module& root,
                     torch::optim::Optimizer* optimizer,
                     const std::shared_ptr<dist::ProcessGroup>& group, const SaveOptions& options) {
  const Comm c{group};
  at::NoGradGuard no_grad;
  std::vector<ParamRef> params;
  std::vector<Record> records;
  OptimKind okind = OptimKind::NONE;
  agreed(c, [&] {
    params = all_params(root);
    okind = optim_kind(optimizer);
    records = make_records(params, optimizer, okind);
  });

  // Rank 0 owns the temporary directory; everyone writes into it.
  std::unique_ptr<AtomicDir> adir;
  std::string tmp;
  agreed(c, [&] {
    if (c.rank() != 0) return;
    adir = std::make_unique<AtomicDir>(dir);
    tmp = adir->path().string();
  });
  broadcast_string(c, tmp, 0);

  json index = new_index(options.type, c.size());
  if (options.type == StateDictType::FULL) {
    save_full(c, tmp, params, records, okind, root, options, index);
  } else {
    const bool local = options.type == StateDictType::LOCAL;
    // (M, kReportFields) what this rank wrote, for rank 0's index.
    auto report = at::zeros({static_cast<int64_t>(records.size()), kReportFields},
                            at::TensorOptions(at::kLong));
    agreed(c, [&] {
      auto rep = report.accessor<int64_t, 2>();
      std::vector<std::pair<std::string, at::Tensor>> tensors;
      for (size_t i = 0; i < records.size(); ++i) {
        const auto piece = own_piece(records[i], local);
        if (!piece.t.defined()) continue;
        tensors.emplace_back(records[i].name(), piece.t);
        set_report(rep[i], piece, checksum(piece.t), records[i].step);
      }
      if (!tensors.empty()) {
        detail::fault_before_write(c.rank(), (fs::path(tmp) / rank_file(local, c.rank())).string());
        save_safetensors(fs::path(tmp) / rank_file(local, c.rank()), tensors, {{"format", "pt"}});
      }
    });
    at::Tensor all = report.reshape({-1});
    if (c.multi()) {
      auto dev = report.reshape({-1}).to(c.device());
      auto gathered = at::empty({c.size() * dev.numel()}, dev.options());
      c.group->all_gather_into_tensor(gathered, dev, kTag);
      all = gathered.cpu();
    }
    agreed(c, [&] {
      if (c.rank() != 0) return;
      std::vector<RecordMeta> metas;
      for (const auto& r : records) metas.push_back(meta_of(r));
      store_sharded_index(metas, okind, local,
                          all.view({c.size(), static_cast<int64_t>(records.size()), kReportFields}),
                          index);
      auto buffers = model_buffers(root, options.skip_buffer);
      save_safetensors(fs::path(tmp) / kBuffersFile, buffers, {{"format", "pt"}});
      index["buffers"] = buffers_json(buffers, kBuffersFile);
    });
  }

  agreed(c, [&] {
    if (c.rank() != 0) return;
    write_extra_files(tmp, options.extra_files);
    write_json(fs::path(tmp) / kIndexFile, index);
    adir->commit();
  });
  if (c.multi()) c.group->barrier(kTag);  // nobody returns before the directory is there
}

// ---------------------------------------------------------------------------------------------
// An asynchronous save: the state copied now, the files written later (see pending_save.h)

namespace detail {

struct PendingSave::Impl {
  fs::path dir;
  std::string tmp;
  std::unique_ptr<AtomicDir> adir;  // rank 0
  int rank = 0, world = 1;
  StateDictType type = StateDictType::SHARDED;
  OptimKind okind = OptimKind::NONE;
  std::vector<RecordMeta> metas;
  std::map<std::string, std::string> extra_files;
  // SHARDED / LOCAL: this rank's pieces (record index, rows, CPU copy).
  std::vector<std::pair<size_t, OwnPiece>> own;
  // FULL, rank 0: full CPU copies of the parameters and of the optimizer state.
  std::vector<std::pair<std::string, at::Tensor>> full_model, full_optim;
  std::map<std::string, uint64_t> sums;  // FULL: filled by write_files
  std::vector<std::pair<std::string, at::Tensor>> buffers;  // rank 0, CPU copies
  bool written = false;
};

namespace {
at::Tensor cpu_copy(const at::Tensor& t) {
  return t.detach().to(t.options().device(at::kCPU), /*non_blocking=*/false, /*copy=*/true)
      .contiguous();
}
}  // namespace

PendingSave::PendingSave() : impl_(std::make_unique<Impl>()) {}
PendingSave::~PendingSave() = default;
const fs::path& PendingSave::dir() const { return impl_->dir; }
const std::string& PendingSave::tmp() const { return impl_->tmp; }
int PendingSave::rank() const { return impl_->rank; }
int PendingSave::world_size() const { return impl_->world; }

std::unique_ptr<PendingSave> PendingSave::begin(const fs::path& dir, torch::nn::Module& root,
                                                torch::optim::Optimizer* optimizer,
                                                const std::shared_ptr<dist::ProcessGroup>& group,
                                                const SaveOptions& options) {
  const Comm c{group};
  at::NoGradGuard no_grad;
  std::unique_ptr<PendingSave> ps(new PendingSave());
  auto& s = *ps->impl_;
  s.dir = dir;
  s.rank = c.rank();
  s.world = c.size();
  s.type = options.type;
  s.extra_files = options.extra_files;
  std::vector<ParamRef> params;
  std::vector<Record> records;
  agreed(c, [&] {
    params = all_params(root);
    s.okind = optim_kind(optimizer);
    records = make_records(params, optimizer, s.okind);
    for (const auto& r : records) s.metas.push_back(meta_of(r));
    if (c.rank() != 0) return;
    s.adir = std::make_unique<AtomicDir>(dir);
    s.tmp = s.adir->path().string();
  });
  broadcast_string(c, s.tmp, 0);
  if (options.type == StateDictType::FULL) {
    std::string err;  // rank 0 keeps joining the gathers after an error
    gather_full(root, records, s.okind, [&](bool is_optim, const std::string& name, const at::Tensor& full) {
      if (c.rank() != 0 || !err.empty()) return;
      try {
        (is_optim ? s.full_optim : s.full_model).emplace_back(name, cpu_copy(full));
      } catch (const std::exception& e) {
        err = e.what();
      }
    });
    agreed(c, [&] {
      if (!err.empty()) throw CheckpointError(err);
      if (c.rank() != 0) return;
      for (auto& st : full_steps(s.metas)) s.full_optim.push_back(std::move(st));
      for (const auto& [name, t] : model_buffers(root, options.skip_buffer)) s.buffers.emplace_back(name, cpu_copy(t));
    });
  } else {
    const bool local = options.type == StateDictType::LOCAL;
    agreed(c, [&] {
      for (size_t i = 0; i < records.size(); ++i) {
        auto piece = own_piece(records[i], local);
        if (!piece.t.defined()) continue;
        piece.t = cpu_copy(piece.t);
        s.own.emplace_back(i, std::move(piece));
      }
      if (c.rank() != 0) return;
      for (const auto& [name, t] : model_buffers(root, options.skip_buffer)) s.buffers.emplace_back(name, cpu_copy(t));
    });
  }
  return ps;
}

std::string PendingSave::write_files() {
  auto& s = *impl_;
  FSDPP_CHECK_AS(CheckpointError, !s.written, "[state] '{}': write_files() called twice", s.dir.string());
  s.written = true;
  const fs::path tmp = s.tmp;
  if (s.type == StateDictType::FULL) {
    if (s.rank != 0) return {};
    std::vector<std::pair<std::string, at::Tensor>> model = s.full_model;
    for (const auto& b : s.buffers) model.push_back(b);
    detail::fault_before_write(s.rank, (tmp / kModelFile).string());
    save_safetensors(tmp / kModelFile, model, {{"format", "pt"}});
    for (const auto& [name, t] : s.full_model) s.sums[name] = checksum(t);
    if (!s.full_optim.empty()) {
      detail::fault_before_write(s.rank, (tmp / kOptimFile).string());
      save_safetensors(tmp / kOptimFile, s.full_optim, {{"format", "pt"}});
      for (const auto& [name, t] : s.full_optim) s.sums[name] = checksum(t);
    }
    return {};
  }
  const bool local = s.type == StateDictType::LOCAL;
  auto report = at::zeros({static_cast<int64_t>(s.metas.size()), kReportFields},
                          at::TensorOptions(at::kLong));
  auto rep = report.accessor<int64_t, 2>();
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& [i, piece] : s.own) {
    tensors.emplace_back(s.metas[i].name, piece.t);
    set_report(rep[i], piece, checksum(piece.t), s.metas[i].step);
  }
  if (!tensors.empty()) {
    detail::fault_before_write(s.rank, (tmp / rank_file(local, s.rank)).string());
    save_safetensors(tmp / rank_file(local, s.rank), tensors, {{"format", "pt"}});
  }
  if (s.rank == 0) save_safetensors(tmp / kBuffersFile, s.buffers, {{"format", "pt"}});
  return std::string(static_cast<const char*>(report.data_ptr()), report.nbytes());
}

void PendingSave::commit(const std::vector<std::string>& reports) {
  auto& s = *impl_;
  FSDPP_CHECK_AS(CheckpointError, s.rank == 0 && s.adir && s.written,
                 "[state] '{}': commit() is rank 0's, after write_files()", s.dir.string());
  json index = new_index(s.type, s.world);
  if (s.type == StateDictType::FULL) {
    store_full_index(s.metas, s.okind, s.sums, s.buffers, index);
  } else {
    const int64_t m = static_cast<int64_t>(s.metas.size());
    FSDPP_CHECK_AS(CheckpointError, static_cast<int>(reports.size()) == s.world,
                   "[state] '{}': {} ranks reported; expected {}", s.dir.string(), reports.size(), s.world);
    auto all = at::empty({s.world, m, kReportFields}, at::TensorOptions(at::kLong));
    for (int q = 0; q < s.world; ++q) {
      FSDPP_CHECK_AS(CheckpointError, reports[q].size() == static_cast<size_t>(m * kReportFields * 8),
                     "[state] '{}': rank {} reported {} bytes; expected {}", s.dir.string(), q,
                     reports[q].size(), m * kReportFields * 8);
      std::memcpy(all[q].data_ptr(), reports[q].data(), reports[q].size());
    }
    store_sharded_index(s.metas, s.okind, s.type == StateDictType::LOCAL, all, index);
    index["buffers"] = buffers_json(s.buffers, kBuffersFile);
  }
  write_extra_files(s.tmp, s.extra_files);
  write_json(fs::path(s.tmp) / kIndexFile, index);
  s.adir->commit();
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Load

namespace {

struct Piece {
  std::string file, tensor;
  int64_t row_begin = 0, row_end = 0;
  std::optional<uint64_t> checksum;
};

struct Entry {
  std::vector<int64_t> shape;
  int64_t dim0 = 1, row_numel = 1, chunk_rows = 0;
  std::vector<Piece> pieces;
};

std::optional<uint64_t> parse_hex(const json& j) {
  if (!j.is_string()) return std::nullopt;
  return std::stoull(j.get<std::string>(), nullptr, 16);
}

Entry parse_entry(const json& j) {
  Entry e;
  e.shape = j.at("shape").get<std::vector<int64_t>>();
  e.dim0 = j.at("dim0").get<int64_t>();
  e.row_numel = j.at("row_numel").get<int64_t>();
  if (j.contains("chunk_rows")) e.chunk_rows = j.at("chunk_rows").get<int64_t>();
  for (const auto& p : j.at("pieces")) {
    Piece pc;
    pc.file = p.at("file").get<std::string>();
    pc.tensor = p.at("tensor").get<std::string>();
    pc.row_begin = p.at("row_begin").get<int64_t>();
    pc.row_end = p.at("row_end").get<int64_t>();
    if (p.contains("checksum")) pc.checksum = parse_hex(p.at("checksum"));
    e.pieces.push_back(std::move(pc));
  }
  return e;
}

Entry whole_entry(const std::string& file, const std::string& tensor, std::vector<int64_t> shape,
                  std::optional<uint64_t> sum) {
  Entry e;
  e.shape = std::move(shape);
  e.dim0 = e.shape.empty() ? 1 : e.shape[0];
  int64_t numel = 1;
  for (auto d : e.shape) numel *= d;
  e.row_numel = e.dim0 == 0 ? 0 : numel / e.dim0;
  e.pieces.push_back({file, tensor, 0, e.dim0, sum});
  return e;
}

struct Checkpoint {
  fs::path dir;
  std::string format;
  int world_size = 0;
  std::map<std::string, Entry> params;
  std::map<std::string, Entry> buffers;  // whole tensors
  std::string optim_type;                // empty: no optimizer state
  struct OptimParam {
    int64_t step = 0;
    std::map<std::string, Entry> states;
  };
  std::map<std::string, OptimParam> optim;
};

Checkpoint read_checkpoint(const fs::path& dir, torch::nn::Module& root,
                           const LoadOptions& options) {
  Checkpoint ck;
  ck.dir = dir;
  const fs::path index_path = dir / kIndexFile;
  std::error_code ec;
  if (!fs::exists(index_path, ec)) {
    // A Hugging Face style directory: model.safetensors with full tensors, no index.
    FSDPP_CHECK_AS(CheckpointError, fs::exists(dir / kModelFile, ec),
                   "[state] '{}': no {} and no {}; not a checkpoint directory", dir.string(),
                   kIndexFile, kModelFile);
    ck.format = kFormatFull;
    auto f = SafetensorsFile::open(dir / kModelFile);
    std::set<std::string> buffer_names;
    for (const auto& b : root.named_buffers(true)) buffer_names.insert(b.key());
    for (const auto& name : f.names()) {
      auto e = whole_entry(kModelFile, name, f.info(name).shape, std::nullopt);
      (buffer_names.count(name) ? ck.buffers : ck.params)[name] = std::move(e);
    }
    (void)options;
    return ck;
  }
  detail::require_regular_file(index_path, "checkpoint index");
  json j;
  try {
    std::ifstream in(index_path);
    FSDPP_CHECK_AS(CheckpointError, in.good(), "[state] '{}': cannot open", index_path.string());
    j = json::parse(in);
    detail::check_index_version(j, index_path);
    ck.format = j.at("format").get<std::string>();
    FSDPP_CHECK_AS(CheckpointError,
                   ck.format == kFormatSharded || ck.format == kFormatFull || ck.format == kFormatLocal,
                   "[state] '{}': unknown format '{}'; expected {}, {} or {}",
                   index_path.string(), ck.format, kFormatSharded, kFormatFull, kFormatLocal);
    ck.world_size = j.at("world_size").get<int>();
    for (const auto& [name, e] : j.at("params").items()) ck.params[name] = parse_entry(e);
    if (j.contains("buffers")) {
      const auto& b = j.at("buffers");
      const std::string file = b.at("file").get<std::string>();
      for (const auto& [name, e] : b.at("tensors").items()) {
        ck.buffers[name] = whole_entry(file, name, e.at("shape").get<std::vector<int64_t>>(),
                                       parse_hex(e.at("checksum")));
      }
    }
    if (j.contains("optim")) {
      ck.optim_type = j.at("optim").at("type").get<std::string>();
      for (const auto& [name, o] : j.at("optim").at("params").items()) {
        auto& op = ck.optim[name];
        op.step = o.at("step").get<int64_t>();
        for (const auto& [k, e] : o.at("states").items()) op.states[k] = parse_entry(e);
      }
    }
  } catch (const json::exception& e) {
    FSDPP_THROW(CheckpointError, "[state] '{}': malformed index: {}", index_path.string(), e.what());
  }
  return ck;
}

// Opened files, and the pieces whose checksums were verified.
struct Reader {
  fs::path dir;
  std::map<std::string, SafetensorsFile> files;
  std::set<std::pair<std::string, std::string>> verified;

  const SafetensorsFile& file(const std::string& name) {
    auto it = files.find(name);
    if (it == files.end()) {
      const fs::path path = dir / detail::checked_file_name(name, dir / kIndexFile);
      it = files.emplace(name, SafetensorsFile::open(path)).first;
    }
    return it->second;
  }
  at::Tensor data(const Piece& pc, int64_t row_numel) {
    const auto& f = file(pc.file);
    FSDPP_CHECK_AS(CheckpointError, f.contains(pc.tensor),
                   "[state] '{}': tensor '{}' is not in the file though {} lists it",
                   (dir / pc.file).string(), pc.tensor, kIndexFile);
    at::Tensor t;
    try {
      t = f.view(pc.tensor);
    } catch (const CheckpointError&) {
      t = f.get(pc.tensor);
    }
    const int64_t rows = pc.row_end - pc.row_begin;
    FSDPP_CHECK_AS(CheckpointError, t.numel() == rows * row_numel,
                   "[state] '{}': tensor '{}' has {} elements; the index says rows [{}, {}) of "
                   "{} elements each",
                   (dir / pc.file).string(), pc.tensor, t.numel(), pc.row_begin, pc.row_end,
                   row_numel);
    if (pc.checksum && verified.insert({pc.file, pc.tensor}).second) {
      const uint64_t got = checksum(t);
      if (got != *pc.checksum) {
        verified.erase({pc.file, pc.tensor});
        FSDPP_THROW(CheckpointError,
                    "[state] '{}': checksum mismatch for tensor '{}' (the index says {}, the data "
                    "gives {}); the file is corrupt",
                    (dir / pc.file).string(), pc.tensor, hex(*pc.checksum), hex(got));
      }
    }
    return t.reshape({rows, row_numel});
  }
  // Rows [begin, begin + rows) of the tensor `e` describes, from whichever pieces hold them,
  // into dst (rows, row_numel); with dst undefined it only checks (coverage, checksums).
  // `only_file` restricts the pieces to one file (LOCAL).
  void fill(const std::string& what, const Entry& e, int64_t begin, int64_t rows,
            const at::Tensor& dst, const std::string& only_file = "") {
    int64_t covered = 0;
    for (const auto& pc : e.pieces) {
      if (!only_file.empty() && pc.file != only_file) continue;
      const int64_t lo = std::max(begin, pc.row_begin);
      const int64_t hi = std::min(begin + rows, pc.row_end);
      if (lo >= hi) continue;
      auto src = data(pc, e.row_numel);
      covered += hi - lo;
      if (dst.defined()) {
        dst.narrow(0, lo - begin, hi - lo).copy_(src.narrow(0, lo - pc.row_begin, hi - lo));
      }
    }
    FSDPP_CHECK_AS(CheckpointError, covered == rows,
                   "[state] '{}': '{}' rows [{}, {}) are needed here but the pieces cover {} of "
                   "them",
                   dir.string(), what, begin, begin + rows, covered);
  }
};

std::string shape_str(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

}  // namespace

void load_state_dict(const fs::path& dir, torch::nn::Module& root,
                     torch::optim::Optimizer* optimizer,
                     const std::shared_ptr<dist::ProcessGroup>& group, const LoadOptions& options) {
  const Comm c{group};
  at::NoGradGuard no_grad;
  std::vector<ParamRef> params;
  OptimKind okind = OptimKind::NONE;
  Checkpoint ck;
  Reader reader;
  reader.dir = dir;
  const bool local = [&] {
    bool l = false;
    agreed(c, [&] {
      params = all_params(root);
      okind = optim_kind(optimizer);
      ck = read_checkpoint(dir, root, options);
      l = ck.format == kFormatLocal;
    });
    return l;
  }();
  const std::string own_file = fmt::format("local-{}.safetensors", c.rank());
  const std::string where = dir.string();

  // Where this rank's rows of a tensor come from: (begin, rows) in the entry's row space.
  auto own_rows = [&](const FSDPParam& p) -> std::pair<int64_t, int64_t> {
    if (local) return {0, p.chunk_rows};
    return {p.shard_rank * p.chunk_rows, p.rows_of_rank(p.shard_rank)};
  };
  auto check_entry = [&](const std::string& what, const FSDPParam& p, const Entry& e) {
    FSDPP_CHECK_AS(CheckpointError, e.shape == p.shape,
                   "[state] '{}': '{}' has shape {} in the checkpoint but {} in the model", where,
                   what, shape_str(e.shape), shape_str(p.shape));
    if (local) {
      FSDPP_CHECK_AS(CheckpointError, e.chunk_rows == p.chunk_rows,
                     "[state] '{}': LOCAL checkpoint shards '{}' in chunks of {} rows but this "
                     "model's shards have {}; the sharding changed (load a SHARDED or FULL "
                     "checkpoint instead)", where, what, e.chunk_rows, p.chunk_rows);
    }
  };
  // Rows into a (chunk_rows, row_numel) view of `dst` (the padded shard); undefined: check only.
  auto load_rows = [&](const std::string& what, const FSDPParam& p, const Entry& e,
                       const at::Tensor& dst) {
    auto [begin, rows] = own_rows(p);
    at::Tensor d;
    if (dst.defined()) d = dst.view({p.chunk_rows, p.row_numel}).narrow(0, 0, rows);
    if (rows > 0) reader.fill(what, e, begin, rows, d, local ? own_file : "");
  };

  // Phase 1: check everything, change nothing.
  agreed(c, [&] {
    if (local) {
      FSDPP_CHECK_AS(CheckpointError, ck.world_size == c.size(),
                     "[state] '{}': a LOCAL checkpoint saved on {} rank{} cannot be loaded on {} "
                     "rank{}; save it as SHARDED or FULL to change the world size",
                     where, ck.world_size, ck.world_size == 1 ? "" : "s", c.size(),
                     c.size() == 1 ? "" : "s");
    }
    std::set<std::string> model_names;
    for (const auto& r : params) {
      const auto& p = *r.p;
      model_names.insert(p.fqn);
      auto it = ck.params.find(p.fqn);
      FSDPP_CHECK_AS(CheckpointError, it != ck.params.end(),
                     "[state] '{}': parameter '{}' of the model is missing from the checkpoint",
                     where, p.fqn);
      check_entry(p.fqn, p, it->second);
      load_rows(p.fqn, p, it->second, at::Tensor());
    }
    for (const auto& [name, e] : ck.params) {
      FSDPP_CHECK_AS(CheckpointError, model_names.count(name),
                     "[state] '{}': unexpected tensor '{}' in the checkpoint: the model has no "
                     "parameter or buffer of that name", where, name);
    }
    std::set<std::string> buffer_names;
    for (const auto& b : root.named_buffers(true)) {
      if (!b.value().defined()) continue;
      buffer_names.insert(b.key());
      auto it = ck.buffers.find(b.key());
      if (it == ck.buffers.end()) {
        FSDPP_CHECK_AS(CheckpointError, options.skip_buffer && options.skip_buffer(b.key()),
                       "[state] '{}': buffer '{}' of the model is missing from the checkpoint",
                       where, b.key());
        continue;
      }
      FSDPP_CHECK_AS(CheckpointError, it->second.shape == b.value().sizes().vec(),
                     "[state] '{}': buffer '{}' has shape {} in the checkpoint but {} in the "
                     "model", where, b.key(), shape_str(it->second.shape),
                     shape_str(b.value().sizes().vec()));
      reader.fill(b.key(), it->second, 0, it->second.dim0, at::Tensor());
    }
    for (const auto& [name, e] : ck.buffers) {
      FSDPP_CHECK_AS(CheckpointError, buffer_names.count(name),
                     "[state] '{}': unexpected buffer '{}' in the checkpoint: the model has no "
                     "buffer of that name", where, name);
    }
    if (okind != OptimKind::NONE && !ck.optim_type.empty()) {
      FSDPP_CHECK_AS(CheckpointError, ck.optim_type == optim_name(okind),
                     "[state] '{}': the checkpoint holds {} state but the optimizer is {}", where,
                     ck.optim_type, optim_name(okind));
      std::set<const void*> held;
      for (const auto& g : optimizer->param_groups()) {
        for (const auto& t : g.params()) held.insert(t.unsafeGetTensorImpl());
      }
      std::map<std::string, const FSDPParam*> by_name;
      for (const auto& r : params) by_name[r.p->fqn] = r.p;
      for (const auto& [name, op] : ck.optim) {
        auto it = by_name.find(name);
        FSDPP_CHECK_AS(CheckpointError, it != by_name.end(),
                       "[state] '{}': optimizer state for '{}', which the model does not have",
                       where, name);
        const auto& p = *it->second;
        FSDPP_CHECK_AS(CheckpointError, held.count(p.param.unsafeGetTensorImpl()),
                       "[state] '{}': the optimizer does not hold parameter '{}'; make it on "
                       "model->parameters() after fully_shard", where, name);
        for (const auto& [k, e] : op.states) {
          FSDPP_CHECK_AS(CheckpointError,
                         std::find(kStateNames.begin(), kStateNames.end(), k) != kStateNames.end(),
                         "[state] '{}': unknown optimizer state '{}' for '{}'", where, k, name);
          const std::string what = "optim." + name + "." + k;
          check_entry(what, p, e);
          load_rows(what, p, e, at::Tensor());
        }
      }
    }
  });

  // Phase 2: copy.
  agreed(c, [&] {
    for (const auto& r : params) {
      auto& p = *r.p;
      // Through the registered parameter, so that its version counter moves and a unit that
      // keeps gathered parameters (ZERO1) gathers again.
      auto dst = at::empty_like(p.shard);
      dst.copy_(p.shard);
      load_rows(p.fqn, p, ck.params.at(p.fqn), dst);
      p.param.detach().copy_(dst);
    }
    std::map<std::string, at::Tensor> buffers;
    for (const auto& b : root.named_buffers(true)) buffers[b.key()] = b.value();
    for (const auto& [name, e] : ck.buffers) {
      auto& t = buffers.at(name);
      auto tmp = at::empty(e.shape, t.options().device(at::kCPU));
      reader.fill(name, e, 0, e.dim0, tmp.view({e.dim0, e.row_numel}));
      t.copy_(tmp);
    }
    if (okind != OptimKind::NONE && !ck.optim_type.empty()) {
      for (const auto& r : params) {
        auto& p = *r.p;
        OptimState st;
        auto it = ck.optim.find(p.fqn);
        if (it != ck.optim.end()) {
          st.present = true;
          st.step = it->second.step;
          for (const auto& [k, e] : it->second.states) {
            auto t = at::zeros_like(p.shard);
            load_rows("optim." + p.fqn + "." + k, p, e, t);
            st.tensors[k] = t;
          }
        }
        set_state(*optimizer, okind, p.param, st);
      }
    }
  });
}

}  // namespace fsdpp::state

namespace fsdpp::state::detail {

void fault_before_write(int rank, const std::string& file) {
  if (const char* v = std::getenv("FSDPP_FAULT_SAVE_DELAY_MS"); v && *v) {
    char* end = nullptr;
    const long ms = std::strtol(v, &end, 10);
    if (end != v && *end == '\0' && ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  }
  if (const char* v = std::getenv("FSDPP_FAULT_SAVE_FAIL"); v && *v && std::to_string(rank) == v) {
    FSDPP_THROW(CheckpointError, "[state] '{}': write failed (FSDPP_FAULT_SAVE_FAIL={} injected it)",
                file, v);
  }
}

}  // namespace fsdpp::state::detail
