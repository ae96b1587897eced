#pragma once
// Strings over a group, as PyTorch's broadcast_object_list / all_gather_object move pickles:
// each is two collectives (the lengths, then the bytes padded to the longest), on the group's
// device. For small metadata (error messages, generator states, checkpoint paths), not data.

#include <string>
#include <vector>

#include "fsdpp/dist/process_group.h"

namespace fsdpp::dist {

// Every rank's `s`, in group-rank order.
std::vector<std::string> all_gather_strings(ProcessGroup& group, const std::string& s,
                                            const CollectiveTag& tag = {});
// `s` of group rank `root` on every rank.
void broadcast_string(ProcessGroup& group, std::string& s, int root, const CollectiveTag& tag = {});

}  // namespace fsdpp::dist
