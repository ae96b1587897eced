#pragma once
// What the estimate reports of a played step (private to src/estimate/): the ledger's peak by
// what holds it, and the notes the numbers rest on.

#include <array>

#include "estimate_layout.h"
#include "ledger.h"
#include "qwen3_activations.h"

namespace fsdpp::estimate_detail {

// e's tensor terms at the ledger's peak (offloaded categories on the host, in e.host), the
// allocator's retention on the CPU (`heap`: the ledger modelled glibc's heap) and the total.
void report_peak(MemoryEstimate& e, const Ledger& l, const std::array<bool, kNumCats>& on_device, bool heap,
                 bool offload, const EstimateOptions& o);
// The assumptions an estimate of layout `a` rests on.
void report_notes(MemoryEstimate& e, const EstimateOptions& o, const DataParallelLayout& a, const MoeDims& md);

}  // namespace fsdpp::estimate_detail
