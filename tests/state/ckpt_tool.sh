#!/usr/bin/env bash
# fsdpp-ckpt on checkpoints that fsdpp-train saved on 2 ranks: inspect describes a SHARDED one,
# consolidate turns it into one safetensors file equal, tensor for tensor, to the FULL save of
# the same run, and a flipped byte in a model tensor makes consolidate fail naming the file and
# the tensor, writing nothing.
set -euo pipefail
run=$1 train=$2 ckpt=$3 python=$4 src=$5
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(data.path="$src/docs" data.seq_len=32 data.cache_dir="$dir/cache" model.dim=32 model.n_layers=2
        model.n_heads=4 model.n_kv_heads=2 model.max_seq_len=32 training.max_steps=2
        training.save_steps=2 training.logging_steps=1 training.sample_tokens=0
        training.per_device_train_batch_size=4)
for kind in SHARDED FULL; do
  "$run" --nproc-per-node 2 --timeout-s 120 "$train" "$src/configs/default.yaml" "${common[@]}" \
    training.fsdp_config.fsdp_state_dict_type=${kind}_STATE_DICT training.output_dir="$dir/$kind" > /dev/null
done
"$ckpt" inspect "$dir/SHARDED/checkpoint-2" | tee "$dir/inspect.txt"
grep -q "format fsdpp.sharded, saved on 2 rank(s)" "$dir/inspect.txt"
grep -q "layers.0.attention.wq.weight 32x32 F32" "$dir/inspect.txt"
"$ckpt" consolidate "$dir/SHARDED/checkpoint-2" "$dir/consolidated.safetensors"
"$python" - "$dir" <<'PY'
import sys, torch
from safetensors.torch import load_file
d = sys.argv[1]
a = load_file(f"{d}/consolidated.safetensors")
b = load_file(f"{d}/FULL/checkpoint-2/model.safetensors")
assert a.keys() == b.keys(), sorted(set(a) ^ set(b))
assert "tok_embeddings.weight" in a and a["tok_embeddings.weight"].shape == (256, 32)
for k in a:
    assert torch.equal(a[k], b[k]), k
print(f"consolidated {len(a)} tensors equal to the FULL save")
# Flip one byte inside a model tensor of rank 1's shard file (the file also holds optimizer
# state, which consolidating the model does not read).
import json, struct
p = f"{d}/SHARDED/checkpoint-2/shard-1.safetensors"
data = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
begin, end = header["tok_embeddings.weight"]["data_offsets"]
data[8 + n + (begin + end) // 2] ^= 0x01
open(p, "wb").write(bytes(data))
PY
if "$ckpt" consolidate "$dir/SHARDED/checkpoint-2" "$dir/bad.safetensors" 2> "$dir/err.txt"; then
  echo "consolidate accepted a corrupted checkpoint"; exit 1
fi
cat "$dir/err.txt"
grep -q "checksum mismatch in 'shard-1.safetensors' for tensor 'tok_embeddings.weight'" "$dir/err.txt"
[ ! -e "$dir/bad.safetensors" ]
