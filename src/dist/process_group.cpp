#include "fsdpp/dist/process_group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>
#include <numeric>
#include <thread>

#include <fmt/ranges.h>

#include "backend.h"
#include "collective_monitor.h"
#include "comm_queue.h"
#include "device_order.h"
#include "flight_recorder.h"
#include "fsdpp/common/error.h"
#include "fsdpp/dist/trace.h"

namespace fsdpp::dist {

const char* to_string(BackendKind kind) {
  switch (kind) {
    case BackendKind::GLOO: return "gloo";
    case BackendKind::NCCL: return "nccl";
  }
  return "?";
}

const char* to_string(Collective c) {
  switch (c) {
    case Collective::ALL_GATHER: return "all_gather";
    case Collective::REDUCE_SCATTER: return "reduce_scatter";
    case Collective::ALL_REDUCE: return "all_reduce";
    case Collective::BROADCAST: return "broadcast";
    case Collective::BARRIER: return "barrier";
    case Collective::ALL_TO_ALL: return "all_to_all";
    case Collective::SEND: return "send";
    case Collective::RECV: return "recv";
  }
  return "?";
}

uint64_t CommCounters::total_bytes() const {
  return std::accumulate(bytes.begin(), bytes.end(), uint64_t{0});
}

CommCounters CommCounters::operator-(const CommCounters& earlier) const {
  CommCounters d;
  for (int i = 0; i < kNumCollectives; ++i) {
    d.bytes[i] = bytes[i] - earlier.bytes[i];
    d.calls[i] = calls[i] - earlier.calls[i];
  }
  return d;
}

// ---------------------------------------------------------------------------------------------
// Work

namespace {

using Clock = std::chrono::steady_clock;

// How often a stalled wait looks at the traces the other ranks published.
constexpr std::chrono::milliseconds kStallPoll{250};
// How long a rank whose peer's connection closed looks for that peer's last trace.
constexpr std::chrono::milliseconds kPeerTraceWait{1500};

std::string message_of(const std::exception_ptr& e) {
  std::string why = detail::exception_text(e);
  // c10d's messages carry a C++ backtrace after the first line; keep the sentence.
  if (auto nl = why.find("\nException raised from"); nl != std::string::npos) why.resize(nl);
  return why;
}

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// A peer that exited or died closes its connections: not a sequence problem to diagnose.
bool peer_gone(const std::string& why) {
  return contains(why, "closed by peer") || contains(why, "reset by peer") ||
         contains(why, "Connection closed") || contains(why, "Broken pipe");
}

}  // namespace

void Work::wait() {
  FSDPP_CHECK(state_, "[dist] wait() on an empty Work handle");
  auto& s = *state_;
  const auto started = Clock::now();
  // Gloo gives up at the group's timeout; the margin lets its own, more precise error win.
  const auto limit = s.timeout + std::chrono::seconds(5);
  const auto deadline = started + limit;
  auto done_by = [&](Clock::time_point until) {
    std::unique_lock<std::mutex> lock(s.mutex);
    return s.cv.wait_until(lock, std::min(until, deadline), [&] { return s.done; });
  };
  auto waited_s = [&] { return std::chrono::duration<double>(Clock::now() - started).count(); };
  bool done = false;
  if (s.monitor) {
    // Until the wait counts as stalled, it still compares at once when another rank has a
    // trace out (it stalled or died first): one store read per kStallPoll, and only for waits
    // longer than that.
    const auto stall_at = started + s.monitor->stall_after();
    while (!(done = done_by(std::min(stall_at, Clock::now() + kStallPoll))) &&
           Clock::now() < stall_at && !s.monitor->others_published()) {
    }
  } else {
    done = done_by(deadline);
  }
  std::optional<detail::CollectiveMonitor::Stall> stall;  // withdrawn when the wait succeeds
  if (!done && s.monitor) {
    // Stalled: publish this rank's sequence and compare it with the other stalled ranks'.
    stall.emplace(*s.monitor, s.seq);
    while (!(done = done_by(Clock::now() + kStallPoll)) && Clock::now() < deadline) {
      if (auto d = s.monitor->divergence()) {
        const std::string msg =
            fmt::format("{}. Seen by {} after waiting {:.1f} s", *d, s.description, waited_s());
        stall->keep();
        if (s.abandon) s.abandon(msg);
        FSDPP_THROW(CommError, "{}", msg);
      }
    }
    if (!done) {
      auto d = s.monitor->divergence(/*force=*/true);
      const std::string msg =
          d ? fmt::format("{}. Seen by {} when it timed out after {} ms", *d, s.description,
                          limit.count())
            : fmt::format("[dist] {} did not complete within {} ms: another rank has not reached "
                          "this collective (it is behind, took another branch, or died). {}",
                          s.description, limit.count(), s.monitor->progress(s.seq));
      stall->keep();
      if (s.abandon) s.abandon(msg);
      FSDPP_THROW(TimeoutError, "{}", msg);
    }
  }
  if (!done) {
    FSDPP_THROW(TimeoutError,
                "[dist] {} did not complete within {} ms: another rank has not reached this "
                "collective (it is behind, took another branch, or died)",
                s.description, limit.count());
  }
  if (!s.error) {
    if (s.order) {
      // Tensors on a GPU: the waiter's stream waits for the collective (the CPU does not), and
      // then their memory may go back to the allocator.
      Stream::current(s.order->device).wait(s.order->done);
      std::lock_guard<std::mutex> lock(s.mutex);
      s.order->keep_alive.clear();
    }
    if (s.trace && s.trace->active()) {
      s.trace->complete(s.trace->thread_track(), s.trace_name, started, Clock::now(),
                        {{"seq", static_cast<int64_t>(s.seq)}, {"module", s.trace_module},
                         {"group", s.trace_group}});
    }
    return;
  }
  const std::string why = message_of(s.error);
  // An earlier collective failed: when the store's host is frozen, that is what to say.
  if (s.not_run) FSDPP_THROW(CommError, "{}{}", why, s.monitor ? s.monitor->store_note() : "");
  if (contains(why, "FSDPP_COLLECTIVE_CHECK")) std::rethrow_exception(s.error);
  const bool timed_out = contains(why, "imed out") || contains(why, "imeout");
  if (s.monitor && !peer_gone(why)) {
    // The backend failed or timed out: if the ranks' sequences differ, that is the story. This
    // rank's trace stays published for the others.
    if (!stall) stall.emplace(*s.monitor, s.seq);
    stall->keep();
    std::optional<std::string> d = s.monitor->divergence(/*force=*/true);
    if (!timed_out) {
      // An error, not a timeout: the peers may be failing at this moment too; give them the
      // time a stalled wait takes to publish.
      const auto until = Clock::now() + s.monitor->stall_after() + std::chrono::seconds(1);
      while (!d && Clock::now() < until) {
        std::this_thread::sleep_for(kStallPoll);
        d = s.monitor->divergence();
      }
    }
    if (d) FSDPP_THROW(CommError, "{}. Seen by {}, whose backend reported: {}", *d, s.description, why);
    if (timed_out) {
      FSDPP_THROW(TimeoutError,
                  "[dist] {} timed out after {} ms (another rank did not take part: it is "
                  "behind, took another branch, or died): {}. {}",
                  s.description, s.timeout.count(), why, s.monitor->progress(s.seq));
    }
  } else if (s.monitor) {
    // A peer closed its connection: it exited or died. If it died in its backend on a
    // collective mismatch, it published its trace on the way out (watch_abort).
    if (stall) stall->keep();
    std::optional<std::string> d;
    for (auto until = Clock::now() + kPeerTraceWait; !d && Clock::now() < until;) {
      d = s.monitor->divergence(/*force=*/true);
      if (!d) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (d) FSDPP_THROW(CommError, "{}. Seen by {}, whose backend reported: {}", *d, s.description, why);
  }
  if (timed_out) {
    FSDPP_THROW(TimeoutError,
                "[dist] {} timed out after {} ms (another rank did not take part: it is "
                "behind, took another branch, or died): {}",
                s.description, s.timeout.count(), why);
  }
  FSDPP_THROW(CommError, "[dist] {} failed: {}", s.description, why);
}

bool Work::is_completed() const {
  if (!state_) return false;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->done;
}

// ---------------------------------------------------------------------------------------------
// Creation

namespace {

// Every member announces itself before the backend connects, so that a rank that never comes
// is named instead of surfacing as a bare connection timeout.
void wait_for_members(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                      const ProcessGroup::Options& o, const std::vector<int>& global_ranks) {
  store->set("arrived/" + std::to_string(rank), std::vector<uint8_t>{'1'});
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back("arrived/" + std::to_string(r));
  try {
    store->wait(keys, o.timeout);
  } catch (const std::exception& e) {
    std::vector<int> missing;
    for (int r = 0; r < size; ++r) {
      try {
        if (!store->check({keys[r]})) missing.push_back(global_ranks[r]);
      } catch (...) {
        missing.push_back(global_ranks[r]);
      }
    }
    FSDPP_THROW(TimeoutError,
                "[dist] rank {}: group '{}' ({} ranks) did not assemble within {} ms; "
                "rank(s) {} never joined (not started, crashed, or pointed at another "
                "MASTER_ADDR/MASTER_PORT)",
                global_ranks[rank], o.name, size, o.timeout.count(),
                missing.empty() ? std::string("?") : fmt::format("{}", fmt::join(missing, ", ")));
  }
}

}  // namespace

ProcessGroup::ProcessGroup(int rank, int size, Options options)
    : rank_(rank), size_(size), options_(std::move(options)) {}

ProcessGroup::~ProcessGroup() = default;

std::shared_ptr<ProcessGroup> ProcessGroup::create(const c10::intrusive_ptr<c10d::Store>& store,
                                                   int rank, int size, Options options) {
  FSDPP_CHECK(size >= 1 && rank >= 0 && rank < size,
              "[dist] group '{}': rank {} is not in [0, size={})", options.name, rank, size);
  if (options.global_ranks.empty()) {
    options.global_ranks.resize(size);
    std::iota(options.global_ranks.begin(), options.global_ranks.end(), 0);
  }
  FSDPP_CHECK(static_cast<int>(options.global_ranks.size()) == size,
              "[dist] group '{}': {} global ranks given for a group of size {}", options.name,
              options.global_ranks.size(), size);
  std::shared_ptr<ProcessGroup> pg(new ProcessGroup(rank, size, options));
  pg->global_ranks_ = options.global_ranks;
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("fsdpp/" + options.name, store);
  wait_for_members(prefixed, rank, size, options, pg->global_ranks_);
  detail::configure_flight_recorder();
  try {
    pg->backend_ = detail::make_backend(prefixed, rank, size, options);
  } catch (const fsdpp::Error&) {
    throw;
  } catch (const std::exception& e) {
    std::string why = e.what();
    if (auto nl = why.find("\nException raised from"); nl != std::string::npos) why.resize(nl);
    FSDPP_THROW(CommError, "[dist] rank {}: cannot create the {} group '{}' ({} ranks): {}",
                pg->global_rank(), to_string(options.backend), options.name, size, why);
  }
  pg->monitor_ = std::make_shared<detail::CollectiveMonitor>(
      prefixed, options.name, rank, size, pg->global_ranks_, options.timeout,
      options.collective_check ? *options.collective_check : detail::collective_check_from_env());
  detail::watch_abort(pg->monitor_);
  pg->queue_ = std::make_unique<CommQueue>();
  return pg;
}

// ---------------------------------------------------------------------------------------------
// Collectives

namespace {

std::string describe_tensor(const at::Tensor& t) {
  return fmt::format("{} B {}", t.nbytes(), c10::toString(t.scalar_type()));
}

// `body` over `read` and `written` as the group's queue runs it: on the backend's device, and
// for GPU tensors on the queue's stream for `kind` in order with the caller's (device_order.h).
std::function<void()> placed(CommQueue& queue, const detail::Backend& backend, Collective kind,
                             detail::Operands operands,
                             std::function<void(const detail::Operands&)> body) {
  const c10::Device device = detail::device_of(operands);
  const bool reduction = kind == Collective::REDUCE_SCATTER || kind == Collective::ALL_REDUCE;
  const Stream comm = device.is_cpu() ? Stream() : queue.stream(reduction, device);
  return detail::place_collective(std::move(operands), backend.device(), comm, std::move(body),
                                  queue.debug_delay_cycles());
}

}  // namespace

Work ProcessGroup::submit(Collective kind, uint64_t bytes_sent, std::string what,
                          std::string op, const at::Tensor* input, const CollectiveTag& tag,
                          std::function<void()> body, RecordAs record_as) {
  const int k = static_cast<int>(kind);
  bytes_[k].fetch_add(bytes_sent, std::memory_order_relaxed);
  calls_[k].fetch_add(1, std::memory_order_relaxed);
  auto state = std::make_shared<detail::WorkState>();
  state->timeout = options_.timeout;
  state->monitor = monitor_;
  state->abandon = queue_->abandoner();
  std::string shape = std::move(record_as.shape), dtype = std::move(record_as.dtype);
  if (input != nullptr) {
    shape = fmt::format("[{}]", fmt::join(input->sizes(), ", "));
    dtype = c10::toString(input->scalar_type());
  }
  // A collective on GPU tensors (placed(), device_order.h): its Work waits on the device.
  if (const auto* placed = body.target<detail::PlacedCollective>()) state->order = placed->order;
  std::lock_guard<std::mutex> lock(submit_mutex_);  // records are numbered in queue order
  const detail::CollectiveRecord rec =
      monitor_->trace().record(std::move(op), std::move(shape), std::move(dtype), tag.module);
  state->seq = rec.seq;
  state->description =
      fmt::format("rank {} (group '{}', {} of {}): collective #{}, {} of {}{}", global_rank(),
                  options_.name, rank_, size_, rec.seq, to_string(kind), what,
                  tag.module.empty() ? "" : fmt::format(" for module '{}'", tag.module));
  if (trace_ && trace_->active()) trace_collective(*state, kind, bytes_sent, tag, body);
  if (monitor_->check_each()) {
    body = [monitor = monitor_, rec, body = std::move(body)] {
      monitor->verify(rec);
      body();
    };
  }
  queue_->push(state, std::move(body));
  return Work(std::move(state));
}

namespace {

const char* reduce_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM: return "SUM";
    case ReduceOp::AVG: return "AVG";
    case ReduceOp::MAX: return "MAX";
  }
  return "?";
}

}  // namespace

