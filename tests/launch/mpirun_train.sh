#!/usr/bin/env bash
# A real mpirun (Debian's Open MPI) starts 2 ranks of fsdpp-train with no other launcher: each rank
# reads its place from OMPI_COMM_WORLD_* (fsdpp/common/launch_env.h), the store's port from the
# job id, and the job must give the losses of the same job started by fsdpp-run, bit for bit.
# Then the mistakes an MPI user makes: two nodes without MASTER_ADDR, and RANK exported by hand.
# A missing mpirun FAILS the test (scripts/setup.sh installs openmpi-bin); it never skips.
set -euo pipefail
run=$1 train=$2 src=$3
fail() { echo "[mpirun] FAIL: $*" >&2; exit 1; }
command -v mpirun > /dev/null || fail "mpirun is not installed (Debian's openmpi-bin; make setup installs it)"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

steps=4
common=(data.path="$src/docs" data.seq_len=32 data.val_fraction=0.1 model.dim=64 model.n_layers=2
        model.n_heads=4 model.n_kv_heads=2 model.max_seq_len=32 training.max_steps=$steps
        training.logging_steps=1 training.eval_steps=0 training.sample_tokens=0 training.warmup_steps=2
        training.learning_rate=0.003 training.seed=7 training.save_steps=0
        training.per_device_train_batch_size=2 data.cache_dir="$dir/cache")

"$run" --nproc-per-node 2 --timeout-s 120 "$train" "$src/configs/default.yaml" "${common[@]}" \
  training.output_dir="$dir/fsdpp-run" > "$dir/fsdpp-run.log" 2>&1 || { tail -n 30 "$dir/fsdpp-run.log"; fail "the fsdpp-run job failed"; }

# mpirun as root needs --allow-run-as-root; --oversubscribe: 2 ranks even where Open MPI counts
# fewer slots; --bind-to none: the ranks' one thread each may run on any core.
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2)
timeout 300 "${mpi[@]}" "$train" "$src/configs/default.yaml" "${common[@]}" \
  training.output_dir="$dir/mpirun" > "$dir/mpirun.log" 2>&1 || { tail -n 30 "$dir/mpirun.log"; fail "the mpirun job failed"; }
line=$(grep -m1 '^\[dist\] Open MPI' "$dir/mpirun.log") || { head -n 20 "$dir/mpirun.log"; fail "rank 0 did not say it was started by Open MPI"; }
echo "[mpirun] rank 0 said: $line"
[[ $line == *"rank 0 of 2, local rank 0 of 2, store at 127.0.0.1:"*"(every rank on this node; port from OMPI_MCA_ess_base_jobid="* ]] ||
  fail "unexpected placement line: $line"

losses() { grep -o '"loss":[^,]*' "$1/metrics.jsonl" | cut -d: -f2 | tr '\n' ' '; }
a=$(losses "$dir/fsdpp-run") b=$(losses "$dir/mpirun")
echo "[mpirun] fsdpp-run: $a"
echo "[mpirun] mpirun   : $b"
[ "$(echo "$a" | wc -w)" = $steps ] || fail "fsdpp-run logged $(echo "$a" | wc -w) losses, expected $steps"
[ "$a" = "$b" ] || fail "mpirun's losses differ from fsdpp-run's"

# Two nodes' worth of ranks (faked: OMPI_COMM_WORLD_LOCAL_SIZE smaller than the world) need
# MASTER_ADDR: Open MPI does not say where rank 0 runs.
rc=0
timeout 120 "${mpi[@]}" env OMPI_COMM_WORLD_LOCAL_SIZE=1 OMPI_COMM_WORLD_LOCAL_RANK=0 "$train" \
  "$src/configs/default.yaml" "${common[@]}" training.output_dir="$dir/bad1" > "$dir/bad1.log" 2>&1 || rc=$?
[ $rc != 0 ] || fail "two nodes without MASTER_ADDR started"
grep -q "MASTER_ADDR is not set, and Open MPI does not say which host runs rank 0 of this job on 2 nodes" "$dir/bad1.log" ||
  { tail -n 20 "$dir/bad1.log"; fail "no message naming MASTER_ADDR"; }
# RANK exported to every rank contradicts Open MPI's rank on rank 1.
rc=0
timeout 120 "${mpi[@]}" -x RANK=0 "$train" "$src/configs/default.yaml" "${common[@]}" \
  training.output_dir="$dir/bad2" > "$dir/bad2.log" 2>&1 || rc=$?
[ $rc != 0 ] || fail "RANK=0 on every rank started"
grep -q "RANK=0 contradicts OMPI_COMM_WORLD_RANK=1 (Open MPI)" "$dir/bad2.log" || { tail -n 20 "$dir/bad2.log"; fail "no message naming RANK and OMPI_COMM_WORLD_RANK"; }
echo "[mpirun] passed: same losses as fsdpp-run; MASTER_ADDR and RANK mistakes named"
