// AsyncSaver: the snapshot on the training thread, the files on a writer thread, cross-rank
// completion through the rendezvous store. See include/fsdpp/state/async_save.h.
#include "fsdpp/state/async_save.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <thread>

#include "agree.h"
#include "fsdpp/common/error.h"
#include "pending_save.h"

namespace fsdpp::state {
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
  wait();
  auto& s = *s_;
  const auto t0 = Clock::now();
  std::shared_ptr<detail::PendingSave> pending =
      detail::PendingSave::begin(dir, root, optimizer, s.comm.group, options);
  s.snapshot_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  s.dir = dir;
  s.error.clear();
  s.write_ms = 0;
  s.in_flight = true;
  // Store keys unique to this save: the temporary directory's name is (pid + random).
  const std::string prefix =
      "fsdpp/async_save/" + fs::path(pending->tmp()).filename().string() + "/";
  s.writer = std::thread([this, pending, prefix, on_committed = std::move(on_committed)]() mutable {
    auto& st = *s_;
    const auto w0 = Clock::now();
    const int rank = pending->rank(), world = pending->world_size();
    const std::string what = fmt::format("asynchronous save of '{}' (rank {})", pending->dir().string(), rank);
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