Work ProcessGroup::all_gather_into_tensor_async(const at::Tensor& output, const at::Tensor& input,
                                                const CollectiveTag& tag) {
  FSDPP_CHECK(output.numel() == input.numel() * size_ && output.scalar_type() == input.scalar_type(),
              "[dist] all_gather_into_tensor: output has {} {} elements; expected size {} x "
              "input's {} {} elements",
              output.numel(), c10::toString(output.scalar_type()), size_, input.numel(),
              c10::toString(input.scalar_type()));
  FSDPP_CHECK(output.is_contiguous() && input.is_contiguous(),
              "[dist] all_gather_into_tensor needs contiguous tensors");
  const uint64_t sent = static_cast<uint64_t>(input.nbytes()) * (size_ - 1);
  return submit(Collective::ALL_GATHER, sent, describe_tensor(output), "all_gather", &input, tag,
                placed(*queue_, *backend_, Collective::ALL_GATHER, {{input}, {output}},
                       [backend = backend_](const detail::Operands& t) {
                         auto out = t.written[0];
                         auto in = t.read[0];
                         detail::wait_c10d(backend->c10d()->_allgather_base(out, in));
                       }));
}

Work ProcessGroup::reduce_scatter_tensor_async(const at::Tensor& output, const at::Tensor& input,
                                               ReduceOp op, const CollectiveTag& tag) {
  FSDPP_CHECK(input.numel() == output.numel() * size_ && output.scalar_type() == input.scalar_type(),
              "[dist] reduce_scatter_tensor: input has {} {} elements; expected size {} x "
              "output's {} {} elements",
              input.numel(), c10::toString(input.scalar_type()), size_, output.numel(),
              c10::toString(output.scalar_type()));
  FSDPP_CHECK(output.is_contiguous() && input.is_contiguous(),
              "[dist] reduce_scatter_tensor needs contiguous tensors");
  const uint64_t sent = static_cast<uint64_t>(output.nbytes()) * (size_ - 1);
  return submit(Collective::REDUCE_SCATTER, sent, describe_tensor(input),
                fmt::format("reduce_scatter({})", reduce_name(op)), &input, tag,
                placed(*queue_, *backend_, Collective::REDUCE_SCATTER, {{input}, {output}},
                       [backend = backend_, op](const detail::Operands& t) {
                         backend->reduce_scatter(t.written[0], t.read[0], op);
                       }));
}

