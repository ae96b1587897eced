#!/usr/bin/env bash
# fsdpp-ckpt reshard: a SHARDED checkpoint saved on FROM ranks, rewritten offline for TO ranks,
# loads on TO ranks to exactly what reshard-on-load of the original gives (parameters and AdamW
# state, bit for bit), each rank's rows sit in its own shard file, inspect verifies the new
# checksums, and bad inputs are refused by name.
# usage: run_reshard_offline.sh FSDPP_RUN RESHARD_TOOL FSDPP_CKPT PYTHON FROM TO
set -euo pipefail
run=$1 tool=$2 ckpt=$3 python=$4 from=$5 to=$6
dir=$(mktemp -d "${TMPDIR:-/tmp}/fsdpp_reshard_offline.XXXXXX")
trap 'rm -rf "$dir"' EXIT
"$run" --nproc-per-node "$from" --timeout-s 120 "$tool" save "$dir"
"$ckpt" reshard --world-size "$to" "$dir/ckpt" "$dir/ckpt$to"
"$ckpt" inspect "$dir/ckpt$to" > "$dir/inspect.txt"
grep -q "format fsdpp.sharded, saved on $to rank(s)" "$dir/inspect.txt"
grep "checksums:" "$dir/inspect.txt"
# The original reshards on load; the offline copy is read in its own layout.
"$run" --nproc-per-node "$to" --timeout-s 120 "$tool" compare "$dir" ckpt "ckpt$to"
"$run" --nproc-per-node "$to" --timeout-s 120 "$tool" check "$dir" "ckpt$to"
# A FULL checkpoint reshards too, to the same tensors.
"$ckpt" reshard --world-size "$to" "$dir/full" "$dir/full$to" > /dev/null
"$python" - "$dir" "$to" <<'PY'
import json, sys
from safetensors.torch import load_file
d, n = sys.argv[1], int(sys.argv[2])
idx = json.load(open(f"{d}/ckpt{n}/index.json"))
assert idx["format"] == "fsdpp.sharded" and idx["world_size"] == n, idx["world_size"]
def check(entries):
    for name, e in entries:
        c = -(-e["dim0"] // n)
        assert e["chunk_rows"] == c, (name, e["chunk_rows"], c)
        for p in e["pieces"]:
            k = int(p["file"].split("-")[1].split(".")[0])
            assert p["row_begin"] == k * c and p["row_end"] == min(e["dim0"], (k + 1) * c), (name, p)
check(idx["params"].items())
check((f"{f}.{k}", e) for f, o in idx["optim"]["params"].items() for k, e in o["states"].items())
a = [load_file(f"{d}/ckpt{n}/shard-{k}.safetensors") for k in range(n)]
b = [load_file(f"{d}/full{n}/shard-{k}.safetensors") for k in range(n)]
for x, y in zip(a, b):
    assert x.keys() == y.keys()
    assert all((x[t] == y[t]).all() for t in x)
print(f"offline reshard to {n}: every piece in its rank's file; SHARDED and FULL inputs give the same shards")
PY
# Bad inputs, each refused with a message naming the problem.
expect_fail() {  # PATTERN COMMAND...
  local pattern=$1; shift
  if "$@" > "$dir/out.txt" 2>&1; then echo "accepted: $*"; cat "$dir/out.txt"; exit 1; fi
  grep -q -- "$pattern" "$dir/out.txt" || { echo "unexpected error for $*:"; cat "$dir/out.txt"; exit 1; }
  echo "refused as expected: $(head -1 "$dir/out.txt")"
}
expect_fail "expected 1 <= N <= 65536" "$ckpt" reshard --world-size 0 "$dir/ckpt" "$dir/x0"
expect_fail "expected 1 <= N <= 65536" "$ckpt" reshard --world-size -2 "$dir/ckpt" "$dir/x1"
expect_fail "is not a whole number" "$ckpt" reshard --world-size two "$dir/ckpt" "$dir/x2"
expect_fail "is a LOCAL checkpoint" "$ckpt" reshard --world-size 2 "$dir/local" "$dir/x3"
mkdir "$dir/empty"
expect_fail "has no index.json" "$ckpt" reshard --world-size 2 "$dir/empty" "$dir/x4"
expect_fail "exists; give a new path, or --force" "$ckpt" reshard --world-size 2 "$dir/ckpt" "$dir/full"
[ ! -e "$dir/x0" ] && [ ! -e "$dir/x3" ] && [ ! -e "$dir/x4" ]
if compgen -G "$dir/*.tmp-*" > /dev/null; then echo "temporary directories left"; exit 1; fi
echo "reshard $from -> $to offline: ok"
