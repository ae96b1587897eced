#pragma once
// The streams and the held buffers that order one root's collectives with its computation on a
// GPU (PyTorch FSDP2's FSDPCommContext, AllGatherState and ReduceScatterState), owned by the
// root state. On the CPU every stream is empty and nothing is held: the same calls run today's
// path, where each collective's buffers are freed when it is done.
//
// All-gather: a unit's copy-in (its shard converted to the param dtype) and gathered buffer are
// made on the all-gather copy-in stream, which waits for the compute stream once per forward
// (the optimizer step is the last thing that changed the shards); the group issues the
// all-gather after the copy-in on its own stream (process_group.h), and the compute stream
// waits for it where the unit copies its parameters out. The buffers live on until the next
// copy-in has waited for the event recorded after that copy-out: the caching allocator then
// cannot give them to the copy-in stream while the compute stream still reads them (no
// record_stream). limit_all_gathers bounds how many gathers are in flight, as on the CPU.
//
// Reduce-scatter: a bucket's input is made and filled on the compute stream and reduced on the
// group's reduce stream; before the next bucket the compute stream waits for the previous
// reduce-scatter (FSDP2 keeps one in flight), which lets its input go. The end of backward makes
// the compute stream wait for the rest. The CPU waits for the device nowhere in this.

#include <ATen/Tensor.h>
#include <c10/core/Device.h>

#include <vector>

#include "fsdpp/dist/device.h"
#include "fsdpp/dist/process_group.h"

namespace fsdpp {

class FSDPCommContext {
 public:
  explicit FSDPCommContext(c10::Device device);

  c10::Device device() const { return device_; }
  // Where copy-ins, gathered buffers and the all-gathers' issue go (empty on the CPU).
  const dist::Stream& all_gather_copy_in() const { return copy_in_; }

  // The copy-ins issued from now on follow what the compute stream holds now: at the root's
  // forward (after the optimizer step) and when a unit is held gathered between steps.
  void gathers_follow_compute();
  // Before a copy-in: the copy-in stream waits for the last retired gather's copy-out and its
  // buffers go. Call under a StreamGuard of all_gather_copy_in().
  void before_copy_in();
  // A gather whose parameters were copied out on the compute stream (or dropped): its buffers
  // are held until the next copy-in has waited for that point. Nothing held on the CPU.
  void retire_gather(std::vector<at::Tensor> buffers);

  // Before a reduce-scatter's input is made: the compute stream waits for the previous one.
  void before_reduce();
  void reduce_issued(const dist::Work& work);

 private:
  c10::Device device_;
  dist::Stream copy_in_;
  struct AllGatherState {
    std::vector<at::Tensor> buffers;
    dist::Event copied_out;
  };
  AllGatherState all_gather_state_;
  dist::Work last_reduce_;
};

}  // namespace fsdpp
