#pragma once
// Backward prefetch and its names, in one table that fully_shard's to_string and
// parse_backward_prefetch and the config's Choice (fsdp_backward_prefetch) all read.
//
//   fsdpp::parse_backward_prefetch("backward_post");   // BackwardPrefetch::BACKWARD_POST
//   fsdpp::to_string(BackwardPrefetch::NONE);           // "NONE"
//
// Forward prefetch is a depth (FullyShardOptions::forward_prefetch, units gathered ahead), so it
// has no names.

#include <iterator>
#include <string>
#include <string_view>

namespace fsdpp {

// When backward gathers the next unit's parameters (in the backward order of the last step):
// BACKWARD_PRE as the current unit's backward begins (most overlap, one more unit gathered at
// a time), BACKWARD_POST once its gradients are computed, NONE only when it is needed.
enum class BackwardPrefetch { NONE, BACKWARD_PRE, BACKWARD_POST };

struct BackwardPrefetchName {
  BackwardPrefetch value;
  std::string_view name;     // fsdpp's: to_string's, and parse_backward_prefetch's message
  std::string_view hf_name;  // Hugging Face Accelerate's: the config's fsdp_backward_prefetch
};

// In the order messages list them; both spellings of every row parse (in any case).
inline constexpr BackwardPrefetchName kBackwardPrefetchNames[] = {
    //                                 fsdpp            Hugging Face
    {BackwardPrefetch::BACKWARD_PRE,  "BACKWARD_PRE",  "BACKWARD_PRE"},
    {BackwardPrefetch::BACKWARD_POST, "BACKWARD_POST", "BACKWARD_POST"},
    {BackwardPrefetch::NONE,          "NONE",          "NO_PREFETCH"},
};
static_assert(std::size(kBackwardPrefetchNames) ==
              static_cast<size_t>(BackwardPrefetch::BACKWARD_POST) + 1);

const char* to_string(BackwardPrefetch p);
// Either spelling of a row, in any case ("backward_pre", "NO_PREFETCH", ...); ConfigError
// naming fsdpp's names otherwise.
BackwardPrefetch parse_backward_prefetch(const std::string& name);

}  // namespace fsdpp
