// save_state_dict: FULL, SHARDED and LOCAL checkpoints written while the caller waits. See
// include/fsdpp/state/state_dict.h; the asynchronous save is in async_save.cpp.
#include <ATen/ATen.h>

#include <memory>
#include <set>

#include "agree.h"
#include "checkpoint_index.h"
#include "fsdpp/common/error.h"
#include "fsdpp/state/atomic_dir.h"
#include "fsdpp/state/safetensors.h"
#include "fsdpp/state/state_dict.h"
#include "parts.h"
#include "records.h"

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
using namespace detail;

// Rank 0 writes model.safetensors and optim.safetensors, streaming each unit's full tensors as
// the gathers produce them; every rank joins the gathers. Tensors of a model in parts that rank
// 0 does not hold come from the lowest rank that does, after the gathers.
void save_full(const Comm& c, const fs::path& tmp, const std::vector<Record>& records,
               const MergedRecords& merged, const NamedTensors& buffers,
               const SaveOptions& options, CheckpointIndex& index) {
  const bool writer = c.rank() == 0;
  const auto& metas = merged.metas;
  const auto steps = full_steps(metas);
  std::unique_ptr<SafetensorsWriter> model_w, optim_w;
  std::string err;  // rank 0's first error; it keeps joining the gathers after one
  std::map<std::string, uint64_t> sums;
  if (writer) {
    try {
      if (options.before_write) options.before_write(c.rank(), (tmp / kModelFile).string());
      model_w = std::make_unique<SafetensorsWriter>(tmp / kModelFile,
                                                    std::map<std::string, std::string>{{"format", "pt"}});
      for (const auto& m : metas) {
        if (m.state.empty()) model_w->declare(m.fqn, m.dtype, m.shape);
      }
      for (const auto& [name, t] : buffers) model_w->declare(name, t.scalar_type(), t.sizes());
      if (!steps.empty()) {
        optim_w = std::make_unique<SafetensorsWriter>(tmp / kOptimFile,
                                                      std::map<std::string, std::string>{{"format", "pt"}});
        for (const auto& m : metas) {
          if (m.state.empty() || !m.defined) continue;
          optim_w->declare(m.name, m.dtype, m.shape);
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
  // What this rank sends to rank 0 after the gathers: the tensors it is the first holder of.
  std::map<size_t, at::Tensor> to_send;
  gather_full_records(records, [&](bool is_optim, const std::string& name, const at::Tensor& full) {
    if (writer) return write(is_optim ? optim_w.get() : model_w.get(), name, full);
    const size_t g = merged.index.at(name);
    if (merged.holder[g] == c.rank()) to_send[g] = full.contiguous().clone();
  });
  // In the order of the merged records, which every rank knows.
  for (size_t g = 0; g < metas.size(); ++g) {
    const auto& m = metas[g];
    if (merged.holder[g] == 0 || !m.defined) continue;
    if (writer) {
      auto t = at::empty(m.shape, at::TensorOptions(m.dtype).device(c.device()));
      c.group->recv(t, merged.holder[g], 0, kStateTag);
      write(m.state.empty() ? model_w.get() : optim_w.get(), m.name, t.cpu());
    } else if (merged.holder[g] == c.rank()) {
      // Every holder of a stage gathered it (gather_full_records), so it is here.
      c.group->send(to_send.at(g).to(c.device()), 0, 0, kStateTag);
    }
  }
  agreed(c, [&] {
    if (!writer) return;
    if (!err.empty()) throw CheckpointError(err);
    for (const auto& [name, t] : buffers) write(model_w.get(), name, t);
    for (const auto& [name, t] : steps) write(optim_w.get(), name, t);
    if (!err.empty()) throw CheckpointError(err);
    model_w->commit();
    if (optim_w) optim_w->commit();
    add_full_entries(index, metas, sums);
    add_buffers(index, buffers, kModelFile);
  });
}

// Every rank writes the rows it holds (SHARDED) or its padded shards (LOCAL) and reports them;
// rank 0 makes the index from the reports and writes the buffers.
void save_sharded(const Comm& c, const fs::path& tmp, bool local, const std::vector<Record>& records,
                  const MergedRecords& merged, const NamedTensors& buffers,
                  const SaveOptions& options, CheckpointIndex& index) {
  // (M, kReportFields) what this rank wrote, for rank 0's index, by place in the merged records.
  const auto M = static_cast<int64_t>(merged.metas.size());
  auto report = at::zeros({M, kReportFields}, at::TensorOptions(at::kLong));
  agreed(c, [&] {
    auto rep = report.accessor<int64_t, 2>();
    NamedTensors tensors;
    for (size_t i = 0; i < records.size(); ++i) {
      const auto piece = own_piece(records[i], local);
      if (!piece.t.defined()) continue;
      tensors.emplace_back(records[i].name(), piece.t);
      set_report(rep[static_cast<int64_t>(merged.local[i])], piece, checksum(piece.t), records[i].step);
    }
    if (!tensors.empty()) {
      const fs::path file = tmp / rank_file(local, c.rank());
      if (options.before_write) options.before_write(c.rank(), file.string());
      save_safetensors(file, tensors, {{"format", "pt"}});
    }
  });
  at::Tensor all = report.reshape({-1});
  if (c.multi()) {
    auto dev = report.reshape({-1}).to(c.device());
    auto gathered = at::empty({c.size() * dev.numel()}, dev.options());
    c.group->all_gather_into_tensor(gathered, dev, kStateTag);
    all = gathered.cpu();
  }
  agreed(c, [&] {
    if (c.rank() != 0) return;
    add_sharded_entries(index, merged.metas, local, all.view({c.size(), M, kReportFields}));
    save_safetensors(tmp / kBuffersFile, buffers, {{"format", "pt"}});
    add_buffers(index, buffers, kBuffersFile);
  });
}

}  // namespace

void save_state_dict(const fs::path& dir, torch::nn::Module& root, torch::optim::Optimizer* optimizer,
                     const std::shared_ptr<dist::ProcessGroup>& group, const SaveOptions& options) {
  save_state_dict(dir, std::vector<torch::nn::Module*>{&root}, optimizer, group, options);
}

void save_state_dict(const fs::path& dir, const std::vector<torch::nn::Module*>& parts,
                     torch::optim::Optimizer* optimizer,
                     const std::shared_ptr<dist::ProcessGroup>& group, const SaveOptions& options) {
  const Comm c{group};
  at::NoGradGuard no_grad;
  std::vector<ShardedParam> params;
  std::vector<Record> records;
  std::optional<OptimizerKind> kind;
  NamedTensors buffers;
  agreed(c, [&] {
    params = parts_params(parts);
    kind = optimizer_kind_of(optimizer);
    records = make_records(params, optimizer, kind);
    buffers = parts_buffers(parts, options.skip_buffer);
  });
  if (options.type != StateDictType::FULL) gather_record_rows(records);
  const MergedRecords merged = merge_records(c, metas_of(records));
  check_buffers_on_rank0(c, buffers);

  // Rank 0 owns the temporary directory; everyone writes into it.
  std::unique_ptr<AtomicDir> adir;
  std::string tmp;
  agreed(c, [&] {
    if (c.rank() != 0) return;
    adir = std::make_unique<AtomicDir>(dir);
    tmp = adir->path().string();
  });
  broadcast_string(c, tmp, 0);

  auto index = new_index(options.type, c.size(), kind);
  if (options.type == StateDictType::FULL) {
    save_full(c, tmp, records, merged, buffers, options, index);
  } else {
    save_sharded(c, tmp, options.type == StateDictType::LOCAL, records, merged, buffers, options, index);
  }
  agreed(c, [&] {
    if (c.rank() != 0) return;
    write_extra_files(tmp, options.extra_files);
    write_index(tmp, index);
    adir->commit();
  });
  if (c.multi()) c.group->barrier(kStateTag);  // nobody returns before the directory is there
}

}  // namespace fsdpp::state
