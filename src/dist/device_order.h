#pragma once
// Where a collective's tensors live and how it is ordered with the caller's device work: the
// two things a ProcessGroup does for tensors that are not plain CPU tensors on Gloo, written
// once for every collective.
//
// Order (tensors on a GPU), as c10d orders its own collectives and FSDP2 uses them: the
// collective runs after what the caller's current stream held when it was issued (an event
// recorded then), on one of the group's own streams (the queue thread issues it there; the
// caller's thread never waits for the device), and Work::wait() makes the waiter's current
// stream wait for an event recorded after it. The tensors stay referenced until that wait, so
// the caching allocator cannot hand their memory to the waiter's stream before the collective
// has used it (no record_stream).
//
// Staging (a tensor on another device than the backend's: CUDA tensors on Gloo, CPU tensors on
// NCCL): the queue thread copies what the collective reads to the backend's device, runs it,
// and copies what it wrote back; the caller sees the same contract.

#include <ATen/Tensor.h>

#include <functional>
#include <memory>
#include <vector>

#include "fsdpp/dist/device.h"

namespace fsdpp::dist::detail {

struct DeviceOrder {
  c10::Device device{c10::kCPU};
  Stream comm;   // the group's stream the collective is issued on
  Event issued;  // the caller's current stream when it was issued
  Event done;    // `comm` after the collective, recorded before the task completes
  std::vector<at::Tensor> keep_alive;  // released by the first wait()
};

// The tensors a collective reads and the ones it writes (one tensor may be in both).
struct Operands {
  std::vector<at::Tensor> read;
  std::vector<at::Tensor> written;
};

// The device the caller's tensors are on (the CPU when there are none).
c10::Device device_of(const Operands& operands);

// Runs `body` with `operands` on `backend_device`: as they are when they are there, else on
// copies made there (what is read copied in first, what is written copied back after).
void run_staged(const Operands& operands, c10::Device backend_device,
                const std::function<void(const Operands&)>& body);

// A collective's body as the group's queue runs it: staged to the backend's device, and for
// tensors on a GPU issued on `order->comm` after `order->issued`, `order->done` recorded after.
// ProcessGroup::submit() finds it in the std::function it is given (target()) to hand the
// Work its order.
struct PlacedCollective {
  std::shared_ptr<DeviceOrder> order;  // null for CPU tensors
  Operands operands;
  c10::Device backend_device{c10::kCPU};
  std::function<void(const Operands&)> body;
  int64_t delay_cycles = 0;  // FSDPP_DEBUG_COMM_DELAY_CYCLES: spun on `order->comm` first
  void operator()() const;
};

// `operands` are the tensors `body` reads and writes, as the caller gave them. For tensors on a
// GPU the order's event is recorded on the caller's current stream now, and `comm` is where the
// collective will be issued.
PlacedCollective place_collective(Operands operands, c10::Device backend_device, const Stream& comm,
                                  std::function<void(const Operands&)> body, int64_t delay_cycles);

}  // namespace fsdpp::dist::detail
