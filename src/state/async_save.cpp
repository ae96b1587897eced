// AsyncSaver: the snapshot on the training thread (PendingSave::begin), the files on a writer
// thread (write_files), cross-rank completion through the rendezvous store (commit). See
// include/fsdpp/state/async_save.h.
#include "fsdpp/state/async_save.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstring>
#include <set>
#include <thread>

#include "agree.h"
#include "checkpoint_index.h"
#include "fsdpp/common/error.h"
#include "fsdpp/state/atomic_dir.h"
#include "fsdpp/state/safetensors.h"
#include "parts.h"
#include "records.h"

namespace fsdpp::state {
namespace detail {

// A save split in two. begin() (collective, on the training thread) copies what this rank must
// write to CPU memory and opens the checkpoint's temporary directory; write_files() (no
// collective, any thread) writes this rank's files and returns its report (what it wrote, with
// checksums); commit() (rank 0, no collective, once every rank's write_files() has returned)
// writes index.json and the extra files and moves the directory into place. Destroyed without
// commit(), rank 0's copy deletes the temporary directory.
class PendingSave {
 public:
  // Collective over `group`, like save_state_dict. FULL gathers every unit and keeps the full
  // tensors (parameters and optimizer state) on rank 0; SHARDED and LOCAL copy each rank's
  // own pieces.
  // `parts`: this rank's parts of a model held in parts (parts.h), or the one root.
  PendingSave(const std::filesystem::path& dir, const std::vector<torch::nn::Module*>& parts,
              torch::optim::Optimizer* optimizer,
              const std::shared_ptr<dist::ProcessGroup>& group, const SaveOptions& options);
  std::string write_files();
  // Rank 0: every rank's report in rank order.
  void commit(const std::vector<std::string>& reports);

  std::filesystem::path dir;
  std::string tmp;  // the temporary directory, unique to this save
  int rank = 0, world = 1;

