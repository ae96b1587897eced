#pragma once
// The distillation: section's keys for the config layer's schema engine (fsdpp/config/schema.h),
// over any config struct that holds a DistillationSection (distillation.h): fsdpp-train's key
// table (train/config_keys.cpp) takes them as they are, in this order, which is also the order
// to_yaml writes them in.
//
//   section("", {..., distillation_keys<TrainConfig>([](auto& c) -> auto& { return c.distillation; })})

#include <string>
#include <utility>

#include "fsdpp/config/schema.h"
#include "fsdpp/distill/distillation.h"

namespace fsdpp::distill {

// `get` maps a C (or a const C) to its section.
template <class C, class Get>
config::schema::Key distillation_keys(Get get) {
  const auto key = [&get](std::string name, auto member) {
    return config::schema::leaf<C>(std::move(name),
                                   [get, member](auto& c) -> auto& { return get(c).*member; });
  };
  using D = DistillationSection;
  return config::schema::section(
      "distillation",
      {
          key("teacher", &D::teacher),
          key("loss", &D::loss),
          key("beta", &D::beta),
          key("temperature", &D::temperature),
          key("kd_ratio", &D::kd_ratio),
          key("top_k", &D::top_k),
          key("teacher_dtype", &D::teacher_dtype),
          key("teacher_cache", &D::teacher_cache),
          key("lmbda", &D::lmbda),
          key("seq_kd", &D::seq_kd),
          key("max_new_tokens", &D::max_new_tokens),
          key("generation_temperature", &D::generation_temperature),
          key("layer_map", &D::layer_map),
          key("layer_loss", &D::layer_loss),
          key("layer_projection", &D::layer_projection),
          key("layer_loss_weight", &D::layer_loss_weight),
          key("loss_chunk_tokens", &D::loss_chunk_tokens),
      });
}

}  // namespace fsdpp::distill
