#!/usr/bin/env bash
# A real SLURM on this machine (Debian's slurm-wlm and munge): the test starts munged, slurmctld
# and slurmd with a configuration of its own (one node, this host, its CPUs; files, sockets and
# ports of its own, so nothing of the system's is touched), then submits the sbatch scripts of
# docs/slurm.md as a user would:
#   1. srun starts one fsdpp-train task per rank (no launcher): each reads SLURM_PROCID,
#      SLURM_NTASKS, SLURM_LOCALID, the first host of the node list and a port from the job id;
#   2. srun starts one fsdpp-run per node (--ntasks-per-node=1), which takes --nnodes and
#      --node-rank from SLURM and starts 2 workers itself.
# Both must give the losses of the same job started by fsdpp-run alone, bit for bit. Then a
# script that exports RANK=0 to every task must fail, naming RANK and SLURM_PROCID.
# Missing packages or daemons that do not come up FAIL the test; it never skips.
set -euo pipefail
run=$(realpath "$1") train=$(realpath "$2") src=$(realpath "$3")  # the jobs run in their own directory
fail() { echo "[slurm] FAIL: $*" >&2; exit 1; }
for c in munged slurmctld slurmd sbatch srun scontrol; do
  command -v $c > /dev/null || fail "$c is missing (Debian's slurmctld, slurmd, slurm-client and munge; make setup installs them)"
done
[ "$(id -u)" = 0 ] || fail "slurmd must run as root to start jobs; this runs as uid $(id -u)"