Work ProcessGroup::all_reduce_async(const at::Tensor& tensor, ReduceOp op,
                                    const CollectiveTag& tag) {
  FSDPP_CHECK(tensor.is_contiguous(), "[dist] all_reduce needs a contiguous tensor");
  const uint64_t sent = 2 * static_cast<uint64_t>(tensor.nbytes()) * (size_ - 1) / size_;
  return submit(Collective::ALL_REDUCE, sent, describe_tensor(tensor),
                fmt::format("all_reduce({})", reduce_name(op)), &tensor, tag,
                placed(*queue_, *backend_, Collective::ALL_REDUCE, {{tensor}, {tensor}},
                       [backend = backend_, op](const detail::Operands& t) {
                         backend->all_reduce(t.written[0], op);
                       }));
}

Work ProcessGroup::broadcast_async(const at::Tensor& tensor, int root, const CollectiveTag& tag) {
  FSDPP_CHECK(root >= 0 && root < size_, "[dist] broadcast root {} is not in [0, {})", root, size_);
  FSDPP_CHECK(tensor.is_contiguous(), "[dist] broadcast needs a contiguous tensor");
  const uint64_t sent = rank_ == root ? static_cast<uint64_t>(tensor.nbytes()) * (size_ - 1) : 0;
  return submit(Collective::BROADCAST, sent, describe_tensor(tensor),
                fmt::format("broadcast(root {})", root), &tensor, tag,
                placed(*queue_, *backend_, Collective::BROADCAST, {{tensor}, {tensor}},
                       [backend = backend_, root](const detail::Operands& t) {
                         std::vector<at::Tensor> ts{t.written[0]};
                         c10d::BroadcastOptions o;
                         o.rootRank = root;
                         detail::wait_c10d(backend->c10d()->broadcast(ts, o));
                       }));
}

