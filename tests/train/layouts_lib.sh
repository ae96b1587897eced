# Sourced by the fsdpp-train layout tests (tensor_parallel.sh, qwen3_moe.sh). The caller sets
# run, train, config, dir and the array common (keys every run shares).

# go RANKS OUT KEYS...: a run into $dir/OUT, its output in $dir/OUT.log (printed if it fails).
go() {
  local n=$1 out=$2
  shift 2
  "$run" --nproc-per-node "$n" --timeout-s 120 "$train" "$config" "${common[@]}" \
    training.output_dir="$dir/$out" "$@" > "$dir/$out.log" 2>&1 || { cat "$dir/$out.log"; exit 1; }
}

# bad RANKS TEXT KEYS...: the run must fail, its output naming TEXT.
bad() {
  local n=$1 want=$2
  shift 2
  if "$run" --nproc-per-node "$n" --timeout-s 60 "$train" "$config" "${common[@]}" \
      training.output_dir="$dir/bad" "$@" > "$dir/bad.log" 2>&1; then
    echo "accepted: $*"; exit 1
  fi
  grep -qF "$want" "$dir/bad.log" || { echo "expected '$want' for $*:"; cat "$dir/bad.log"; exit 1; }
}
