#!/usr/bin/env bash
# Non-finite values stop training before the optimizer step, naming the step and where they
# first appeared (2 ranks):
#   FSDPP_FAULT_NAN=3          rank 0's loss at step 3 is NaN          -> 'loss', rank 0
#   FSDPP_FAULT_NAN=3:PARAM    PARAM's gradient at step 3 is NaN      -> that parameter
#   training.learning_rate=1e30 (a finite, absurd value), no clipping  -> step 2 names where
# and no checkpoint is written for the failed step.
# TRAIN is fsdpp-train-faults (tests/support/): fsdpp-train that carries out FSDPP_FAULT_NAN.
set -euo pipefail
run=$1 train=$2 src=$3
FAULT_DIR=$(mktemp -d)
trap 'rm -rf "$FAULT_DIR"' EXIT
source "$(dirname "$0")/lib.sh"
job=("$src/configs/default.yaml" data.path="$src/configs" data.seq_len=32 data.val_fraction=0.1
     model.dim=64 model.n_layers=2 model.n_heads=4 model.n_kv_heads=2 model.max_seq_len=32
     training.logging_steps=1 training.eval_steps=0 training.save_steps=1 training.sample_tokens=0
     training.max_steps=5 training.per_device_train_batch_size=2 data.cache_dir="$FAULT_DIR/cache")
np2=("$run" --nproc-per-node 2 --timeout-s 60 "$train" "${job[@]}")

FSDPP_FAULT_NAN=3 expect_fail nan_loss 1 \
  "\[train\] step 3: the loss is not finite on rank 0: non-finite values first appeared in 'loss'" -- \
  "${np2[@]}" training.output_dir="$FAULT_DIR/loss"
[ -d "$FAULT_DIR/loss/checkpoint-2" ] && [ ! -e "$FAULT_DIR/loss/checkpoint-3" ]

param=layers.1.feed_forward.w2.weight
FSDPP_FAULT_NAN=3:$param expect_fail nan_grad 1 \
  "\[train\] step 3: the gradient of parameter '$param' is nan on rank 0 while the loss is finite" -- \
  "${np2[@]}" training.output_dir="$FAULT_DIR/grad"
[ ! -e "$FAULT_DIR/grad/checkpoint-3" ]

# Clipping off, so that nothing tames the first update.
expect_fail huge_learning_rate 1 "\[train\] step [0-9]+: .*not finite|\[train\] step [0-9]+: the gradient of parameter" -- \
  "${np2[@]}" training.output_dir="$FAULT_DIR/lr" training.learning_rate=1e30 training.max_grad_norm=0

FSDPP_FAULT_NAN=3:no.such.weight expect_fail nan_unknown_param 1 \
  "FSDPP_FAULT_NAN names parameter 'no.such.weight', which the model does not have" -- \
  "${np2[@]}" training.output_dir="$FAULT_DIR/unknown"
