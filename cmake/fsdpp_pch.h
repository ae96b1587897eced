// Precompiled once per build: the LibTorch and c10d headers that nearly every fsdpp file uses.
#pragma once
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
