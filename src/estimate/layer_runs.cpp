#include "layer_runs.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <limits>
#include <regex>
#include <string>
#include <vector>

#include "fsdpp/common/error.h"

namespace fsdpp::estimate_detail {
namespace {

constexpr int64_t kMaxPeriod = 8;
constexpr int64_t kPeriodsPerCopy = 64;  // the shortest copy's periods: past every warm-up

bool same_unit(const ModelDescription::Unit& a, const ModelDescription::Unit& b) {
  if (a.experts != b.experts || a.params.size() != b.params.size()) return false;
  for (size_t k = 0; k < a.params.size(); ++k) {
    if (a.params[k].rows != b.params[k].rows || a.params[k].row_numel != b.params[k].row_numel) return false;
  }
  return true;
}

// The smallest p <= kMaxPeriod with layer i like layer i + p throughout (0: none).
int64_t layer_period(const ModelDescription& m) {
  const int64_t n = static_cast<int64_t>(m.units.size()) - 1;
  const auto* moe = m.shape->moe ? &*m.shape->moe : nullptr;
  for (int64_t p = 1; p <= kMaxPeriod; ++p) {
    if (n % p != 0) continue;
    bool periodic = true;
    for (int64_t i = 1; i + p <= n && periodic; ++i) {
      periodic = same_unit(m.units[static_cast<size_t>(i)], m.units[static_cast<size_t>(i + p)]) &&
                 (!moe || moe->sparse[static_cast<size_t>(i - 1)] == moe->sparse[static_cast<size_t>(i - 1 + p)]);
    }
    if (periodic) return p;
  }
  return 0;
}

// The model with its first `layers` layers (a whole number of periods).
ModelDescription shortened(const ModelDescription& m, int64_t layers) {
  ModelDescription s;
  s.shape = m.shape;
  s.shape->n_layers = layers;
  if (s.shape->moe) s.shape->moe->sparse.resize(static_cast<size_t>(layers));
  s.units.assign(m.units.begin(), m.units.begin() + 1 + layers);
  return s;
}

// Every "layers.<i>" of a copy of `copy_layers` layers, renamed as the same layer counted from
// the end in a model of `layers` (the first half of the copy keeps its names: counted from the
// start).
std::string renamed(const std::string& where, int64_t copy_layers, int64_t layers) {
  static const std::regex kLayer(R"(layers\.(\d+))");
  std::string out;
  auto begin = where.cbegin();
  for (std::sregex_iterator it(where.begin(), where.end(), kLayer), end; it != end; ++it) {
    const int64_t i = std::stoll((*it)[1].str());
    out.append(begin, where.cbegin() + it->position());
    out += "layers." + std::to_string(2 * i < copy_layers ? i : i + layers - copy_layers);
    begin = where.cbegin() + it->position() + it->length();
  }
  out.append(begin, where.cend());
  return out;
}

// The byte counts of an estimate that are sums of tensors, in one list (the same order for every
// estimate): affine in the layer count, exactly. Not the allocator's retention (nor the total
// that includes it), which models where glibc's best fit leaves holes: it grows by a few percent
// more or less from one layer to the next.
std::vector<int64_t*> tensor_terms(MemoryEstimate& e) {
  return {&e.parameters, &e.gradients,    &e.optimizer_state,  &e.unsharded,       &e.activations,
          &e.teacher,    &e.tensors,      &e.runtime,          &e.host,            &e.model_states,
          &e.held.parameters, &e.held.gradients, &e.held.optimizer_state};
}

__int128 checked(__int128 value, int64_t layers) {
  FSDPP_CHECK_AS(ConfigError, value >= 0 && value <= std::numeric_limits<int64_t>::max(),
                 "[estimate] a model of {} layers needs more than 2^63 bytes per rank", layers);
  return value;
}

}  // namespace

std::optional<MemoryEstimate> estimate_from_layer_runs(const ModelDescription& model,
                                                       const EstimateOptions& o,
                                                       const ExactEstimate& exact) {
  if (!model.shape || o.pipeline.degree > 1) return std::nullopt;
  const int64_t n = static_cast<int64_t>(model.units.size()) - 1;
  if (n != model.shape->n_layers || n < 16 * kPeriodsPerCopy) return std::nullopt;
  const int64_t p = layer_period(model);
  const int64_t r = kPeriodsPerCopy * p;  // layers of the shortest copy
  if (p == 0 || n < 16 * r) return std::nullopt;  // short enough to play every layer
  std::array<MemoryEstimate, 3> e;
  for (int k = 0; k < 3; ++k) e[k] = exact(shortened(model, (k + 1) * r), o);
  // Affine in the copies' length: every term's two steps equal (a whole number of bytes per layer
  // period), the peak at one place of the real model, the same notes.
  const auto t0 = tensor_terms(e[0]), t1 = tensor_terms(e[1]), t2 = tensor_terms(e[2]);
  std::array<std::string, 3> where;
  for (int k = 0; k < 3; ++k) where[k] = renamed(e[k].peak_at, (k + 1) * r, n);
  if (where[0] != where[1] || where[1] != where[2] || e[0].notes != e[1].notes || e[1].notes != e[2].notes ||
      e[0].shard_world != e[2].shard_world || e[0].expert_shard_world != e[2].expert_shard_world ||
      !e[2].stages.empty()) {
    return std::nullopt;
  }
  MemoryEstimate out = e[2];
  const auto to = tensor_terms(out);
  const int64_t periods_left = (n - 3 * r) / p;  // beyond the longest copy
  for (size_t k = 0; k < to.size(); ++k) {
    const int64_t step = *t1[k] - *t0[k];
    if (*t2[k] - *t1[k] != step || step % kPeriodsPerCopy != 0) return std::nullopt;
    *to[k] = static_cast<int64_t>(
        checked(static_cast<__int128>(*t2[k]) + static_cast<__int128>(step / kPeriodsPerCopy) * periods_left, n));
  }
  // The heap's retention at its mean growth per period over the copies (a model of glibc's heap
  // either way: docs/estimate.md gives its measured gap).
  const double heap_step = static_cast<double>(e[2].allocator - e[0].allocator) / (2 * kPeriodsPerCopy);
  out.allocator = static_cast<int64_t>(
      checked(static_cast<__int128>(std::max(0.0, static_cast<double>(e[2].allocator) + heap_step * periods_left)), n));
  out.total = static_cast<int64_t>(checked(static_cast<__int128>(out.tensors) + out.allocator + out.runtime, n));
  out.peak_at = where[2];
  out.notes.push_back(fmt::format(
      "{} layers: estimated from copies of {}, {} and {} layers, every tensor term affine in the layer count "
      "(checked); glibc's heap retention at their mean growth",
      n, r, 2 * r, 3 * r));
  return out;
}

}  // namespace fsdpp::estimate_detail
