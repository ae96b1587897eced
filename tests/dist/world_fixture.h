#pragma once
// The world every rank of fsdpp_dist_tests shares; made once in main() from the launcher's
// environment.

#include <memory>

#include "fsdpp/dist/world.h"

namespace fsdpp::test {
dist::World& world();
}
