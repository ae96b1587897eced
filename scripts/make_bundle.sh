#!/usr/bin/env bash
# make bundle: fsdpp's tools, its GPU tests and benchmark, and the shared libraries they link
# apart from LibTorch's, in one relocatable archive for hosts that have PyTorch but no compiler,
# no Debian packages and no network (a GPU node). docs/gpus.md#the-bundle.
#   scripts/make_bundle.sh BUILD_DIR [OUT.tar.gz]      (default OUT: BUILD_DIR/fsdpp-bundle.tar.gz)
# The archive unpacks to fsdpp/: bin/ (every executable's RUNPATH is $ORIGIN/../lib), lib/ (the
# non-LibTorch libraries, found with ldd), lib/fsdpp/ (fsdpp-run's store module), share/fsdpp/
# (the default job's text), env.sh (finds LibTorch through LIBTORCH_DIR or python3's torch and
# runs a command with it), TORCH_VERSION (the torch it was built against), and wheels/: every
# *.whl in the directory FSDPP_BUNDLE_WHEELS names (default: none), e.g. torchao's for the GPU
# benchmark's float8 rows, which scripts/gpu_check.sh installs on a node without network.
set -euo pipefail
build=$(cd "${1:?usage: make_bundle.sh BUILD_DIR [OUT.tar.gz]}" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
out=${2:-$build/fsdpp-bundle.tar.gz}
stage=$build/bundle-stage
rm -rf "$stage"
mkdir -p "$stage/fsdpp/bin" "$stage/fsdpp/lib/fsdpp" "$stage/fsdpp/share/fsdpp"
root=$stage/fsdpp

tools=(fsdpp-run fsdpp-train fsdpp-ckpt fsdpp-estimate fsdpp-generate fsdpp-data fsdpp-tokenize fsdpp-bench
       fsdpp_gpu_tests fsdpp-example-mlp fsdpp-example-sequential)
for t in "${tools[@]}"; do
  [[ -x "$build/bin/$t" ]] || { echo "[bundle] $build/bin/$t is missing: run \`make build\` first" >&2; exit 1; }
  cp "$build/bin/$t" "$root/bin/"
done
cp "$build/lib/fsdpp/libfsdpp_run_store.so" "$root/lib/fsdpp/"

# Where LibTorch is: the directory of the libtorch.so the tools resolve to. Its libraries (and
# the nvidia-* wheels' beside it) come from the host's torch; glibc's from the host's C library.
torch_lib=$(ldd "$root/bin/fsdpp-train" | awk '$1 == "libtorch.so" { print $3 }' | xargs dirname)
[[ -d "$torch_lib" ]] || { echo "[bundle] cannot find LibTorch in ldd's output of fsdpp-train" >&2; exit 1; }
torch_site=$(dirname "$(dirname "$torch_lib")")  # site-packages (torch/ and nvidia/ in it)
# What the host's torch brings: torch's own libraries and the nvidia-* wheels'. Everything else,
# pyarrow's libarrow and libparquet (the data readers, cmake/FsdppArrow.cmake) among them, travels
# in the bundle: a GPU node with PyTorch has no pyarrow of the same release.
from_torch() { [[ "$1" == "$torch_site"/torch/* || "$1" == "$torch_site"/nvidia/* ]]; }
# zlib (the data readers' .gz) is left to the host like the C library: a host with PyTorch has
# Python, whose zlib module needs it, and its ABI has not changed since 1.0.
glibc='^(linux-vdso\.so|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|libutil\.so|ld-linux|libz\.so)'
for f in "$root"/bin/* "$root"/lib/fsdpp/*.so; do
  ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
done | sort -u | while read -r name path; do
  [[ "$name" =~ $glibc ]] && continue
  from_torch "$path" && continue
  cp -L "$path" "$root/lib/$name"
done
# RUNPATH $ORIGIN-relative: the bundle's lib/ first; LibTorch comes from env.sh's LD_LIBRARY_PATH.
# fsdpp-run links no LibTorch and has no RUNPATH to rewrite: env.sh's LD_LIBRARY_PATH finds its
# libraries in lib/.
with_runpath() { for f in "$@"; do readelf -d "$f" | grep -q '(RUNPATH)' && echo "$f"; done; }
mapfile -t programs < <(with_runpath "$root"/bin/*)
cmake -DRUNPATH='$ORIGIN/../lib' -P "$src/scripts/set_runpath.cmake" -- "${programs[@]}"
cmake -DRUNPATH='$ORIGIN/..' -P "$src/scripts/set_runpath.cmake" -- "$root"/lib/fsdpp/*.so

# The default job's text (Debian's fortunes), which a GPU node has no package for.
data=${FSDPP_BUNDLE_DATA:-/usr/share/games/fortunes}
if [[ -d "$data" ]]; then
  mkdir -p "$root/share/fsdpp/fortunes"
  find "$data" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' -exec cp {} "$root/share/fsdpp/fortunes/" \;
fi
# Python wheels for the GPU node (pip download torchao==0.17.0 --no-deps -d DIR), carried as they are.
if [[ -n "${FSDPP_BUNDLE_WHEELS:-}" ]]; then
  [[ -d "$FSDPP_BUNDLE_WHEELS" ]] || { echo "[bundle] FSDPP_BUNDLE_WHEELS=$FSDPP_BUNDLE_WHEELS is not a directory" >&2; exit 1; }
  mapfile -t wheels < <(find "$FSDPP_BUNDLE_WHEELS" -maxdepth 1 -type f -name '*.whl' | sort)
  if (( ${#wheels[@]} == 0 )); then
    echo "[bundle] warning: no *.whl in FSDPP_BUNDLE_WHEELS=$FSDPP_BUNDLE_WHEELS; the bundle carries no wheels" >&2
  else
    mkdir -p "$root/wheels"
    cp "${wheels[@]}" "$root/wheels/"
    echo "[bundle] wheels: ${wheels[*]##*/}"
  fi
fi
cp "$src/scripts/bundle_env.sh" "$root/env.sh"
chmod +x "$root/env.sh"
sed -n "s/^__version__ = '\(.*\)'.*/\1/p" "$torch_site/torch/version.py" > "$root/TORCH_VERSION"
[[ -s "$root/TORCH_VERSION" ]] || { echo "[bundle] no __version__ in $torch_site/torch/version.py" >&2; exit 1; }
git -C "$src" rev-parse HEAD > "$root/COMMIT" 2>/dev/null || echo unknown > "$root/COMMIT"

mkdir -p "$(dirname "$out")"
tar -C "$stage" -czf "$out" fsdpp
rm -rf "$stage"
size=$(stat -c %s "$out")
echo "[bundle] $out: $((size / 1048576)) MiB ($(tar -tzf "$out" | grep -c '^fsdpp/bin/.') programs, $(tar -tzf "$out" | grep -c '^fsdpp/lib/[^/]*$') libraries, $(tar -tzf "$out" | grep -c '^fsdpp/wheels/.') wheels; torch $(tar -xzOf "$out" fsdpp/TORCH_VERSION))"