Work ProcessGroup::barrier_async(const CollectiveTag& tag) {
  return submit(Collective::BARRIER, 0, "0 B", "barrier", nullptr, tag,
                [backend = backend_] { backend->barrier(); });
}

namespace {

// Rows of `t` as bytes, (rows, row bytes): all-to-all moves rows whatever their dtype (Gloo's
// all-to-all does not take every dtype, and nothing is reduced).
at::Tensor rows_as_bytes(const at::Tensor& t) {
  const int64_t rows = t.size(0);
  const int64_t row_bytes = rows == 0 ? 0 : static_cast<int64_t>(t.nbytes()) / rows;
  if (row_bytes == 0) return at::empty({rows, 0}, t.options().dtype(at::kByte));
  return t.view({-1}).view(at::kByte).view({rows, row_bytes});
}

std::vector<int64_t> checked_splits(std::vector<int64_t> splits, const at::Tensor& t, int size,
                                    const char* which) {
  if (splits.empty()) {
    FSDPP_CHECK(t.size(0) % size == 0,
                "[dist] all_to_all_single: {} has {} rows, which {} ranks cannot split evenly; "
                "give {}_split_sizes",
                which, t.size(0), size, which);
    return std::vector<int64_t>(size, t.size(0) / size);
  }
  FSDPP_CHECK(static_cast<int>(splits.size()) == size,
              "[dist] all_to_all_single: {} split sizes for a group of {} ranks", splits.size(),
              size);
  int64_t sum = 0;
  for (int64_t v : splits) {
    FSDPP_CHECK(v >= 0, "[dist] all_to_all_single: {} split sizes [{}] hold a negative size", which,
                fmt::join(splits, ", "));
    sum += v;
  }
  FSDPP_CHECK(sum == t.size(0),
              "[dist] all_to_all_single: {} split sizes [{}] add up to {} rows but the {} has {}",
              which, fmt::join(splits, ", "), sum, which, t.size(0));
  return splits;
}

}  // namespace

