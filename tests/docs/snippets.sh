#!/usr/bin/env bash
# Every C++ snippet of README.md and docs/ compiles and links against an installed fsdpp, as a
# user's project builds (tests/docs/snippets.py says how a page gives a snippet its context).
set -euo pipefail
build=$1 src=$2 cxx=$3 python=$4
# Inside the build tree, at the same place in every clone: under make's CCACHE_BASEDIR (the clone)
# ccache sees the same relative paths each time, so an unchanged page compiles from the cache.
dir=$build/docs-snippets
rm -rf "$dir/snippets" "$dir/prefix"
mkdir -p "$dir"
launcher=()
if command -v ccache > /dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
"$python" "$src/tests/docs/snippets.py" --self-test
"$python" "$src/tests/docs/snippets.py" "$src" "$dir/snippets"
cmake --install "$build" --prefix "$dir/prefix" > /dev/null
cmake -S "$src/tests/docs/snippets" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$dir/prefix" \
  -DSNIPPET_DIR="$dir/snippets" -DFSDPP_SOURCE_DIR="$src" "${launcher[@]}" > /dev/null
if ! cmake --build "$dir/build" -- -k 0 > "$dir/log" 2>&1; then
  # The compiler's errors, which name the page and line (#line), without the build's noise.
  grep -E "error|note: |^\s+[0-9]+ \||\^" "$dir/log" | head -150
  echo "[docs] C++ snippets of the docs do not compile: the errors above name the page and line" >&2
  exit 1
fi
echo "[docs] every C++ snippet compiled and linked"
