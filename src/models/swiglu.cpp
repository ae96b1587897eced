#include "fsdpp/models/swiglu.h"

#include <ATen/ATen.h>

#include "fsdpp/fsdp/checkpoint_tail.h"
#include "decoder_parts.h"
#include "meta_modules.h"

namespace fsdpp::models {

SwiGLUImpl::SwiGLUImpl(const SwiGLUOptions& o, at::Device device) : where_(o.where) {
  using detail::make_linear;
  gate_proj = register_module(o.gate, make_linear(o.dim, o.hidden, device));
  if (o.down_before_up) down_proj = register_module(o.down, make_linear(o.hidden, o.dim, device));
  up_proj = register_module(o.up, make_linear(o.dim, o.hidden, device));
  if (!o.down_before_up) down_proj = register_module(o.down, make_linear(o.hidden, o.dim, device));
}

at::Tensor SwiGLUImpl::forward(const at::Tensor& input) {
  const auto x = parallel ? parallel->enter(input, where_.c_str()) : input;
  const auto g = at::silu(detail::project(gate_proj, x, float8[0])) *
                 detail::project(up_proj, x, float8[1]);
  // The block's residual tail (not recomputed under checkpointing); under TP the output goes
  // through exit's collective, which reads it. A float8 down projection is computed again.
  if (parallel) return parallel->exit(detail::project(down_proj, g, float8[2]), where_.c_str());
  if (float8[2] != Float8Recipe::OFF) return detail::project(down_proj, g, float8[2]);
  return fsdpp::tail_linear(down_proj, g);
}

}  // namespace fsdpp::models