Work ProcessGroup::all_to_all_single_async(const at::Tensor& output, const at::Tensor& input,
                                           std::vector<int64_t> output_split_sizes,
                                           std::vector<int64_t> input_split_sizes,
                                           const CollectiveTag& tag) {
  FSDPP_CHECK(input.dim() >= 1 && output.dim() >= 1,
              "[dist] all_to_all_single needs tensors with a dim 0 of rows; got {} and {} dims",
              input.dim(), output.dim());
  FSDPP_CHECK(input.scalar_type() == output.scalar_type() &&
                  input.sizes().slice(1) == output.sizes().slice(1),
              "[dist] all_to_all_single: input [{}] {} and output [{}] {} differ in dtype or in "
              "the shape of a row",
              fmt::join(input.sizes(), ", "), c10::toString(input.scalar_type()),
              fmt::join(output.sizes(), ", "), c10::toString(output.scalar_type()));
  FSDPP_CHECK(output.is_contiguous() && input.is_contiguous(),
              "[dist] all_to_all_single needs contiguous tensors");
  auto out_splits = checked_splits(std::move(output_split_sizes), output, size_, "output");
  auto in_splits = checked_splits(std::move(input_split_sizes), input, size_, "input");
  // The one pair of splits this rank can check alone: what it sends itself.
  FSDPP_CHECK(in_splits[rank_] == out_splits[rank_],
              "[dist] all_to_all_single: rank {} sends itself {} rows (input_split_sizes[{}]) but "
              "expects {} from itself (output_split_sizes[{}])",
              global_rank(), in_splits[rank_], rank_, out_splits[rank_], rank_);
  int64_t row_elems = 1;
  for (int64_t d : input.sizes().slice(1)) row_elems *= d;
  const uint64_t bytes_per_row = static_cast<uint64_t>(row_elems) * c10::elementSize(input.scalar_type());
  uint64_t sent = 0;
  for (int j = 0; j < size_; ++j) {
    if (j != rank_) sent += static_cast<uint64_t>(in_splits[j]) * bytes_per_row;
  }
  // Ranks send different numbers of rows, so the record that ranks compare holds what they
  // share: the shape of a row and the dtype.
  const std::string row_shape = fmt::format("[*{}{}]", input.dim() > 1 ? ", " : "",
                                            fmt::join(input.sizes().slice(1), ", "));
  const std::string what = fmt::format("{} B in, {} B out {} (rows to ranks [{}], from ranks [{}])",
                                       input.nbytes(), output.nbytes(),
                                       c10::toString(input.scalar_type()),
                                       fmt::join(in_splits, ", "), fmt::join(out_splits, ", "));
  return submit(Collective::ALL_TO_ALL, sent, what, "all_to_all_single", nullptr, tag,
                placed(*queue_, *backend_, Collective::ALL_TO_ALL, {{input}, {output}},
                       [backend = backend_, out_splits, in_splits](const detail::Operands& t) mutable {
                  if (backend->size() == 1) {
                    t.written[0].copy_(t.read[0]);
                    return;
                  }
                  auto out = rows_as_bytes(t.written[0]);
                  auto in = rows_as_bytes(t.read[0]);
                  c10d::AllToAllOptions o;
                  o.timeout = backend->timeout();
                  detail::wait_c10d(
                      backend->c10d()->alltoall_base(out, in, out_splits, in_splits, o));
                }),
                RecordAs{row_shape, c10::toString(input.scalar_type())});
}

