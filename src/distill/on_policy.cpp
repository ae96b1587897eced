// On-policy and sequence-level distillation batches (on_policy.h).
#include "fsdpp/distill/on_policy.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "fsdpp/common/error.h"

namespace fsdpp::distill {
namespace {

// SplitMix64's finaliser: the bits of a seed spread over the whole word.
uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t mix(uint64_t a, uint64_t b, uint64_t c) { return mix(mix(mix(a) ^ b) ^ c); }

}  // namespace

std::string_view to_string(BatchSource s) {
  switch (s) {
    case BatchSource::DATA: return "data";
    case BatchSource::STUDENT: return "student";
    case BatchSource::TEACHER: return "teacher";
  }
  return "?";
}

OnPolicy::OnPolicy(const DistillationSection& d, uint64_t seed, int64_t seq_len)
    : lmbda_(d.lmbda), seq_kd_(d.seq_kd), max_new_tokens_(d.max_new_tokens),
      temperature_(d.generation_temperature), seed_(seed), seq_len_(seq_len) {
  FSDPP_CHECK_AS(ConfigError, !active() || (max_new_tokens_ >= 1 && max_new_tokens_ <= seq_len_),
                 "[config] distillation.max_new_tokens={} with data.seq_len={}: expected 1 .. "
                 "seq_len (the prompt is the window's first seq_len + 1 - max_new_tokens tokens)",
                 max_new_tokens_, seq_len_);
}

BatchSource OnPolicy::source(int64_t step, int64_t micro) const {
  // A uniform number in [0, 1) from (seed, step, micro), TRL's random.random() per batch.
  const double u = static_cast<double>(mix(seed_, 0x6f6e2d706f6c6963ULL ^ static_cast<uint64_t>(step),
                                           static_cast<uint64_t>(micro)) >> 11) *
                   0x1.0p-53;
  if (u < lmbda_) return BatchSource::STUDENT;
  return seq_kd_ ? BatchSource::TEACHER : BatchSource::DATA;
}

PolicyBatch OnPolicy::data(const at::Tensor& x, const at::Tensor& y) const {
  return {x, y, y != -100, BatchSource::DATA};
}

PolicyBatch OnPolicy::sample(const Sampler& generate, BatchSource source, const at::Tensor& x,
                             const at::Tensor& y, const std::vector<int64_t>& window_starts,
                             int64_t step) const {
  const int64_t B = x.size(0), T = x.size(1);
  FSDPP_CHECK(static_cast<int64_t>(window_starts.size()) == B && T == seq_len_,
              "[distill] on-policy batch of {} rows of {} tokens with {} window offsets; expected "
              "one offset per row and rows of data.seq_len={}",
              B, T, window_starts.size(), seq_len_);
  // The window (T + 1 tokens) and its prompt.
  const auto window = at::cat({x, y.narrow(1, T - 1, 1)}, 1);
  const int64_t P = T + 1 - max_new_tokens_;
  models::GenerateOptions o;
  o.max_new_tokens = max_new_tokens_;
  o.temperature = temperature_;
  for (int64_t b = 0; b < B; ++b) {
    o.row_generators.push_back(at::make_generator<at::CPUGeneratorImpl>(
        mix(seed_, static_cast<uint64_t>(step), static_cast<uint64_t>(window_starts[b]))));
  }
  at::Tensor seq;
  {
    at::NoGradGuard no_grad;
    seq = generate(window.narrow(1, 0, P), o).to(x.device());  // (B, T + 1)
  }
  FSDPP_CHECK(seq.size(1) == T + 1, "[distill] generate returned {} tokens; expected {}",
              seq.size(1), T + 1);
  PolicyBatch out;
  out.source = source;
  out.inputs = seq.narrow(1, 0, T).contiguous();
  out.targets = seq.narrow(1, 1, T).clone();
  // Position t predicts token t + 1: the sampled ones are P .. T, predicted from P - 1 .. T - 1.
  out.kd_mask = at::zeros({B, T}, x.options().dtype(at::kBool));
  out.kd_mask.narrow(1, P - 1, T - P + 1).fill_(true);
  if (source == BatchSource::STUDENT) out.targets.narrow(1, P - 1, T - P + 1).fill_(-100);
  return out;
}

}  // namespace fsdpp::distill
