#include "rank_memory.h"

#include <torch/torch.h>

#include <fstream>
#include <string>

namespace fsdpp::observe::detail {
namespace {

// A field of /proc/self/status in MiB: VmHWM the peak resident set so far, VmRSS the current one.
double status_mb(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::stod(line.substr(key.size())) / 1024.0;
  }
  return 0;
}

std::vector<double> column(const at::Tensor& all, int64_t c) {
  const auto v = all.select(1, c).contiguous();
  return std::vector<double>(v.data_ptr<double>(), v.data_ptr<double>() + v.numel());
}

}  // namespace

RankMemory gather_rank_memory(dist::ProcessGroup& group) {
  auto mine = torch::tensor({status_mb("VmHWM"), status_mb("VmRSS")}, torch::kDouble);
  auto all = torch::empty({group.size() * 2}, torch::kDouble);
  group.all_gather_into_tensor(all, mine, {"metrics"});
  all = all.view({group.size(), 2});
  return {column(all, 0), column(all, 1), all.select(1, 0).max().item<double>()};
}

}  // namespace fsdpp::observe::detail
