#pragma once
// Distillation on intermediate layers (distillation.layer_map, docs/distillation.md#intermediate-
// layers): the student's hidden states pulled towards the teacher's at mapped layers, as NVIDIA
// Minitron and Model Optimizer do for depth-pruned students (fsdpp-ckpt compress --num-layers).
//
//   cosine  1 - cos(h_s, h_t) per position, averaged over the positions kept
//   mse     (h_s - h_t)^2 averaged over the positions kept and the hidden features
//
// Each pair's loss is averaged, then the pairs are averaged. The student and the teacher have
// the same width (a learned projection between different widths is not built).

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "fsdpp/train/choice.h"

namespace fsdpp::train {

enum class LayerLossType { COSINE, MSE };

template <>
struct ChoiceNames<LayerLossType> {
  static constexpr std::string_view kWhat = "layer loss";
  static constexpr bool kAnyCase = false;
  static constexpr std::array<std::pair<LayerLossType, std::string_view>, 2> kNames{{
      {LayerLossType::COSINE, "cosine"},
      {LayerLossType::MSE, "mse"},
  }};
};

// student[i] and teacher[i] (B, T, D), mask (B, T) bool: the positions averaged over (none: 0
// with a zero gradient). The teacher's states are constants. Computed in float32 (float64 for
// float64 input).
at::Tensor layer_distillation_loss(const std::vector<at::Tensor>& student,
                                   const std::vector<at::Tensor>& teacher, const at::Tensor& mask,
                                   LayerLossType type);

}  // namespace fsdpp::train
