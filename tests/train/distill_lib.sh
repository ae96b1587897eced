# Sourced by the distillation tests (distill.sh, distill_modes.sh) after `set -euo pipefail` and
# run=... train=...: a temporary $dir (removed on exit) holding a fixed text, the keys every run
# shares in the array common (a Qwen3-MoE of 2 layers and 4 experts on windows of 32 bytes),
# config, and layouts_lib.sh's go and bad.
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp "$src/tests/data/moe-text.txt" "$dir/text.txt"  # a fixed text (tests/data/README.md)
common=(data.path="$dir/text.txt" data.seq_len=32 data.val_fraction=0.1 model.dim=64
        model.n_layers=2 model.n_heads=4 model.n_kv_heads=2 model.head_dim=16 model.max_seq_len=32
        model.num_experts=4 model.num_experts_per_tok=2 model.moe_intermediate_size=48
        training.logging_steps=1 training.eval_steps=0 training.save_steps=0
        training.sample_tokens=0 training.warmup_steps=2 training.learning_rate=0.003
        training.lr_scheduler_type=constant training.seed=7 training.malloc_mmap_threshold=0
        training.output_dir="$dir/unused" data.cache_dir="$dir/cache")
config="$src/configs/qwen3-moe-small.yaml"
source "$src/tests/train/layouts_lib.sh"
