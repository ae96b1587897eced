#pragma once
// Private to src/state: the group a state-dict call runs over, and agreement on failure (every
// rank throws the same CheckpointError when any rank failed).

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "fsdpp/common/error.h"
#include "fsdpp/dist/process_group.h"

namespace fsdpp::state::detail {

struct Comm {
  std::shared_ptr<dist::ProcessGroup> group;
  int rank() const { return group ? group->rank() : 0; }
  int size() const { return group ? group->size() : 1; }
  bool multi() const { return size() > 1; }
  at::Device device() const {
    return group && group->backend_kind() == dist::BackendKind::NCCL ? at::Device(at::kCUDA)
                                                                     : at::Device(at::kCPU);
  }
};

inline const dist::CollectiveTag kStateTag{"state_dict"};

inline void broadcast_string(const Comm& c, std::string& s, int root) {
  if (!c.multi()) return;
  auto len = at::full({1}, static_cast<int64_t>(s.size()), at::TensorOptions(at::kLong))
                 .to(c.device());
  c.group->broadcast(len, root, kStateTag);
  const int64_t n = len.cpu().item<int64_t>();
  auto bytes = at::zeros({std::max<int64_t>(n, 1)}, at::TensorOptions(at::kByte));
  if (c.rank() == root && n > 0) std::memcpy(bytes.data_ptr(), s.data(), n);
  bytes = bytes.to(c.device());
  c.group->broadcast(bytes, root, kStateTag);
  bytes = bytes.cpu();
  s.assign(static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(n));
}

// Every rank's string, in rank order (one all-gather of the lengths, one of the bytes).
inline std::vector<std::string> all_gather_strings(const Comm& c, const std::string& s) {
  if (!c.multi()) return {s};
  auto len = at::full({1}, static_cast<int64_t>(s.size()), at::TensorOptions(at::kLong))
                 .to(c.device());
  auto lens = at::empty({c.size()}, len.options());
  c.group->all_gather_into_tensor(lens, len, kStateTag);
  lens = lens.cpu();
  const int64_t max_len = std::max<int64_t>(1, lens.max().item<int64_t>());
  auto bytes = at::zeros({max_len}, at::TensorOptions(at::kByte));
  if (!s.empty()) std::memcpy(bytes.data_ptr(), s.data(), s.size());
  bytes = bytes.to(c.device());
  auto all = at::empty({c.size() * max_len}, bytes.options());
  c.group->all_gather_into_tensor(all, bytes, kStateTag);
  all = all.cpu();
  std::vector<std::string> out;
  for (int q = 0; q < c.size(); ++q) {
    const auto* p = static_cast<const char*>(all.data_ptr()) + q * max_len;
    out.emplace_back(p, static_cast<size_t>(lens[q].item<int64_t>()));
  }
  return out;
}

// Runs `fn` (which must issue no collective) on this rank, then agrees: when any rank failed,
// every rank throws CheckpointError with the message of the lowest failing rank.
template <typename F>
void agreed(const Comm& c, F&& fn) {
  std::string err;
  try {
    fn();
  } catch (const std::exception& e) {
    err = e.what();
    if (err.empty()) err = "[state] unknown error";
  }
  if (!c.multi()) {
    if (!err.empty()) throw CheckpointError(err);
    return;
  }
  // MAX of (size - rank) over failing ranks picks the lowest failing rank.
  auto flag = at::full({1}, err.empty() ? int64_t{0} : int64_t{c.size() - c.rank()},
                       at::TensorOptions(at::kLong)).to(c.device());
  c.group->all_reduce(flag, dist::ReduceOp::MAX, kStateTag);
  const int64_t v = flag.cpu().item<int64_t>();
  if (v == 0) return;
  const int root = static_cast<int>(c.size() - v);
  broadcast_string(c, err, root);
  if (root != c.rank()) err += fmt::format(" (reported by rank {})", root);
  throw CheckpointError(err);
}

// Fault injection for tests (documented in docs/state-dicts.md), called before each checkpoint
// data file (safetensors) a rank writes. Off unless the variables are set:
//   FSDPP_FAULT_SAVE_DELAY_MS=N  sleep N ms first, so that a test can kill a job mid-save;
//   FSDPP_FAULT_SAVE_FAIL=R      rank R's write fails with a CheckpointError naming the file.
void fault_before_write(int rank, const std::string& file);

}  // namespace fsdpp::state::detail
