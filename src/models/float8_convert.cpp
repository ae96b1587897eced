#include "fsdpp/models/float8_convert.h"

#include <array>
#include <cstddef>

#include "fsdpp/models/decoder_attention.h"
#include "fsdpp/models/swiglu.h"

namespace fsdpp::models {
namespace {

// The name a projection's module has under its parent.
std::string child_name(torch::nn::Module& parent, const torch::nn::Linear& linear) {
  for (const auto& item : parent.named_children()) {
    if (item.value().get() == linear.get()) return item.key();
  }
  return "?";
}

// Each projection of one module: its recipe as the filter decides for its weight's shape.
template <size_t N>
void convert(torch::nn::Module& parent, const std::string& prefix,
             std::array<torch::nn::Linear*, N> linears, std::array<Float8Recipe, N>& recipes,
             const Float8Options& o, std::vector<std::string>& converted) {
  for (size_t i = 0; i < N; ++i) {
    const auto& w = (*linears[i])->weight;
    const bool on = float8_converts(w.size(0), w.size(1), o.recipe, o.filter);
    recipes[i] = on ? o.recipe : Float8Recipe::OFF;
    if (on) converted.push_back(prefix + child_name(parent, *linears[i]));
  }
}

}  // namespace

std::vector<std::string> convert_to_float8(torch::nn::Module& model, const Float8Options& o) {
  std::vector<std::string> converted;
  for (const auto& item : model.named_modules("", /*include_self=*/true)) {
    auto& m = *item.value();
    const std::string prefix = item.key().empty() ? "" : item.key() + ".";
    if (auto* a = m.as<DecoderAttentionImpl>()) {
      convert<4>(m, prefix, {&a->q_proj, &a->k_proj, &a->v_proj, &a->o_proj}, a->float8, o,
                 converted);
    } else if (auto* f = m.as<SwiGLUImpl>()) {
      convert<3>(m, prefix, {&f->gate_proj, &f->up_proj, &f->down_proj}, f->float8, o, converted);
    }
  }
  return converted;
}

}  // namespace fsdpp::models