Work ProcessGroup::send_async(const at::Tensor& tensor, int dst, int tag, const CollectiveTag& what) {
  return submit_p2p(/*is_send=*/true, tensor, dst, tag, what);
}

Work ProcessGroup::recv_async(const at::Tensor& tensor, int src, int tag, const CollectiveTag& what) {
  return submit_p2p(/*is_send=*/false, tensor, src, tag, what);
}

Work ProcessGroup::submit_p2p(bool is_send, const at::Tensor& tensor, int peer, int tag,
                              const CollectiveTag& what) {
  const char* name = is_send ? "send" : "recv";
  FSDPP_CHECK(peer >= 0 && peer < size_ && peer != rank_,
              "[dist] {} on group '{}': peer {} is not another rank of the group (this is rank {} "
              "of {})",
              name, options_.name, peer, rank_, size_);
  FSDPP_CHECK(tag >= 0 && tag <= kMaxP2PTag, "[dist] {} to/from rank {}: tag {} is not in [0, {}]",
              name, global_ranks_[peer], tag, kMaxP2PTag);
  FSDPP_CHECK(tensor.is_contiguous(), "[dist] {} needs a contiguous tensor", name);
  const int k = static_cast<int>(is_send ? Collective::SEND : Collective::RECV);
  bytes_[k].fetch_add(is_send ? static_cast<uint64_t>(tensor.nbytes()) : 0, std::memory_order_relaxed);
  calls_[k].fetch_add(1, std::memory_order_relaxed);
  auto state = std::make_shared<detail::WorkState>();
  state->timeout = options_.timeout;
  // No monitor: a send or recv concerns two ranks, so the group-wide sequence comparison that a
  // stalled wait runs does not apply to it; its own message names the peer, tag and size.
  const std::string peer_name =
      global_ranks_[peer] == peer ? fmt::format("rank {}", peer)
                                  : fmt::format("rank {} (group rank {})", global_ranks_[peer], peer);
  state->description = fmt::format(
      "rank {} (group '{}', {} of {}): {} #{} {} {} with tag {}, [{}] {} ({} B){}", global_rank(),
      options_.name, rank_, size_, name, p2p_issued_.fetch_add(1) + 1, is_send ? "to" : "from",
      peer_name, tag, fmt::join(tensor.sizes(), ", "), c10::toString(tensor.scalar_type()),
      tensor.nbytes(),
      what.module.empty() ? "" : fmt::format(" for module '{}'", what.module));
  if (tensor.numel() == 0) {
    // Nothing to move; the peer's matching call completes at once as well.
    state->done = true;
    return Work(std::move(state));
  }
  // Ordered and staged as the collectives are (device_order.h), across the two threads that
  // start and finish it.
  std::shared_ptr<detail::DeviceOrder> order;
  if (!tensor.device().is_cpu()) {
    order = std::make_shared<detail::DeviceOrder>();
    order->device = tensor.device();
    order->comm = queue_->stream(/*reduction=*/false, tensor.device());
    order->issued = Event::recorded_on(Stream::current(tensor.device()));
    order->keep_alive.push_back(tensor);
    state->order = order;
  }
  queue_->push_started(state, [backend = backend_, tensor, peer, tag, is_send,
                               order]() -> CommQueue::Finish {
    const Stream comm = order ? order->comm : Stream();
    StreamGuard on(comm);
    if (order) comm.wait(order->issued);
    at::Tensor t = tensor;  // staged to the backend's device when it is elsewhere
    if (t.device() != backend->device()) {
      t = at::empty_like(tensor, tensor.options().device(backend->device()).pinned_memory(false));
      if (is_send) t.copy_(tensor);
    }
    std::vector<at::Tensor> ts{t};
    const auto& c10d = backend->c10d();
    auto work = is_send ? c10d->send(ts, peer, tag) : c10d->recv(ts, peer, tag);
    return [work, timeout = backend->timeout(), t, tensor, is_send, order, comm] {
      StreamGuard on(comm);
      work->wait(timeout);
      work->synchronize();
      if (!is_send && !t.is_same(tensor)) tensor.copy_(t);
      if (order) order->done.record(comm);
    };
  });
  return Work(std::move(state));
}

