#pragma once
// The estimate of a decoder with many layers, from three short copies of it (private to
// src/estimate/).
//
// The ledger (ledger.h) plays every tensor of a step, so its cost grows with the layers: a
// million of them took minutes in fsdpp-estimate, fsdpp-plan and fsdpp-train's memory check. A
// decoder's layers repeat: past the first few, each one (or each period of a few, such as
// Qwen3-MoE's dense / sparse alternation) adds the same bytes to every tensor term, so they are
// affine in the count of periods. The model is estimated with R, 2R and 3R periods; when the
// three agree on that (each term's two differences equal, the peak at the same place counted
// from the start or the end, the same notes), the numbers are carried to the real count, exactly.
// When they do not, the caller plays every layer, as before. The one term that is not affine,
// the CPU heap's retention (a model of where glibc's best fit leaves holes, which moves by a few
// percent from layer to layer), is carried at its mean growth over the copies, and a note says so.

#include <functional>
#include <optional>

#include "fsdpp/estimate/memory_estimate.h"

namespace fsdpp::estimate_detail {

using ExactEstimate = std::function<MemoryEstimate(const ModelDescription&, const EstimateOptions&)>;

// `exact`'s estimate of `model` from three shorter copies of it, or nullopt when the model is
// short, has no decoder shape, is pipelined, its layers repeat with no period of at most 8, or
// the three copies are not affine in their length. ConfigError when the result exceeds 2^63
// bytes.
std::optional<MemoryEstimate> estimate_from_layer_runs(const ModelDescription& model,
                                                       const EstimateOptions& options,
                                                       const ExactEstimate& exact);

}  // namespace fsdpp::estimate_detail
