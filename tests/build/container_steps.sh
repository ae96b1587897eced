#!/usr/bin/env bash
# No container engine runs here, so the image's build is checked through its one script:
#  1. the Dockerfile's RUN steps build fsdpp only through `make install` (no cmake, ninja, pip
#     or setup of their own: everything else they do is apt-get), and `make install` runs
#     scripts/install.sh, which runs scripts/setup.sh (the packages and the pinned torch that
#     `make` uses) and installs with cmake;
#  2. scripts/install.sh, run here into a fresh prefix with this build, installs tools that work
#     from there: the installed fsdpp-run starts 2 ranks of the installed fsdpp-train.
set -euo pipefail
src=$1 build=$2 venv=$3
fail() { echo "[container] FAIL: $*" >&2; exit 1; }
cd "$src"

# The RUN instructions, continuation lines joined.
runs=$(awk '/^RUN /{cmd=$0; while (cmd ~ /\\$/) { getline line; sub(/\\$/, "", cmd); cmd = cmd line } print cmd}' Dockerfile)
[ -n "$runs" ] || fail "the Dockerfile has no RUN step"
builds=$(grep -c 'make install PREFIX=' <<< "$runs" || true)
[ "$builds" = 1 ] || fail "the Dockerfile must build fsdpp with one 'make install PREFIX=...' step, found $builds"
if grep -Eq '(^|[ ;&|])(cmake|ninja|pip|pip3|python3 -m pip|bash scripts/setup.sh)( |$)' <<< "$runs"; then
  fail "a RUN step builds on its own instead of through make install: $(grep -E 'cmake|ninja|pip|setup.sh' <<< "$runs")"
fi
grep -q "^COPY \. " Dockerfile || fail "the Dockerfile does not copy the source tree"
grep -q '^FROM debian:bookworm' Dockerfile || fail "the Dockerfile is not based on debian:bookworm"
make_steps=$(make -n install PREFIX=/opt/fsdpp VENV="$venv" BUILD_DIR="$build")
grep -q 'bash scripts/install.sh /opt/fsdpp' <<< "$make_steps" || fail "make install does not run scripts/install.sh: $make_steps"
grep -q 'bash scripts/setup.sh' scripts/install.sh || fail "scripts/install.sh does not run scripts/setup.sh"
grep -q 'bash scripts/setup.sh' Makefile || fail "make setup does not run scripts/setup.sh"
torch=$(sed -n 's/^TORCH_VERSION ?= //p' Makefile)
echo "[container] the Dockerfile builds only through make install -> scripts/install.sh (torch $torch, pinned in the Makefile)"

# 2. The script itself, into a fresh prefix.
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
TORCH_VERSION=$torch VENV=$venv BUILD_DIR=$build JOBS=2 bash scripts/install.sh "$dir/prefix" > "$dir/install.log" 2>&1 ||
  { tail -n 30 "$dir/install.log"; fail "scripts/install.sh failed"; }
for f in bin/fsdpp-run bin/fsdpp-train bin/fsdpp-plan lib/fsdpp/libfsdpp_run_store.so; do
  [ -e "$dir/prefix/$f" ] || fail "$f is not installed"
done
"$dir/prefix/bin/fsdpp-run" --nproc-per-node 2 "$dir/prefix/bin/fsdpp-train" configs/default.yaml \
  data.path=docs data.seq_len=32 model.dim=32 model.n_layers=1 model.n_heads=2 model.n_kv_heads=1 \
  model.max_seq_len=32 training.max_steps=2 training.eval_steps=0 training.sample_tokens=0 training.save_steps=0 \
  training.per_device_train_batch_size=2 data.cache_dir="$dir/cache" training.output_dir="$dir/out" \
  > "$dir/run.log" 2>&1 || { tail -n 20 "$dir/run.log"; fail "the installed fsdpp-run/fsdpp-train did not train"; }
[ "$(wc -l < "$dir/out/metrics.jsonl")" -ge 2 ] || fail "the installed fsdpp-train logged no steps"
echo "[container] passed: scripts/install.sh installed working tools into a fresh prefix"
