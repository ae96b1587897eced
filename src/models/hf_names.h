#pragma once
// Private to src/models: what every model's Hugging Face converter (hf_llama.cpp,
// hf_qwen3_moe.cpp) does alike with names, in both directions: the tensors a config implies with
// their shapes, one table from fsdpp's names to Hugging Face's, and the checks that a checkpoint
// holds those tensors and nothing else (import) or that a model's tensors are those (export).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "fsdpp/models/hf_llama.h"  // NamedTensors
#include "hf_directory.h"

namespace fsdpp::models::detail {

// Every fsdpp parameter of a config with its shape, in the model's order.
class TensorShapes {
 public:
  void add(const std::string& name, std::vector<int64_t> shape);
  const std::vector<std::pair<std::string, std::vector<int64_t>>>& list() const { return list_; }
  bool contains(const std::string& name) const { return index_.count(name) > 0; }
  const std::vector<int64_t>& shape(const std::string& name) const;

 private:
  std::vector<std::pair<std::string, std::vector<int64_t>>> list_;
  std::map<std::string, size_t> index_;
};

// fsdpp's name -> Hugging Face's, as a table: whole names, and the parts after "layers.<i>."
// that become "model.layers.<i>." + the part's Hugging Face name (a part the table does not
// list keeps its own).
struct HfNameTable {
  std::vector<std::pair<std::string, std::string>> whole;
  std::vector<std::pair<std::string, std::string>> layer_parts;

  // ConfigError "[models] no Hugging Face name for '<name>'" for a whole name not listed.
  std::string to_hf(const std::string& name) const;
};

// What a converter's errors call the architecture ("Llama", "Qwen3Moe").
struct HfModel {
  std::string name;
  TensorShapes shapes;
  HfNameTable names;
};

// The parameters of a decoder of `n_layers` layers: the embedding, each layer's (add_layer gets
// the shapes, the layer's prefix "layers.<i>." and i), the final norm and the head (absent when
// tied), in that order; the embedding, norm and head named as `ends` (fsdpp's names) ->
// model.embed_tokens.weight, model.norm.weight, lm_head.weight.
struct DecoderEnds {
  std::string embedding, norm, head;
};
using AddLayer =
    std::function<void(TensorShapes& shapes, const std::string& prefix, int64_t layer)>;
HfModel hf_decoder(const std::string& name, const DecoderEnds& ends, int64_t vocab, int64_t dim,
                   int64_t n_layers, bool tied, const AddLayer& add_layer);

// Throws "[models] unexpected tensor '<name>' in the Hugging Face checkpoint: <who> has no
// counterpart" for a tensor of `hf` that is not `used` (the rotary inv_freq buffers, derived,
// skipped; so is lm_head.weight of a tied model, which is the embedding).
void check_no_other_hf_tensors(const HfSource& hf, const std::set<std::string>& used, bool tied,
                               const std::string& who);

// ConfigError "[models] the model has parameter '<name>', which a <model> of this config does
// not" unless the config implies it: a row reader's first check.
void check_known_parameter(const HfModel& model, const std::string& name);

// The export: `tensors` (fsdpp's names) must be exactly the config's parameters with their
// shapes ("unexpected tensor", "parameter '...' is missing", check_shape); then each, in the
// model's order, is handed to `emit` with its Hugging Face name (the table's), which appends
// what the checkpoint holds for it.
using EmitHf = std::function<void(const std::string& name, const std::string& hf_name,
                                  const at::Tensor& tensor, NamedTensors& out)>;
NamedTensors tensors_to_hf(const HfModel& model, const NamedTensors& tensors, const EmitHf& emit);

}  // namespace fsdpp::models::detail
