#pragma once
// Mixed precision and CPU offload policies of a unit (PyTorch FSDP2's MixedPrecisionPolicy and
// CPUOffloadPolicy). The optimizer always sees the master shards in the parameters' own dtype
// (normally float32) on the offload device; only what is gathered and reduced changes.

#include <c10/core/ScalarType.h>

#include <optional>

namespace fsdpp {

struct MixedPrecisionPolicy {
  // dtype of the gathered (unsharded) parameters, so of forward and backward compute. Unset:
  // the parameters' own dtype.
  std::optional<at::ScalarType> param_dtype;
  // dtype of the gradient reduce-scatter / all-reduce. Unset: param_dtype. float32 here with
  // bf16 params sums gradients exactly as full precision would, at twice the reduce bytes.
  std::optional<at::ScalarType> reduce_dtype;
  // Floating-point outputs of the unit's forward are cast to this (e.g. float32 logits on the
  // root for the loss). Unset: left as computed.
  std::optional<at::ScalarType> output_dtype;
  // Floating-point tensor arguments of the unit's forward are cast to param_dtype, so that a
  // float32 input meets bf16 weights in the same dtype.
  bool cast_forward_inputs = true;

  bool enabled() const { return param_dtype || reduce_dtype || output_dtype; }
};

struct OffloadPolicy {
  // Parameter shards, their gradients and so the optimizer state (created from them) live in
  // host memory; each unit is copied to the compute device just before its all-gather and its
  // reduced gradient copied back, and the optimizer steps on the CPU.
  bool offload_params = false;
  // Page-locked host shards, so the copies to and from a CUDA device can be asynchronous.
  bool pin_memory = true;
};

}  // namespace fsdpp
