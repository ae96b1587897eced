#!/usr/bin/env bash
# Installs fsdpp into a temporary prefix, builds a separate project with find_package(fsdpp),
# and runs the result on 2 ranks.
set -euo pipefail
build=$1 src=$2 run=$3 cxx=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cmake --install "$build" --prefix "$dir/prefix" > /dev/null
cmake -S "$src/tests/package" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$dir/prefix" \
  -DQUICKSTART_SOURCE="$src/examples/quickstart/main.cpp" > /dev/null
cmake --build "$dir/build"
"$run" --nproc-per-node 2 "$dir/build/quickstart" 5
