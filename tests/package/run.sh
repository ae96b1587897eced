#!/usr/bin/env bash
# A separate project that does find_package(fsdpp), built both ways docs/getting-started.md gives
# and run on 2 ranks each time: against an installed fsdpp (cmake --install into a prefix), and
# against the build tree itself (CMAKE_PREFIX_PATH=<build directory>, its exported targets). The
# prefix and the project's builds live under the build directory, fresh each time, so that their
# paths are the same in every clone: with ccache (and make's CCACHE_BASEDIR, the clone) an
# unchanged quickstart and unchanged headers compile from the cache.
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd) run=$3 cxx=$4
dir=$build/package-consumer
rm -rf "$dir"
mkdir -p "$dir"
launcher=()
if command -v ccache > /dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
consumer() {  # consumer <name> <prefix path>: configure, build and run the quickstart
  cmake -S "$src/tests/package" -B "$dir/$1" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$2" "${launcher[@]}" \
    -DQUICKSTART_SOURCE="$src/examples/quickstart/main.cpp" > /dev/null
  # Which package it found: the one asked for, not the other.
  found=$(sed -n 's/^fsdpp_DIR:PATH=//p' "$dir/$1/CMakeCache.txt")
  case "$found" in
    "$2"*) echo "package: $1 found fsdpp at $found" ;;
    *) echo "package: $1 found fsdpp at '$found', expected under $2" >&2; exit 1 ;;
  esac
  cmake --build "$dir/$1"
  "$run" --nproc-per-node 2 "$dir/$1/quickstart" 5
}
cmake --install "$build" --prefix "$dir/prefix" > /dev/null
consumer installed "$dir/prefix"
consumer build-tree "$build"