dir=$(mktemp -d /tmp/fsdpp-slurm-XXXXXX)
chmod 755 "$dir"
cleanup() {
  for f in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munge/pid"; do
    [ -f "$f" ] && kill "$(cat "$f")" 2> /dev/null || true
  done
  sleep 0.5
  for f in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munge/pid"; do
    [ -f "$f" ] && kill -9 "$(cat "$f")" 2> /dev/null || true
  done
  rm -rf "$dir"
}
trap cleanup EXIT
show_logs() {
  squeue -o '%i %j %T %r' 2> /dev/null || true  # a job still pending says why
  tail -n 20 "$dir"/log/*.log "$dir"/*.out 2> /dev/null || true
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log"
chmod 700 "$dir/munge"
head -c 1024 /dev/urandom > "$dir/munge/munge.key"
chmod 600 "$dir/munge/munge.key"
munged -f --socket="$dir/munge/sock" --key-file="$dir/munge/munge.key" --log-file="$dir/log/munged.log" \
  --pid-file="$dir/munge/pid" --seed-file="$dir/munge/seed" || fail "munged did not start: $(tail -n 5 "$dir/log/munged.log")"

host=$(hostname -s)
cpus=$(nproc)
cat > "$dir/slurm.conf" <<CONF
ClusterName=fsdpptest
FirstJobId=$((1000 + RANDOM % 8000))
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$dir/slurm.conf
slurmctld -f "$SLURM_CONF" -i || { show_logs; fail "slurmctld did not start"; }
slurmd -f "$SLURM_CONF" || { show_logs; fail "slurmd did not start"; }
for _ in $(seq 150); do
  state=$(sinfo -h -N -o %t 2> /dev/null || true)
  [ "$state" = idle ] && break
  sleep 0.2
done
[ "$state" = idle ] || { show_logs; fail "the node did not become idle within 30 s (state '$state')"; }
echo "[slurm] slurmctld and slurmd up: node $host, $cpus CPUs"

steps=4
common="data.path=$src/docs data.seq_len=32 data.val_fraction=0.1 model.dim=64 model.n_layers=2 \
model.n_heads=4 model.n_kv_heads=2 model.max_seq_len=32 training.max_steps=$steps training.logging_steps=1 \
training.eval_steps=0 training.sample_tokens=0 training.warmup_steps=2 training.learning_rate=0.003 \
training.seed=7 training.save_steps=0 training.per_device_train_batch_size=2 data.cache_dir=$dir/cache"

"$run" --nproc-per-node 2 --timeout-s 120 "$train" "$src/configs/default.yaml" $common \
  training.output_dir="$dir/fsdpp-run" > "$dir/fsdpp-run.out" 2>&1 || { tail -n 30 "$dir/fsdpp-run.out"; fail "the fsdpp-run job failed"; }

# The sbatch scripts of docs/slurm.md (examples/slurm/), as written, on this one-node cluster;
# a script that exports RANK=0 to every task.
cat > "$dir/exported-rank.sbatch" <<JOB
#!/bin/bash
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=2
#SBATCH --time=10
export RANK=0
srun --kill-on-bad-exit=1 $train $src/configs/default.yaml $common training.output_dir=$dir/bad
JOB
bin=$(dirname "$run")
[ -x "$bin/fsdpp-train" ] || fail "fsdpp-train is not beside fsdpp-run in $bin"

submit() {  # NAME SCRIPT [sbatch flags] -- [script args]: runs it to its end, output in $dir/NAME.out; prints the exit code
  local name=$1 script=$2 rc=0
  shift 2
  local flags=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do flags+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  FSDPP=$bin NPROC_PER_NODE=2 timeout 300 sbatch --wait --time=10 --chdir "$dir" --output "$dir/$name.out" "${flags[@]}" \
    "$script" "$@" > "$dir/$name.sbatch.log" 2>&1 || rc=$?
  echo $rc
}
losses() { grep -o '"loss":[^,]*' "$1/metrics.jsonl" | cut -d: -f2 | tr '\n' ' '; }
reference=$(losses "$dir/fsdpp-run")
echo "[slurm] fsdpp-run alone      : $reference"

for job in per-rank per-node; do
  # One node here: the script's --nodes=2 becomes 1 (and per-rank's 8 tasks per node 2).
  flags=(--nodes=1)
  [ $job = per-rank ] && flags+=(--ntasks-per-node=2)
  rc=$(submit $job "$src/examples/slurm/$job.sbatch" "${flags[@]}" -- "$src/configs/default.yaml" $common \
       training.output_dir="$dir/$job")
  [ "$rc" = 0 ] || { cat "$dir/$job.sbatch.log"; show_logs; fail "sbatch examples/slurm/$job.sbatch exited $rc"; }
  got=$(losses "$dir/$job")
  echo "[slurm] sbatch $job.sbatch: $got"
  [ "$got" = "$reference" ] || { tail -n 30 "$dir/$job.out"; fail "$job: losses differ from fsdpp-run's"; }
done
grep '\] SLURM srun' "$dir/per-rank.out" | sed 's/^/[slurm]   per-rank: /'
grep -q '^\[dist\] SLURM srun (job [0-9]*, step 0): rank 0 of 2, local rank 0 of 2, store at '"$host"':' "$dir/per-rank.out" ||
  fail "the per-rank job's rank 0 did not say it was placed by srun: $(grep dist "$dir/per-rank.out" | head -3)"
grep '^\[fsdpp-run\] SLURM srun' "$dir/per-node.out" | sed 's/^/[slurm]   per-node: /'
grep -q '^\[fsdpp-run\] SLURM srun (job [0-9]*, step 0): node 0 of 1 (SLURM_NODEID, SLURM_STEP_NUM_NODES)' "$dir/per-node.out" ||
  fail "the per-node job's fsdpp-run did not say it was started by srun"

rc=$(submit exported-rank "$dir/exported-rank.sbatch")
[ "$rc" != 0 ] || fail "a job exporting RANK=0 to every task succeeded"
grep -q "RANK=0 contradicts SLURM_PROCID=1 (SLURM srun)" "$dir/exported-rank.out" ||
  { tail -n 20 "$dir/exported-rank.out"; fail "no message naming RANK and SLURM_PROCID"; }
echo "[slurm] passed: both sbatch scripts give fsdpp-run's losses; an exported RANK is named"
