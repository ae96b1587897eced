#pragma once
// A small facade over c10d with the collectives FSDP needs. Every collective has an async form
// (returns a Work to wait on) and a blocking form; every wait has a timeout, and every failure
// names the rank, the collective, its size and the module it was issued for.
//
// Ranks must issue the same collectives in the same order. When they do not (a rank skipped a
// unit, took another branch), the error says where they diverge: "the ranks disagree at
// collective #12: rank 0 issued all_gather of [512] Float for module 'layers.1'; rank 1 issued
// all_gather of [512] Float for module 'layers.2'". By default that is found once a wait stalls
// (a fifth of the timeout, at most 5 s); with FSDPP_COLLECTIVE_CHECK=1 before every collective.
// docs/faults.md has the details.

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <ATen/Tensor.h>
#include <c10/util/intrusive_ptr.h>

namespace c10d {
class Backend;
class Store;
}  // namespace c10d

namespace fsdpp::dist {

enum class ReduceOp { SUM, AVG, MAX };

enum class BackendKind { GLOO, NCCL };
const char* to_string(BackendKind kind);

enum class Collective : int {
  ALL_GATHER = 0,
  REDUCE_SCATTER,
  ALL_REDUCE,
  BROADCAST,
  BARRIER,
  ALL_TO_ALL,
  SEND,
  RECV,
};
inline constexpr int kNumCollectives = 8;
const char* to_string(Collective c);

// Bytes this rank sent, per kind of collective, as the algorithm used moves them (ring
// all-gather and reduce-scatter send (N-1)/N of the full buffer, ring all-reduce twice that,
// broadcast sends the buffer once from the root, all-to-all the rows for the other ranks, send
// the message). Every entry counts bytes sent, so RECV counts calls and never bytes.
struct CommCounters {
  std::array<uint64_t, kNumCollectives> bytes{};
  std::array<uint64_t, kNumCollectives> calls{};
  uint64_t bytes_of(Collective c) const { return bytes[static_cast<int>(c)]; }
  uint64_t calls_of(Collective c) const { return calls[static_cast<int>(c)]; }
  uint64_t total_bytes() const;
  CommCounters operator-(const CommCounters& earlier) const;
};

// What a collective is for, used in error messages ("module 'layers.3'").
struct CollectiveTag {
  std::string module;
};

namespace detail {
struct WorkState;
class Backend;
class CollectiveMonitor;
}  // namespace detail

// A handle on an issued collective.
class Work {
 public:
  Work() = default;
  explicit Work(std::shared_ptr<detail::WorkState> state) : state_(std::move(state)) {}
  // Blocks until done; throws CommError (or TimeoutError after the group's timeout). A wait
  // that stalls compares this rank's collective sequence with the other stalled ranks' and
  // throws CommError naming the first difference as soon as it sees one.
  void wait();
  bool is_completed() const;
  bool valid() const { return state_ != nullptr; }

 private:
  std::shared_ptr<detail::WorkState> state_;
};

class CommQueue;
class TraceRecorder;

class ProcessGroup {
 public:
  struct Options {
    BackendKind backend = BackendKind::GLOO;
    std::chrono::milliseconds timeout{std::chrono::seconds(300)};
    std::string name = "default";
    // The global ranks of the members, in group-rank order (empty: 0..size-1).
    std::vector<int> global_ranks;
    // For GLOO: the host name or interface to bind (empty: GLOO_SOCKET_IFNAME, else loopback
    // when master_addr is a loopback address, else the host name).
    std::string gloo_hostname;
    std::string master_addr = "127.0.0.1";
    int device_index = -1;  // NCCL: the CUDA device of this rank
    // Check every collective's (operation, shape, dtype, module) against the other ranks'
    // before it runs, through the store. Empty: FSDPP_COLLECTIVE_CHECK=1 turns it on.
    std::optional<bool> collective_check;
  };

  // Collective over the members: each member calls it with its own rank in the group. The
  // store is prefixed with the group name so groups never share keys.
  static std::shared_ptr<ProcessGroup> create(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                              int size, Options options);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return options_.name; }
  BackendKind backend_kind() const { return options_.backend; }
  std::chrono::milliseconds timeout() const { return options_.timeout; }
  const std::vector<int>& global_ranks() const { return global_ranks_; }
  int global_rank() const { return global_ranks_[rank_]; }

  // output (size * input.numel()) = concatenation of every rank's input, in rank order.
  Work all_gather_into_tensor_async(const at::Tensor& output, const at::Tensor& input,
                                    const CollectiveTag& tag = {});
  // output (input.numel() / size) = this rank's chunk of the element-wise reduction.
  // Gloo has no true reduce-scatter into a tensor (c10d's is a clone, an all-reduce and a copy);
  // on Gloo this is a ring over send/recv: size-1 steps of numel/size elements each.
  Work reduce_scatter_tensor_async(const at::Tensor& output, const at::Tensor& input, ReduceOp op,
                                   const CollectiveTag& tag = {});
  // In place. AVG on Gloo is a SUM followed by a division (Gloo has no AVG).
  Work all_reduce_async(const at::Tensor& tensor, ReduceOp op, const CollectiveTag& tag = {});
  Work broadcast_async(const at::Tensor& tensor, int root, const CollectiveTag& tag = {});
  Work barrier_async(const CollectiveTag& tag = {});

