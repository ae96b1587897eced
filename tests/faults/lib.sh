# Helpers for the fault tests (sourced). Each case prints one line for the log:
#   ok   <name>: exit <code> after <s> s: <the line that matched>
# and the script stops at the first case that does not behave.

# small_config SRC DIR: sets the array `small`, the overrides that make fsdpp-train's default
# config a job of seconds (a 2-layer model of width 32 on the repository's configs as text,
# windows of 32 tokens, no evaluation or sample, every step logged), its cache in DIR/cache.
small_config() {
  small=(data.path="$1/configs" data.seq_len=32 data.val_fraction=0.1 model.dim=32 model.n_layers=2
         model.n_heads=4 model.n_kv_heads=2 model.max_seq_len=32 training.logging_steps=1
         training.eval_steps=0 training.sample_tokens=0 training.per_device_train_batch_size=2
         data.cache_dir="$2/cache")
}

# expect_fail NAME CODES REGEX -- COMMAND...
#   COMMAND must exit with one of CODES (a |-separated list such as "1|2": never 0, never a
#   signal, never a timeout), within 120 s, with a line of stdout+stderr that matches the
#   extended REGEX. Its output is kept in $FAULT_DIR/NAME.log.
expect_fail() {
  local name=$1 codes=$2 regex=$3
  shift 4
  local log="$FAULT_DIR/$name.log" start end rc
  start=$(date +%s.%N)
  set +e
  timeout -k 5 120 "$@" > "$log" 2>&1 < /dev/null
  rc=$?
  set -e
  end=$(date +%s.%N)
  local secs
  secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
  if ! [[ "|$codes|" == *"|$rc|"* ]]; then
    echo "FAIL $name: exit code $rc, expected $codes; output:"
    tail -n 30 "$log"
    exit 1
  fi
  local line
  line=$(grep -a -E -m1 -- "$regex" "$log" || true)
  if [ -z "$line" ]; then
    echo "FAIL $name: exit $rc but no line matches /$regex/; output:"
    tail -n 30 "$log"
    exit 1
  fi
  LAST_SECS=$secs
  echo "ok   $name: exit $rc after $secs s: ${line:0:300}"
}

# tree_digest DIR: one digest of every file's name and bytes under DIR (to show a failed run
# left it as it was).
tree_digest() {
  (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
}
