#!/usr/bin/env bash
# Installs fsdpp into a prefix, builds a separate project with find_package(fsdpp), and runs the
# result on 2 ranks. The prefix and the project's build live under the build directory, fresh
# each time, so that their paths are the same in every clone: with ccache (and make's
# CCACHE_BASEDIR, the clone) an unchanged quickstart and unchanged headers compile from the cache.
set -euo pipefail
build=$1 src=$2 run=$3 cxx=$4
dir=$build/package-consumer
rm -rf "$dir"
mkdir -p "$dir"
launcher=()
if command -v ccache > /dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake --install "$build" --prefix "$dir/prefix" > /dev/null
cmake -S "$src/tests/package" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$dir/prefix" "${launcher[@]}" \
  -DQUICKSTART_SOURCE="$src/examples/quickstart/main.cpp" > /dev/null
cmake --build "$dir/build"
"$run" --nproc-per-node 2 "$dir/build/quickstart" 5
