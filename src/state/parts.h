#pragma once
// Private to src/state: a model held in parts across the ranks (pipeline stages: each rank its
// own stages, with the whole model's parameter names). A checkpoint is still the whole model's:
// the records of every rank are merged by name, so that the index lists each tensor once with
// the pieces of the ranks that hold it, and a load checks names against what all ranks hold
// together. With every rank holding the whole model the merge is rank 0's list, as before.

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "agree.h"
#include "records.h"

namespace fsdpp::state::detail {

// Every part's parameters, part after part (each part the module given last to fully_shard).
std::vector<ShardedParam> parts_params(const std::vector<torch::nn::Module*>& parts);
// Every part's buffers that a save writes, each name once.
NamedTensors parts_buffers(const std::vector<torch::nn::Module*>& parts,
                           const std::function<bool(const std::string&)>& skip);

// The records of all ranks merged by name: rank 0's in its order, then each later rank's that
// no earlier rank listed. `holder` is the lowest rank listing each; `local` maps this rank's
// record i to its place in `metas`. Collective over c.
struct MergedRecords {
  std::vector<RecordMeta> metas;
  std::vector<int> holder;
  std::vector<size_t> local;
  std::map<std::string, size_t> index;  // name -> place in metas
};
MergedRecords merge_records(const Comm& c, const std::vector<RecordMeta>& mine);

// The union of every rank's names. Collective over c.
std::set<std::string> all_names(const Comm& c, const std::vector<std::string>& mine);

// Rank 0 writes the buffers: a CheckpointError on every rank when a buffer only another rank
// holds would be lost. Collective over c.
void check_buffers_on_rank0(const Comm& c, const NamedTensors& buffers);

}  // namespace fsdpp::state::detail
