#pragma once
// The closing sample's model, gathered once (finish.cpp). Sampling runs one forward per token; a
// sharded model all-gathers every unit in each, so 200 tokens of a 5-unit model are 1000
// all-gathers, most of a short run's time. When the whole model fits beside what the rank holds,
// it is gathered once for the whole sample instead (FSDP2's unshard() before generate), and
// sharded again after. Private to src/train.

#include <string>

namespace fsdpp::train::detail {

struct TrainSession;

class SampleHold {
 public:
  // Collective over the world: every rank measures its headroom and all agree on the least.
  // Holds the gathered model when its unsharded bytes take at most half of every rank's headroom
  // (the rest for the KV cache and the gathers' buffers) and its parameters are not offloaded;
  // otherwise holds nothing and the sample gathers per token as before. Pipelined runs: nothing.
  explicit SampleHold(TrainSession& s);
  ~SampleHold();  // reshards what it holds
  SampleHold(const SampleHold&) = delete;
  SampleHold& operator=(const SampleHold&) = delete;

  bool held() const { return held_; }
  // "gathered once (3.1 MiB per rank)" or why not, for the log's sample line.
  const std::string& how() const { return how_; }

 private:
  TrainSession& s_;
  bool held_ = false;
  std::string how_;
};

}  // namespace fsdpp::train::detail
