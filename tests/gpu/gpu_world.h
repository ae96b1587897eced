#pragma once
// The world every rank of fsdpp_gpu_tests shares, on a CUDA device (gpu_main.cpp).

#include "fsdpp/dist/world.h"

namespace fsdpp::test {
dist::World& gpu_world();
}
