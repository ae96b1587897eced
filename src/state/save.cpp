// save_state_dict: FULL, SHARDED and LOCAL checkpoints written while the caller waits. See
// include/fsdpp/state/state_dict.h; the asynchronous save is in async_save.cpp.
#include <ATen/ATen.h>

#include <memory>

#include "agree.h"
#include "checkpoint_index.h"
#include "fsdpp/common/error.h"
#include "fsdpp/state/atomic_dir.h"
#include "fsdpp/state/safetensors.h"
#include "fsdpp/state/state_dict.h"
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
// the gathers produce them; every rank joins the gathers.
void save_full(const Comm& c, const fs::path& tmp, const std::vector<ShardedParam>& params,
               const std::vector<Record>& records, torch::nn::Module& root,
               const SaveOptions& options, CheckpointIndex& index) {
  const bool writer = c.rank() == 0;
  const auto buffers = model_buffers(root, options.skip_buffer);
  const auto metas = metas_of(records);
  const auto steps = full_steps(metas);
  std::unique_ptr<SafetensorsWriter> model_w, optim_w;
  std::string err;  // rank 0's first error; it keeps joining the gathers after one
  std::map<std::string, uint64_t> sums;
  if (writer) {
    try {
      if (options.before_write) options.before_write(c.rank(), (tmp / kModelFile).string());
      model_w = std::make_unique<SafetensorsWriter>(tmp / kModelFile,
                                                    std::map<std::string, std::string>{{"format", "pt"}});
      for (const auto& p : params) model_w->declare(p.fqn, p.local_shard.scalar_type(), p.global_shape);
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
  gather_full_records(records, [&](bool is_optim, const std::string& name, const at::Tensor& full) {
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
    add_full_entries(index, metas, sums);
    add_buffers(index, buffers, kModelFile);
  });
}

// Every rank writes the rows it holds (SHARDED) or its padded shards (LOCAL) and reports them;
// rank 0 makes the index from the reports and writes the buffers.
void save_sharded(const Comm& c, const fs::path& tmp, bool local, const std::vector<Record>& records,
                  torch::nn::Module& root, const SaveOptions& options, CheckpointIndex& index) {
  // (M, kReportFields) what this rank wrote, for rank 0's index.
  auto report =
      at::zeros({static_cast<int64_t>(records.size()), kReportFields}, at::TensorOptions(at::kLong));
  agreed(c, [&] {
    auto rep = report.accessor<int64_t, 2>();
    NamedTensors tensors;
    for (size_t i = 0; i < records.size(); ++i) {
      const auto piece = own_piece(records[i], local);
      if (!piece.t.defined()) continue;
      tensors.emplace_back(records[i].name(), piece.t);
      set_report(rep[i], piece, checksum(piece.t), records[i].step);
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
    add_sharded_entries(index, metas_of(records), local,
                        all.view({c.size(), static_cast<int64_t>(records.size()), kReportFields}));
    const auto buffers = model_buffers(root, options.skip_buffer);
    save_safetensors(tmp / kBuffersFile, buffers, {{"format", "pt"}});
    add_buffers(index, buffers, kBuffersFile);
  });
}

}  // namespace

void save_state_dict(const fs::path& dir, torch::nn::Module& root, torch::optim::Optimizer* optimizer,
                     const std::shared_ptr<dist::ProcessGroup>& group, const SaveOptions& options) {
  const Comm c{group};
  at::NoGradGuard no_grad;
  std::vector<ShardedParam> params;
  std::vector<Record> records;
  std::optional<OptimizerKind> kind;
  agreed(c, [&] {
    params = model_params(root);
    kind = optimizer_kind_of(optimizer);
    records = make_records(params, optimizer, kind);
  });
  if (options.type != StateDictType::FULL) gather_record_rows(records);

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
    save_full(c, tmp, params, records, root, options, index);
  } else {
    save_sharded(c, tmp, options.type == StateDictType::LOCAL, records, root, options, index);
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
