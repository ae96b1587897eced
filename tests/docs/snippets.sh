#!/usr/bin/env bash
# Every C++ snippet of README.md and docs/ compiles and links against an installed fsdpp, as a
# user's project builds (tests/docs/snippets.py says how a page gives a snippet its context).
set -euo pipefail
build=$1 src=$2 cxx=$3 python=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$python" "$src/tests/docs/snippets.py" --self-test
"$python" "$src/tests/docs/snippets.py" "$src" "$dir/snippets"
cmake --install "$build" --prefix "$dir/prefix" > /dev/null
cmake -S "$src/tests/docs/snippets" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$dir/prefix" \
  -DSNIPPET_DIR="$dir/snippets" > /dev/null
if ! cmake --build "$dir/build" -- -k 0 > "$dir/log" 2>&1; then
  # The compiler's errors, which name the page and line (#line), without the build's noise.
  grep -E "error|note: |^\s+[0-9]+ \||\^" "$dir/log" | head -150
  echo "[docs] C++ snippets of the docs do not compile: the errors above name the page and line" >&2
  exit 1
fi
echo "[docs] every C++ snippet compiled and linked"
