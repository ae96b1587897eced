#include "hf_names.h"

#include <fmt/ranges.h>

#include "fsdpp/common/error.h"

namespace fsdpp::models::detail {

void TensorShapes::add(const std::string& name, std::vector<int64_t> shape) {
  index_[name] = list_.size();
  list_.emplace_back(name, std::move(shape));
}

const std::vector<int64_t>& TensorShapes::shape(const std::string& name) const {
  return list_.at(index_.at(name)).second;
}

std::string HfNameTable::to_hf(const std::string& name) const {
  for (const auto& [ours, theirs] : whole) {
    if (name == ours) return theirs;
  }
  if (name.rfind("layers.", 0) == 0) {
    const auto dot = name.find('.', 7);
    const std::string rest = name.substr(dot + 1);
    for (const auto& [ours, theirs] : layer_parts) {
      if (rest == ours) return "model." + name.substr(0, dot + 1) + theirs;
    }
    return "model." + name;
  }
  FSDPP_THROW(ConfigError, "[models] no Hugging Face name for '{}'", name);
}

HfModel hf_decoder(const std::string& name, const DecoderEnds& ends, int64_t vocab, int64_t dim,
                   int64_t n_layers, bool tied, const AddLayer& add_layer) {
  HfModel m{.name = name};
  m.shapes.add(ends.embedding, {vocab, dim});
  for (int64_t i = 0; i < n_layers; ++i) add_layer(m.shapes, fmt::format("layers.{}.", i), i);
  m.shapes.add(ends.norm, {dim});
  if (!tied) m.shapes.add(ends.head, {vocab, dim});
  m.names.whole = {{ends.embedding, "model.embed_tokens.weight"},
                   {ends.norm, "model.norm.weight"},
                   {ends.head, "lm_head.weight"}};
  return m;
}

void check_no_other_hf_tensors(const HfSource& hf, const std::set<std::string>& used, bool tied,
                               const std::string& who) {
  for (const auto& name : hf.names()) {
    if (used.count(name) || name.ends_with("rotary_emb.inv_freq")) continue;
    // transformers may write the tied head; it is the embedding.
    if (name == "lm_head.weight" && tied) continue;
    FSDPP_THROW(ConfigError,
                "[models] unexpected tensor '{}' in the Hugging Face checkpoint: {} has no "
                "counterpart", name, who);
  }
}

void check_known_parameter(const HfModel& model, const std::string& name) {
  FSDPP_CHECK_AS(ConfigError, model.shapes.contains(name),
                 "[models] the model has parameter '{}', which a {} of this config does not",
                 name, model.name);
}

NamedTensors tensors_to_hf(const HfModel& model, const NamedTensors& tensors, const EmitHf& emit) {
  std::map<std::string, at::Tensor> got;
  for (const auto& [name, t] : tensors) {
    FSDPP_CHECK_AS(ConfigError, model.shapes.contains(name),
                   "[models] unexpected tensor '{}': a {} of this config has no such parameter",
                   name, model.name);
    got[name] = t;
  }
  NamedTensors out;
  for (const auto& [name, shape] : model.shapes.list()) {
    auto it = got.find(name);
    FSDPP_CHECK_AS(ConfigError, it != got.end(), "[models] parameter '{}' is missing", name);
    check_shape(name, it->second.sizes().vec(), shape);
    emit(name, model.names.to_hf(name), it->second, out);
  }
  return out;
}

}  // namespace fsdpp::models::detail
