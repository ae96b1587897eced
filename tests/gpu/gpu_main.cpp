// fsdpp_gpu_tests: the tests that need a GPU (CTest label gpu; `make test-gpu`, docs/gpus.md).
// Started by fsdpp-run on one rank (NCCL) or on two ranks over Gloo on the one device
// (FSDPP_BACKEND=gloo FSDPP_DEVICE=cuda:0). Without a visible CUDA device it fails at once,
// saying so: a GPU test never passes by skipping.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "fsdpp/dist/device.h"
#include "gpu_world.h"
#include "ranked_gtest.h"

namespace {
std::shared_ptr<fsdpp::dist::World> g_world;
}

fsdpp::dist::World& fsdpp::test::gpu_world() { return *g_world; }

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (fsdpp::dist::cuda_device_count() == 0) {
    const char* mask = std::getenv("CUDA_VISIBLE_DEVICES");
    std::fprintf(stderr,
                 "[gpu] no CUDA device is visible to this process (CUDA_VISIBLE_DEVICES=%s, fsdpp "
                 "built %s CUDA): the gpu tests need an NVIDIA GPU and its driver. Run them on a "
                 "GPU machine: `make test-gpu`, or scripts/gpu_check.sh with the bundle "
                 "(docs/gpus.md)\n",
                 mask ? mask : "(unset)",
#ifdef FSDPP_WITH_CUDA
                 "with"
#else
                 "without"
#endif
    );
    return 1;
  }
  try {
    g_world = fsdpp::dist::init_from_env();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  if (!g_world->device().is_cuda()) {
    std::fprintf(stderr, "[gpu] rank %d computes on %s; the gpu tests need a CUDA device (unset "
                 "FSDPP_DEVICE, or set it to cuda:N)\n", g_world->rank(), g_world->device().str().c_str());
    return 1;
  }
  const int rc = fsdpp::test::run_tests_on_every_rank(*g_world);
  g_world.reset();
  return rc;
}