const c10::intrusive_ptr<c10d::Backend>& ProcessGroup::backend() const { return backend_->c10d(); }

void ProcessGroup::set_trace(std::shared_ptr<TraceRecorder> trace) {
  trace_ = std::move(trace);
  if (trace_) trace_track_ = trace_->named_track("comm " + options_.name);
}

// The collective's event spans the queue thread running it (the group's collectives run one at
// a time, so its track never overlaps itself); how long it queued behind earlier ones is an arg.
void ProcessGroup::trace_collective(detail::WorkState& state, Collective kind, uint64_t bytes_sent,
                                    const CollectiveTag& tag, std::function<void()>& body) {
  const std::string name = tag.module.empty() ? std::string(to_string(kind))
                                               : fmt::format("{} {}", to_string(kind), tag.module);
  state.trace = trace_;
  state.trace_name = "wait " + name;
  state.trace_module = tag.module;
  state.trace_group = options_.name;
  body = [trace = trace_, track = trace_track_, name, kind = std::string(to_string(kind)),
          seq = static_cast<int64_t>(state.seq), bytes = static_cast<int64_t>(bytes_sent),
          module = tag.module, issued = Clock::now(), body = std::move(body)] {
    const auto start = Clock::now();
    auto record = [&] {
      trace->complete(track, name, start, Clock::now(),
                      {{"kind", kind}, {"seq", seq}, {"bytes_sent", bytes}, {"module", module},
                       {"queued_us", static_cast<int64_t>(std::chrono::duration_cast<
                                         std::chrono::microseconds>(start - issued).count())}});
    };
    try {
      body();
    } catch (...) {
      record();
      throw;
    }
    record();
  };
}

CommCounters ProcessGroup::counters() const {
  CommCounters c;
  for (int i = 0; i < kNumCollectives; ++i) {
    c.bytes[i] = bytes_[i].load(std::memory_order_relaxed);
    c.calls[i] = calls_[i].load(std::memory_order_relaxed);
  }
  return c;
}

uint64_t ProcessGroup::collectives_issued() const { return monitor_->trace().issued(); }

void ProcessGroup::reset_counters() {
  for (int i = 0; i < kNumCollectives; ++i) {
    bytes_[i].store(0);
    calls_[i].store(0);
  }
}

}  // namespace fsdpp::dist
