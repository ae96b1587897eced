#!/usr/bin/env bash
# Builds fsdpp and installs it under PREFIX: what `make install` and the container image
# (Dockerfile) both run, so that the image is built the way the tests build (tests/build/
# container_steps.sh checks that the Dockerfile runs this and nothing else of its own).
#   scripts/install.sh PREFIX        with TORCH_VERSION, VENV, BUILD_DIR, JOBS from make
# Steps: Debian packages and the pinned torch wheel in VENV (scripts/setup.sh), a Release build
# with the CUDA parts when the wheel has CUDA libraries and a toolkit is installed (the
# build's own default, cmake/FsdppTorch.cmake), `cmake --install` into PREFIX, and a check that
# the installed tools start.
set -euo pipefail
prefix=${1:?usage: scripts/install.sh PREFIX}
: "${TORCH_VERSION:?}" "${VENV:?}"
build=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}
cd "$(dirname "$0")/.."

TORCH_VERSION=$TORCH_VERSION VENV=$VENV bash scripts/setup.sh
# A build directory that exists (make's) keeps its configuration: reconfiguring it with another
# spelling of the compiler would make CMake start it afresh.
if [ ! -f "$build/CMakeCache.txt" ]; then
  cxx=$(command -v clang++ || command -v g++)
  launcher=()
  command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFSDPP_PYTHON="$VENV/bin/python" \
    -DCMAKE_CXX_COMPILER="$cxx" "${launcher[@]}" ${CMAKE_ARGS:-}
fi
cmake --build "$build" -j "$jobs"
cmake --install "$build" --prefix "$prefix"
for tool in fsdpp-run fsdpp-train fsdpp-estimate fsdpp-plan fsdpp-data; do
  "$prefix/bin/$tool" --help > /dev/null || { echo "[install] $prefix/bin/$tool does not start" >&2; exit 1; }
done
echo "[install] fsdpp installed in $prefix (torch $TORCH_VERSION from $VENV)"
