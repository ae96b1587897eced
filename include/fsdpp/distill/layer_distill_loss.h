#pragma once
// Distillation on intermediate layers (distillation.layer_map, docs/distillation.md#intermediate-
// layers): the student's hidden states pulled towards the teacher's at mapped layers, as NVIDIA
// Minitron and Model Optimizer do for depth-pruned students (fsdpp-ckpt compress --num-layers).
//
//   cosine  1 - cos(h_s, h_t) per position, averaged over the positions kept
//   mse     (h_s - h_t)^2 averaged over the positions kept and the hidden features
//
// Each pair's loss is averaged, then the pairs are averaged. Where the widths differ the
// student's states go through a learned linear map first (distillation.layer_projection, as
// Minitron's and Model Optimizer's): h_s W^T, W (D_teacher, D_student), no bias.

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "fsdpp/config/choice.h"

namespace fsdpp::distill {

enum class LayerLossType { COSINE, MSE };

}  // namespace fsdpp::distill

namespace fsdpp::config {

template <>
struct ChoiceNames<distill::LayerLossType> {
  static constexpr std::string_view kWhat = "layer loss";
  static constexpr bool kAnyCase = false;
  static constexpr std::array<std::pair<distill::LayerLossType, std::string_view>, 2> kNames{{
      {distill::LayerLossType::COSINE, "cosine"},
      {distill::LayerLossType::MSE, "mse"},
  }};
};

}  // namespace fsdpp::config

namespace fsdpp::distill {

// distillation.layer_projection: auto, a linear map for each pair whose widths differ; linear,
// one for every pair; none, the states compared as they are (the widths must agree).
enum class LayerProjection { AUTO, LINEAR, NONE };

}  // namespace fsdpp::distill

namespace fsdpp::config {

template <>
struct ChoiceNames<distill::LayerProjection> {
  static constexpr std::string_view kWhat = "layer projection";
  static constexpr bool kAnyCase = false;
  static constexpr std::array<std::pair<distill::LayerProjection, std::string_view>, 3> kNames{{
      {distill::LayerProjection::AUTO, "auto"},
      {distill::LayerProjection::LINEAR, "linear"},
      {distill::LayerProjection::NONE, "none"},
  }};
};

}  // namespace fsdpp::config

namespace fsdpp::distill {

// student[i] (B, T, D_s) and teacher[i] (B, T, D_t), mask (B, T) bool: the positions averaged
// over (none: 0 with a zero gradient). The teacher's states are constants. `projections`:
// empty, or one per pair: a (D_t, D_s) weight the student's states are mapped through (its
// gradient flows), or an undefined tensor (D_s == D_t, compared as they are). Computed in
// float32 (float64 for float64 input).
at::Tensor layer_distillation_loss(const std::vector<at::Tensor>& student,
                                   const std::vector<at::Tensor>& teacher, const at::Tensor& mask,
                                   LayerLossType type,
                                   const std::vector<at::Tensor>& projections = {});

}  // namespace fsdpp::distill
