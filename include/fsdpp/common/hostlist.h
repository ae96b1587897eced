#pragma once
// SLURM's hostlist syntax, as SLURM_JOB_NODELIST holds it: "gpu[01-04,07],login1" is gpu01,
// gpu02, gpu03, gpu04, gpu07, login1. A bracket may hold ranges and single numbers; leading
// zeros keep their width; several brackets in one name multiply ("r[1-2]n[1-2]": r1n1, r1n2,
// r2n1, r2n2). No LibTorch: fsdpp-run uses it too.

#include <string>
#include <string_view>
#include <vector>

namespace fsdpp {

// Throws ConfigError naming the list and what is wrong (an unclosed bracket, a range that runs
// backwards, more than 1,000,000 hosts).
std::vector<std::string> expand_hostlist(std::string_view list);

// The first host of the list, without expanding the rest.
std::string first_host(std::string_view list);

}  // namespace fsdpp