 private:
  std::unique_ptr<AtomicDir> adir_;  // rank 0
  StateDictType type_ = StateDictType::SHARDED;
  std::optional<OptimizerKind> kind_;
  std::vector<RecordMeta> metas_;
  std::map<std::string, std::string> extra_files_;
  std::function<void(int, const std::string&)> before_write_;  // SaveOptions::before_write
  // SHARDED / LOCAL: this rank's pieces (index in metas_, rows, CPU copy).
  std::vector<std::pair<size_t, OwnPiece>> own_;
  // FULL, rank 0: full CPU copies of the parameters and of the optimizer state.
  NamedTensors full_model_, full_optim_;
  std::map<std::string, uint64_t> sums_;  // FULL: filled by write_files
  NamedTensors buffers_;                  // rank 0, CPU copies
  bool written_ = false;
};

namespace {
at::Tensor cpu_copy(const at::Tensor& t) {
  return t.detach().to(t.options().device(at::kCPU), /*non_blocking=*/false, /*copy=*/true).contiguous();
}
}  // namespace

PendingSave::PendingSave(const std::filesystem::path& target,
                         const std::vector<torch::nn::Module*>& parts,
                         torch::optim::Optimizer* optimizer,
                         const std::shared_ptr<dist::ProcessGroup>& group, const SaveOptions& options)
    : dir(target), type_(options.type), extra_files_(options.extra_files),
      before_write_(options.before_write) {
  const Comm c{group};
  at::NoGradGuard no_grad;
  rank = c.rank();
  world = c.size();
  std::vector<ShardedParam> params;
  std::vector<Record> records;
  NamedTensors buffers;
  agreed(c, [&] {
    params = parts_params(parts);
    kind_ = optimizer_kind_of(optimizer);
    records = make_records(params, optimizer, kind_);
    buffers = parts_buffers(parts, options.skip_buffer);
    if (c.rank() != 0) return;
    adir_ = std::make_unique<AtomicDir>(dir);
    tmp = adir_->path().string();
  });
  if (type_ != StateDictType::FULL) gather_record_rows(records);
  // Every rank's records by name (a model in parts: each rank its own), as save_state_dict.
  const MergedRecords merged = merge_records(c, metas_of(records));
  metas_ = merged.metas;
  check_buffers_on_rank0(c, buffers);
  broadcast_string(c, tmp, 0);
  if (type_ == StateDictType::FULL) {
    std::string err;  // rank 0 keeps joining the gathers after an error
    std::map<size_t, at::Tensor> to_send;  // tensors rank 0 does not hold, from their first holder
    gather_full_records(records, [&](bool is_optim, const std::string& name, const at::Tensor& full) {
      if (c.rank() != 0) {
        const size_t g = merged.index.at(name);
        if (merged.holder[g] == c.rank()) to_send[g] = full.contiguous().clone();
        return;
      }
      if (!err.empty()) return;
      try {
        (is_optim ? full_optim_ : full_model_).emplace_back(name, cpu_copy(full));
      } catch (const std::exception& e) {
        err = e.what();
      }
    });
    for (size_t g = 0; g < metas_.size(); ++g) {
      const auto& m = metas_[g];
      if (merged.holder[g] == 0 || !m.defined) continue;
      if (c.rank() == 0) {
        auto t = at::empty(m.shape, at::TensorOptions(m.dtype).device(c.device()));
        c.group->recv(t, merged.holder[g], 0, kStateTag);
        (m.state.empty() ? full_model_ : full_optim_).emplace_back(m.name, cpu_copy(t));
      } else if (merged.holder[g] == c.rank()) {
        c.group->send(to_send.at(g).to(c.device()), 0, 0, kStateTag);
      }
    }
    agreed(c, [&] {
      if (!err.empty()) throw CheckpointError(err);
      if (c.rank() != 0) return;
      for (auto& st : full_steps(metas_)) full_optim_.push_back(std::move(st));
      for (const auto& [name, t] : buffers) buffers_.emplace_back(name, cpu_copy(t));
    });
  } else {
    const bool local = type_ == StateDictType::LOCAL;
    agreed(c, [&] {
      for (size_t i = 0; i < records.size(); ++i) {
        auto piece = own_piece(records[i], local);
        if (!piece.t.defined()) continue;
        piece.t = cpu_copy(piece.t);
        own_.emplace_back(merged.local[i], std::move(piece));
      }
      if (c.rank() != 0) return;
      for (const auto& [name, t] : buffers) buffers_.emplace_back(name, cpu_copy(t));
    });
  }
}

std::string PendingSave::write_files() {
  FSDPP_CHECK_AS(CheckpointError, !written_, "[state] '{}': write_files() called twice", dir.string());
  written_ = true;
  const std::filesystem::path t = tmp;
  if (type_ == StateDictType::FULL) {
    if (rank != 0) return {};
    NamedTensors model = full_model_;
    for (const auto& b : buffers_) model.push_back(b);
    if (before_write_) before_write_(rank, (t / kModelFile).string());
    save_safetensors(t / kModelFile, model, {{"format", "pt"}});
    for (const auto& [name, v] : full_model_) sums_[name] = checksum(v);
    if (!full_optim_.empty()) {
      if (before_write_) before_write_(rank, (t / kOptimFile).string());
      save_safetensors(t / kOptimFile, full_optim_, {{"format", "pt"}});
      for (const auto& [name, v] : full_optim_) sums_[name] = checksum(v);
    }
    return {};
  }
  const bool local = type_ == StateDictType::LOCAL;
  auto report =
      at::zeros({static_cast<int64_t>(metas_.size()), kReportFields}, at::TensorOptions(at::kLong));
  auto rep = report.accessor<int64_t, 2>();
  NamedTensors tensors;
  for (const auto& [i, piece] : own_) {
    tensors.emplace_back(metas_[i].name, piece.t);
    set_report(rep[i], piece, checksum(piece.t), metas_[i].step);
  }
  if (!tensors.empty()) {
    if (before_write_) before_write_(rank, (t / rank_file(local, rank)).string());
    save_safetensors(t / rank_file(local, rank), tensors, {{"format", "pt"}});
  }
  if (rank == 0) save_safetensors(t / kBuffersFile, buffers_, {{"format", "pt"}});
  return std::string(static_cast<const char*>(report.data_ptr()), report.nbytes());
}

void PendingSave::commit(const std::vector<std::string>& reports) {
  FSDPP_CHECK_AS(CheckpointError, rank == 0 && adir_ && written_,
                 "[state] '{}': commit() is rank 0's, after write_files()", dir.string());
  auto index = new_index(type_, world, kind_);
  if (type_ == StateDictType::FULL) {
    add_full_entries(index, metas_, sums_);
    add_buffers(index, buffers_, kModelFile);
  } else {
    const int64_t m = static_cast<int64_t>(metas_.size());
    FSDPP_CHECK_AS(CheckpointError, static_cast<int>(reports.size()) == world,
                   "[state] '{}': {} ranks reported; expected {}", dir.string(), reports.size(), world);
    auto all = at::empty({world, m, kReportFields}, at::TensorOptions(at::kLong));
    for (int q = 0; q < world; ++q) {
      FSDPP_CHECK_AS(CheckpointError, reports[q].size() == static_cast<size_t>(m * kReportFields * 8),
                     "[state] '{}': rank {} reported {} bytes; expected {}", dir.string(), q,
                     reports[q].size(), m * kReportFields * 8);
      std::memcpy(all[q].data_ptr(), reports[q].data(), reports[q].size());
    }
    add_sharded_entries(index, metas_, type_ == StateDictType::LOCAL, all);
    add_buffers(index, buffers_, kBuffersFile);
  }
  write_extra_files(tmp, extra_files_);
  write_index(tmp, index);
  adir_->commit();
}

}  // namespace detail

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

std::vector<uint8_t> encode(const std::string& err, const std::string& report) {
  std::vector<uint8_t> v;
  v.reserve(1 + (err.empty() ? report.size() : err.size()));
  v.push_back(err.empty() ? 'O' : 'E');
  const std::string& body = err.empty() ? report : err;
  v.insert(v.end(), body.begin(), body.end());
  return v;
}

// (ok, report or error message)
std::pair<bool, std::string> decode(const std::vector<uint8_t>& v) {
  if (v.empty()) return {false, "[state] empty report in the store"};
  return {v[0] == 'O', std::string(v.begin() + 1, v.end())};
}

// Polls the store (the writer's own client) until every key is there. The training thread's
// collectives never wait on this: only writer threads do.
void wait_keys(c10d::Store& store, const std::vector<std::string>& keys,
               std::chrono::milliseconds timeout, const std::string& what) {
  const auto deadline = Clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  while (!store.check(keys)) {
    if (Clock::now() > deadline) {
      std::string missing;
      for (const auto& k : keys) {
        if (!store.check({k})) missing += (missing.empty() ? "" : ", ") + k;
      }
      FSDPP_THROW(TimeoutError, "[state] {}: waited {} s for store key(s) {}", what,
                  timeout.count() / 1000.0, missing);
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

}  // namespace

struct AsyncSaver::State {
  detail::Comm comm;
  c10::intrusive_ptr<c10d::Store> store;  // the writer threads' own client
  std::chrono::milliseconds timeout{0};
  std::thread writer;
  bool in_flight = false;
  fs::path dir;
  std::string error;  // written by the writer, read after join()
  double snapshot_ms = 0, write_ms = 0;
};

AsyncSaver::AsyncSaver(std::shared_ptr<dist::ProcessGroup> group,
                       c10::intrusive_ptr<c10d::Store> store, std::chrono::milliseconds timeout)
    : s_(std::make_unique<State>()) {
  s_->comm.group = std::move(group);
  if (s_->comm.multi()) {
    FSDPP_CHECK_AS(CheckpointError, store,
                   "[state] AsyncSaver over {} ranks needs the rendezvous store (World::store())",
                   s_->comm.size());
    // A client of its own: a writer waiting on the store never holds up the training thread's.
    s_->store = store->clone();
    s_->timeout = timeout.count() > 0 ? timeout : store->getTimeout();
  }
}

AsyncSaver::~AsyncSaver() {
  if (s_ && s_->writer.joinable()) s_->writer.join();
}

bool AsyncSaver::in_flight() const { return s_->in_flight; }
double AsyncSaver::last_snapshot_ms() const { return s_->snapshot_ms; }
double AsyncSaver::last_write_ms() const { return s_->write_ms; }

void AsyncSaver::wait() {
  auto& s = *s_;
  if (!s.in_flight) return;  // the same on every rank: save() and wait() are collective
  if (s.writer.joinable()) s.writer.join();
  s.in_flight = false;
  const std::string err = std::move(s.error);
  s.error.clear();
  detail::agreed(s.comm, [&] {
    if (!err.empty()) {
      FSDPP_THROW(CheckpointError, "[state] asynchronous save of '{}' failed: {}", s.dir.string(), err);
    }
  });
}

void AsyncSaver::save(const fs::path& dir, torch::nn::Module& root,
                      torch::optim::Optimizer* optimizer, const SaveOptions& options,
                      std::function<void()> on_committed) {
  save(dir, std::vector<torch::nn::Module*>{&root}, optimizer, options, std::move(on_committed));
}

void AsyncSaver::save(const fs::path& dir, const std::vector<torch::nn::Module*>& parts,
                      torch::optim::Optimizer* optimizer, const SaveOptions& options,
                      std::function<void()> on_committed) {
  wait();
  auto& s = *s_;
  const auto t0 = Clock::now();
  auto pending = std::make_shared<detail::PendingSave>(dir, parts, optimizer, s.comm.group, options);
  s.snapshot_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  s.dir = dir;
  s.error.clear();
  s.write_ms = 0;
  s.in_flight = true;
  // Store keys unique to this save: the temporary directory's name is (pid + random).
  const std::string prefix =
      "fsdpp/async_save/" + fs::path(pending->tmp).filename().string() + "/";
  s.writer = std::thread([this, pending, prefix, on_committed = std::move(on_committed)]() mutable {
    auto& st = *s_;
    const auto w0 = Clock::now();
    const int rank = pending->rank, world = pending->world;
    const std::string what =
        fmt::format("asynchronous save of '{}' (rank {})", pending->dir.string(), rank);
    std::string err, report;
    try {
      report = pending->write_files();
    } catch (const std::exception& e) {
      err = e.what();
    }
    try {
      if (world == 1) {
        if (err.empty()) {
          pending->commit({report});
          if (on_committed) on_committed();
        }
      } else {
        auto& store = *st.store;
        store.set(prefix + std::to_string(rank), encode(err, report));
        if (rank == 0) {
          // Every rank's files are written (or failed) before anything is committed.
          std::vector<std::string> keys;
          for (int q = 0; q < world; ++q) keys.push_back(prefix + std::to_string(q));
          std::string verdict;
          try {
            wait_keys(store, keys, st.timeout, what);
            std::vector<std::string> reports;
            for (int q = 0; q < world; ++q) {
              auto [ok, body] = decode(store.get(keys[q]));
              if (!ok && verdict.empty()) verdict = q == 0 ? body : fmt::format("{} (on rank {})", body, q);
              reports.push_back(std::move(body));
            }
            if (verdict.empty()) {
              pending->commit(reports);
              if (on_committed) on_committed();
            }
          } catch (const std::exception& e) {
            if (verdict.empty()) verdict = e.what();
          }
          store.set(prefix + "done", encode(verdict, ""));
          for (const auto& k : keys) store.deleteKey(k);
          if (err.empty()) err = verdict;
        } else {
          wait_keys(store, {prefix + "done"}, st.timeout, what);
          auto [ok, body] = decode(store.get(prefix + "done"));
          if (!ok && err.empty()) err = body;
        }
      }
    } catch (const std::exception& e) {
      if (err.empty()) err = e.what();
    }
    pending.reset();  // rank 0: an uncommitted temporary directory is deleted here
    st.write_ms = std::chrono::duration<double, std::milli>(Clock::now() - w0).count();
    st.error = err;
  });
}

}  // namespace fsdpp::state
