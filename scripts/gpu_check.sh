#!/usr/bin/env bash
# The GPU check, in one go (docs/gpus.md#the-gpu-check): on a machine with an NVIDIA GPU and
# PyTorch but nothing built, from the repository's root, with `make bundle`'s archive:
#   bash scripts/gpu_check.sh [BUNDLE.tar.gz] [OUT_DIR]
# (defaults: build/fsdpp-bundle.tar.gz, $OUT or ./gpu-check-out). It unpacks the bundle, finds
# LibTorch through python3, runs every GPU test (tests/gpu/gpu_tests.sh) and the GPU benchmark
# (bench/gpu_bench.py), and writes under OUT_DIR: summary.txt (one line per part, PASS/FAIL with
# its time), gpu-latest.{md,json} (the benchmark's tables), logs.tar.gz (every log and metrics
# file). It builds nothing. It exits non-zero when any part failed; every part runs regardless.
# GPU_CHECK_PARTS limits the parts ("unit_nccl bench", ...; "profile": the benchmark's runs under
# PyTorch's profiler, their kernels compared in OUT/profile/gpu-profile-*.md); GPU_CHECK_QUICK=1 benchmarks a
# small model; GPU_CHECK_BUDGET_S (default 480) bounds the whole check (a part is stopped at it,
# and later parts are skipped), GPU_CHECK_PART_S (default 180) each test part (timeout's exit 124).
# Before the benchmark, the bundle's Python wheels (fsdpp/wheels/*.whl, `FSDPP_BUNDLE_WHEELS=DIR
# make bundle`: torchao for its float8 rows) are installed with pip, no index and no dependencies,
# into a scratch directory put on PYTHONPATH; if that fails the check goes on without them
# (torchao's float8 rows are then reported as skipped).
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
bundle=${1:-$src/build/fsdpp-bundle.tar.gz}
out=${2:-${OUT:-$PWD/gpu-check-out}}
budget=${GPU_CHECK_BUDGET_S:-480}
part_cap=${GPU_CHECK_PART_S:-180}  # a test part that runs longer (a hang) is stopped
mkdir -p "$out"
work=$(mktemp -d /tmp/fsdpp-gpu-check.XXXXXX)
summary=$out/summary.txt
: > "$summary"
start=$SECONDS
say() { echo "$*" | tee -a "$summary"; }

say "[gpu-check] $(date -u +%FT%TZ) bundle $bundle"
if [[ ! -f "$bundle" ]]; then
  say "[gpu-check] FAIL: no bundle at $bundle (run \`make bundle\` where fsdpp builds and carry it)"
  exit 1
fi
tar -C "$work" -xzf "$bundle" || { say "[gpu-check] FAIL: cannot unpack $bundle"; exit 1; }
say "[gpu-check] bundle built from commit $(cat "$work/fsdpp/COMMIT"), torch $(cat "$work/fsdpp/TORCH_VERSION")"
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | sed 's/^/[gpu-check] nvidia-smi: /' | tee -a "$summary"
else
  say "[gpu-check] nvidia-smi: not found (no NVIDIA driver on this machine?)"
fi
# The bundle's environment (LibTorch from python3's torch) for everything below.
if ! source "$work/fsdpp/env.sh"; then
  say "[gpu-check] FAIL: the bundle's env.sh found no usable LibTorch"
  exit 1
fi
bin=$work/fsdpp/bin
export FSDPP_DATA=$work/fsdpp/share/fsdpp/fortunes
export PYTHONUNBUFFERED=1

