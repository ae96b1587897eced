#pragma once
// Models that do not fit on one device, from their first byte: parameters made without storage
// (the meta device), sharded by fully_shard without storage, then given this rank's storage and
// values. PyTorch FSDP2's meta-device flow (construct on meta, fully_shard, to_empty,
// init_weights), in C++ (docs/fully-shard.md#models-larger-than-one-device).
//
//   fsdpp::models::Llama model(cfg, at::kMeta);        // shapes and dtypes, no storage
//   for (auto& block : *model->layers) fsdpp::fully_shard(*block, opts);
//   fsdpp::fully_shard(model, opts);                    // units whose shards have no storage
//   fsdpp::to_empty(*model, at::kCPU);                  // this rank's shards, zeros
//   fsdpp::init_exact(*model, model->init_plan());      // = Llama(cfg) sharded, bit for bit
//
// No rank ever holds a parameter whole: to_empty allocates the local shards only, and the
// initialisations below fill them in chunks of InitOptions::chunk_bytes. The same flow loads
// trained weights instead (load_rows; fsdpp's checkpoints through state::load_state_dict).
//
// A module of one's own: LibTorch's modules allocate and draw their parameters when made and
// C++ has no default-device switch, so call to_meta(*block) right after making each block (at
// most one block then exists with storage), or make the parameters on the meta device in the
// constructor; then fully_shard, to_empty, and either
//   - init_exact with an InitPlan of the module's own draws (bit-equal to drawing them whole), or
//   - init_shards(root, param_init_fn): the function runs on every module that owns parameters,
//     whose tensors are then this rank's shards (FSDP1's param_init_fn; not the values one
//     process would draw), or
//   - init_per_shard: every element from a counter-based generator keyed by the parameter and
//     the element's index, so only this rank's rows are drawn (the same values on any number of
//     ranks and any layout, but not those of one process's generator).
//
// Buffers on the meta device get zeros from to_empty (a module that needs other values, as a
// norm's running variance, sets them in its param_init_fn); buffers that have storage move to
// the device with their values (fsdpp's Llama computes its rotary tables when it is made).

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace fsdpp {

// tensor.set_data(data) that may also cross between the meta device and a device with storage,
// which LibTorch's set_data refuses (PyTorch's Module._apply replaces the Parameter object
// instead, which the member handles of C++ modules would not see). The tensor keeps its
// identity, its autograd metadata and hooks; its gradient accumulator is dropped, to be made
// again for the new device.
void rebind_data(at::Tensor& tensor, const at::Tensor& data);

// Every parameter and buffer of `module` (and its children) onto the meta device: the same
// shapes, dtypes and requires_grad, no storage, the registered tensors unchanged. Refuses a
// module that holds an FSDP unit.
void to_meta(torch::nn::Module& module);
// Whether a parameter or buffer of `module` (or of a unit's shards inside it) has no storage.
bool has_meta_tensors(torch::nn::Module& module);

// Gives storage on `device` to every tensor of `root` that has none: the shards of every FSDP
// unit inside it (this rank's, zeros; what OffloadPolicy offloads stays on the CPU), the
// parameters outside units (whole, zeros) and buffers (zeros). Buffers that have storage on
// another device move there. Local: no communication.
void to_empty(torch::nn::Module& root, at::Device device);
// The same for a model held in parts (pipeline stages).
void to_empty(const std::vector<torch::nn::Module*>& parts, at::Device device);

// How a model draws its weights, as data: one CPU generator (mt19937) seeded with `seed`, and
// for each parameter in order either NORMAL, a float32 tensor of its whole shape drawn with
// normal_(mean, std, generator) and copied in, or FILL, every element `value` (no draw).
// fsdpp's models describe their own init this way (Llama::init_plan, Qwen3Moe::init_plan) and
// make their eager init from it, so that init_exact gives the same bits.
struct ParamInit {
  enum class Kind { NORMAL, FILL };
  std::string name;            // as named_parameters() of the model names it
  std::vector<int64_t> shape;  // whole: before tensor, expert or pipeline parallelism cut it
  Kind kind = Kind::NORMAL;
  double mean = 0, std = 1;  // NORMAL
  double value = 0;          // FILL
};
struct InitPlan {
  uint64_t seed = 0;
  std::vector<ParamInit> params;
};

// Draws the plan into whole parameters: `module`'s own, by name, each of the plan's shape
// (what a model's constructor does). A parameter of the module missing from the plan is an
// error, as is one of another shape.
void init_whole(torch::nn::Module& module, const InitPlan& plan);

struct InitOptions {
  // The most bytes of float32 values drawn (or read) at once: the initialisations hold this
  // rank's shards plus one chunk of this size. Rounded to whole rows, and for init_exact to a
  // multiple of 16 elements (the CPU generator's normal_ draws pairs 8 apart in blocks of 16).
  int64_t chunk_bytes = int64_t{64} << 20;
};

// Exact: every parameter's shard holds the values a single process drawing `plan` whole would
// give it, bit for bit, under any layout (FSDP on any number of ranks, HYBRID, tensor and
// expert parallelism, pipeline stages). Every rank draws the whole sequence in chunks, keeps its
// rows and skips the generator past the chunks it holds nothing of, so it costs one pass of the
// generator over the whole model on every rank. `parts`: the modules given last to fully_shard
// (or plain modules, whose parameters are whole). Every parameter of the parts must be in the
// plan with its whole shape; plan entries no part holds are drawn and dropped. No
// communication. The parameters must be at rest (between steps).
void init_exact(const std::vector<torch::nn::Module*>& parts, const InitPlan& plan,
                const InitOptions& options = {});
void init_exact(torch::nn::Module& root, const InitPlan& plan, const InitOptions& options = {});

// Per shard: each element of a NORMAL parameter from Philox-4x32-10 keyed by (plan.seed, the
// parameter's name) at the element's index in the whole parameter (Box-Muller of two 32-bit
// words), so a rank draws its own rows only: the values do not depend on the world size or
// layout, and differ from init_exact's (and one process's). FILL as init_exact.
void init_per_shard(const std::vector<torch::nn::Module*>& parts, const InitPlan& plan,
                    const InitOptions& options = {});
void init_per_shard(torch::nn::Module& root, const InitPlan& plan, const InitOptions& options = {});

// A user's initialisation on the local shards: param_init_fn(module) for every module inside
// `root` that registers parameters of its own, with each of those parameters' data this rank's
// padded shard (chunk_rows, ...), as the optimizer sees it; the padding rows are zeroed
// afterwards. torch::nn::init functions that read a matrix's fan-in from dim 1 (kaiming_*,
// xavier_* of a Linear's (out, in) weight) see the whole fan-in; the values are not those of
// one process.
void init_shards(torch::nn::Module& root,
                 const std::function<void(torch::nn::Module&)>& param_init_fn);

// Loading whole tensors into shards: for every parameter of `parts`, read(name, first_row, rows)
// returns rows [first_row, first_row + rows) of the whole tensor (its whole shape with dim 0 cut
// to `rows`, any floating dtype: converted), called for this rank's rows only, in chunks of at
// most InitOptions::chunk_bytes. Peak memory: the shards plus one chunk, plus what `read` holds.
using RowReader =
    std::function<at::Tensor(const std::string& name, int64_t first_row, int64_t rows)>;
void load_rows(const std::vector<torch::nn::Module*>& parts, const RowReader& read,
               const InitOptions& options = {});

}  // namespace fsdpp
