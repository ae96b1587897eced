#!/usr/bin/env bash
# fsdpp's bundle (docs/gpus.md#the-bundle): runs a command with the bundle's programs on PATH and
# its libraries and LibTorch on LD_LIBRARY_PATH, or sets them up when sourced.
#   fsdpp/env.sh fsdpp-run --nproc-per-node 8 fsdpp-train config.yaml
#   source fsdpp/env.sh; fsdpp-estimate config.yaml --world-size 8
# LibTorch: LIBTORCH_DIR (a directory with lib/libtorch.so: an unpacked libtorch, or a torch
# package's directory), else the torch package of `python3` (FSDPP_PYTHON names another
# interpreter). Its version must be the one the bundle was built with (TORCH_VERSION).
_fsdpp_bundle_env() {
  local here torch_dir version want
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  want=$(cat "$here/TORCH_VERSION")
  if [[ -n "${LIBTORCH_DIR:-}" ]]; then
    torch_dir=$LIBTORCH_DIR
    version=$(sed -n "s/^__version__ = '\(.*\)'.*/\1/p" "$torch_dir/version.py" 2>/dev/null || true)
    [[ -n "$version" ]] || version=$(cat "$torch_dir/build-version" 2>/dev/null || echo "$want")
  else
    local py=${FSDPP_PYTHON:-python3} found
    if ! found=$("$py" -c 'import os, torch; print(os.path.dirname(torch.__file__)); print(torch.__version__)' 2>&1); then
      echo "[bundle] cannot find LibTorch: '$py -c \"import torch\"' failed (${found##*$'\n'}); set LIBTORCH_DIR to a directory with lib/libtorch.so, or FSDPP_PYTHON to a Python with torch $want" >&2
      return 1
    fi
    torch_dir=$(sed -n 1p <<<"$found")
    version=$(sed -n 2p <<<"$found")
  fi
  if [[ ! -f "$torch_dir/lib/libtorch.so" ]]; then
    echo "[bundle] $torch_dir/lib/libtorch.so does not exist: LIBTORCH_DIR (or python3's torch) must hold LibTorch's lib/" >&2
    return 1
  fi
  # The release must match (LibTorch's C++ ABI changes between releases); a different local tag
  # (+cu130, +cpu) is said, since the CUDA libraries then differ too.
  if [[ "${version%%+*}" != "${want%%+*}" ]]; then
    echo "[bundle] this bundle was built against torch $want, but $torch_dir is torch $version: LibTorch's C++ ABI changes between releases; use torch ${want%%+*} or build fsdpp against $version" >&2
    return 1
  fi
  if [[ "$version" != "$want" ]]; then
    echo "[bundle] note: built against torch $want, running with $version (same release)" >&2
  fi
  export FSDPP_BUNDLE_DIR=$here
  export LD_LIBRARY_PATH="$here/lib:$torch_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PATH="$here/bin${PATH:+:$PATH}"
}
if [[ "${BASH_SOURCE[0]}" != "$0" ]]; then
  _fsdpp_bundle_env  # sourced
else
  set -euo pipefail
  _fsdpp_bundle_env
  if [[ $# -eq 0 ]]; then
    echo "usage: $0 COMMAND [ARGS...]   (or: source $0)" >&2
    exit 2
  fi
  exec "$@"
fi