# The bundle's wheels (no network here): into $work/pylib, on PYTHONPATH for the parts after.
install_wheels() {
  local wheels=("$work"/fsdpp/wheels/*.whl) w
  [[ -e "${wheels[0]}" ]] || { say "[gpu-check] wheels: none in the bundle"; return 0; }
  if python3 -m pip install --no-deps --no-index --no-compile --disable-pip-version-check \
       --target "$work/pylib" "${wheels[@]}" > "$work/wheels.log" 2>&1; then
    export PYTHONPATH=$work/pylib${PYTHONPATH:+:$PYTHONPATH}
    for w in "${wheels[@]}"; do say "[gpu-check] wheels: installed $(basename "$w")"; done
    if compgen -G "$work/pylib/torchao" > /dev/null; then
      say "[gpu-check] wheels: $(python3 -c 'import torch, torchao.float8, torchao; print(f"torchao {torchao.__version__} imports with torch {torch.__version__}")' 2>&1 | tail -n 1)"
    fi
  else
    say "[gpu-check] wheels: pip could not install them (exit $?), going on without them; its last lines:"
    tail -n 5 "$work/wheels.log" | sed 's/^/    /' | tee -a "$summary"
  fi
}

# Every log, metrics.jsonl and result, two folders deep at most as the device tool returns them.
save_logs() {
  (cd "$work" && find . \( -name '*.log' -o -name 'metrics.jsonl' -o -name '*.json' \) ! -name '*.trace.json' -size -4M | \
    grep -v -e '/bench[0-9]*/model/' -e '^\./pylib/' | tar -czf "$out/logs.tar.gz" -T -) 2>/dev/null
}
parts=${GPU_CHECK_PARTS:-"$(bash "$src/tests/gpu/gpu_tests.sh" --list | tr '\n' ' ') bench"}
[[ " $parts " == *" bench "* || " $parts " == *" profile "* ]] && install_wheels  # for the benchmark
failed=0
benches=0  # "bench" named twice repeats it (the spread between runs), the second into OUT/bench2
for part in $parts; do
  left=$((budget - (SECONDS - start)))
  if (( left < 20 )); then
    say "[gpu-check] SKIPPED $part: past the ${budget} s budget"
    failed=1
    continue
  fi
  t0=$SECONDS
  if [[ "$part" == bench || "$part" == profile ]]; then
    quick=()
    [[ "${GPU_CHECK_QUICK:-0}" == 1 ]] && quick=(--quick)
    if [[ "$part" == profile ]]; then
      tag=profile bench_out=$out/profile quick+=(--profile --steps 3)
    else
      benches=$((benches + 1))
      tag=bench bench_out=$out
      ((benches > 1)) && tag=bench$benches bench_out=$out/bench$benches
    fi
    timeout -k 5 "$left" python3 "$src/bench/gpu_bench.py" --bin "$bin" --out "$bench_out" --work "$work/$tag" \
      --default-job "$work/tests/default_job" "${quick[@]}" > "$work/$tag.log" 2>&1
  else
    timeout -k 5 "$((left < part_cap ? left : part_cap))" bash "$src/tests/gpu/gpu_tests.sh" "$part" "$bin" "$src" "$work/tests/$part" > "$work/$part.log" 2>&1
  fi
  rc=$?
  log=$work/$([[ "$part" == bench || "$part" == profile ]] && echo "$tag" || echo "$part").log
  if [[ $rc -eq 0 ]]; then
    say "[gpu-check] PASS $part ($((SECONDS - t0)) s)"
  else
    failed=1
    say "[gpu-check] FAIL $part ($((SECONDS - t0)) s, exit $rc); its last lines:"
    tail -n 25 "$log" | sed 's/^/    /' | tee -a "$summary"
  fi
  grep -h "^\[gpu\]\|^\[bench-gpu\]" "$log" 2>/dev/null | sed 's/^/    /' >> "$summary"
  save_logs  # after every part, so that a run stopped from outside still returns what it did
done
for f in "$out/gpu-latest.md" "$out"/bench*/gpu-latest.md "$out"/profile/gpu-profile-*.md; do [[ -f "$f" ]] && cat "$f"; done
say "[gpu-check] $( ((failed)) && echo FAILED || echo PASSED ) in $((SECONDS - start)) s; results in $out"
rm -rf "$work"
exit $failed
