# What the fsdpp-train estimate-vs-RSS tests share (estimate_vs_rss_{tp,moe,pp,distill}.sh): the
# runtime term measured once per world size, one fsdpp-train run with its config and overrides,
# the fsdpp-estimate of exactly that, and the comparison (estimate_check.py). Source it after
# setting run, train, bench, estimate, python, src and dir.

# The runtime's own peak RSS at n ranks (fsdpp-bench baseline, as make bench measures it), once.
baseline_mb() {
  local n=$1
  [ -f "$dir/baseline-$n.json" ] ||
    "$run" --nproc-per-node "$n" --timeout-s 120 "$bench" baseline --out "$dir/baseline-$n.json" >/dev/null
  "$python" -c "import json,sys; print(max(json.load(open(sys.argv[1]))['peak_rss_mb']))" "$dir/baseline-$n.json"
}

# train_and_estimate NAME N CONFIG KEY=VALUE...: fsdpp-train on N ranks into $dir/NAME (its log
# printed when it fails), which must not have skipped its own memory check, then fsdpp-estimate
# of the same config and overrides into $dir/est-NAME.json.
train_and_estimate() {
  local name=$1 n=$2 config=$3
  shift 3
  "$run" --nproc-per-node "$n" --timeout-s 120 "$train" "$config" "$@" training.output_dir="$dir/$name" \
    > "$dir/$name.log" 2>&1 || { cat "$dir/$name.log"; return 1; }
  if grep -q "memory check: skipped" "$dir/$name.log"; then
    echo "$name: the trainer skipped its memory check"; return 1
  fi
  "$estimate" --json "$config" "$@" --world-size "$n" --runtime-baseline-mb "$(baseline_mb "$n")" \
    > "$dir/est-$name.json"
}

# check_estimate NAME TOLERANCE [estimate_check.py options]: the estimate of $dir/est-NAME.json
# against the worst rank's peak RSS in $dir/NAME/metrics.jsonl.
check_estimate() {
  local name=$1 tol=$2
  shift 2
  "$python" "$src/tests/bench/estimate_check.py" "$dir/$name/metrics.jsonl" "$dir/est-$name.json" "$name" \
    "$tol" "$@"
}