  // output = the rows (dim 0) every rank sent this one, in rank order: rank r sends the
  // input_split_sizes[j] rows after its first sum(input_split_sizes[0..j)) to rank j, and this
  // rank's output_split_sizes[r] rows come from rank r, so output_split_sizes[r] on rank j
  // must equal input_split_sizes[j] on rank r (the caller agrees on them, e.g. by an all-to-all
  // of the counts first). Empty split sizes mean equal splits. Both tensors contiguous, of one
  // dtype, with the same trailing shape; a split may be 0. Any dtype: rows move as bytes.
  Work all_to_all_single_async(const at::Tensor& output, const at::Tensor& input,
                               std::vector<int64_t> output_split_sizes,
                               std::vector<int64_t> input_split_sizes,
                               const CollectiveTag& tag = {});

  // Point-to-point, for pipeline stages. send_async(t, dst, tag) is matched by the recv_async
  // on rank `dst` (a rank of this group) from this rank with the same tag: between two ranks,
  // messages of one tag arrive in the order they were sent, and messages of different tags are
  // independent (received in any order). Tags are in [0, kMaxP2PTag]. The receiver gives a
  // contiguous tensor of the sender's size and dtype. Both complete when the message has moved
  // (a send waits for its recv); a recv whose sender never sends fails at the group's timeout
  // naming the peer, the tag and the size. They run after everything issued before them on
  // this group but do not hold up what is issued after them, and they are not part of the
  // collective sequence that ranks compare (docs/dist.md). A zero-sized message moves nothing
  // and completes at once. NCCL ignores tags: between two ranks, messages are matched in the
  // order they were issued.
  static constexpr int kMaxP2PTag = (1 << 30) - 1;
  Work send_async(const at::Tensor& tensor, int dst, int tag = 0, const CollectiveTag& what = {});
  Work recv_async(const at::Tensor& tensor, int src, int tag = 0, const CollectiveTag& what = {});

  void all_gather_into_tensor(const at::Tensor& output, const at::Tensor& input,
                              const CollectiveTag& tag = {}) {
    all_gather_into_tensor_async(output, input, tag).wait();
  }
  void reduce_scatter_tensor(const at::Tensor& output, const at::Tensor& input, ReduceOp op,
                             const CollectiveTag& tag = {}) {
    reduce_scatter_tensor_async(output, input, op, tag).wait();
  }
  void all_reduce(const at::Tensor& tensor, ReduceOp op, const CollectiveTag& tag = {}) {
    all_reduce_async(tensor, op, tag).wait();
  }
  void broadcast(const at::Tensor& tensor, int root, const CollectiveTag& tag = {}) {
    broadcast_async(tensor, root, tag).wait();
  }
  void barrier(const CollectiveTag& tag = {}) { barrier_async(tag).wait(); }
  void all_to_all_single(const at::Tensor& output, const at::Tensor& input,
                         std::vector<int64_t> output_split_sizes,
                         std::vector<int64_t> input_split_sizes, const CollectiveTag& tag = {}) {
    all_to_all_single_async(output, input, std::move(output_split_sizes),
                            std::move(input_split_sizes), tag)
        .wait();
  }
  void send(const at::Tensor& tensor, int dst, int tag = 0, const CollectiveTag& what = {}) {
    send_async(tensor, dst, tag, what).wait();
  }
  void recv(const at::Tensor& tensor, int src, int tag = 0, const CollectiveTag& what = {}) {
    recv_async(tensor, src, tag, what).wait();
  }

  CommCounters counters() const;
  void reset_counters();
  // Collectives issued on this group so far (the index of the last one).
  uint64_t collectives_issued() const;

  // The timeline recorder its collectives record into during profiled steps (null: none);
  // the World sets it on every group it makes (docs/observability.md#timeline-traces).
  void set_trace(std::shared_ptr<TraceRecorder> trace);
  const std::shared_ptr<TraceRecorder>& trace() const { return trace_; }

  // The c10d backend, for what the facade does not cover.
  const c10::intrusive_ptr<c10d::Backend>& backend() const;

 private:
  ProcessGroup(int rank, int size, Options options);
  // `op` and `input` make the collective's record ("all_reduce(SUM)", its shape and dtype), or
  // `record_as` without an input; `what` describes it in messages. `body` runs on the queue
  // thread and must hold (by value) everything it uses: an abandoned one may outlive the group.
  struct RecordAs {
    std::string shape;
    std::string dtype;
  };
  Work submit(Collective kind, uint64_t bytes_sent, std::string what, std::string op,
              const at::Tensor* input, const CollectiveTag& tag, std::function<void()> body,
              RecordAs record_as = {});
  // During a profiled step: `body` also records its run on this group's trace track, and the
  // Work's wait records the time it blocked.
  void trace_collective(detail::WorkState& state, Collective kind, uint64_t bytes_sent,
                        const CollectiveTag& tag, std::function<void()>& body);
  // A send or recv: counted, described, started on the queue in issue order, finished off it.
  Work submit_p2p(bool is_send, const at::Tensor& tensor, int peer, int tag,
                  const CollectiveTag& what);

  int rank_;
  int size_;
  Options options_;
  std::vector<int> global_ranks_;
  std::shared_ptr<detail::Backend> backend_;  // held by value by collective bodies
  std::shared_ptr<detail::CollectiveMonitor> monitor_;
  std::mutex submit_mutex_;  // records are numbered in queue order
  std::unique_ptr<CommQueue> queue_;
  std::array<std::atomic<uint64_t>, kNumCollectives> bytes_{};
  std::array<std::atomic<uint64_t>, kNumCollectives> calls_{};
  std::atomic<uint64_t> p2p_issued_{0};  // numbers sends and recvs in messages
  std::shared_ptr<TraceRecorder> trace_;
  int trace_track_ = 0;  // "comm <name>" in trace_
};

}  // namespace fsdpp::dist
