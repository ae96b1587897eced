#!/usr/bin/env bash
# make bundle's archive works where it is unpacked, without the build tree, the source tree,
# Debian's libraries or the fortunes package: they are hidden (bind mounts in a private mount
# namespace) while the bundle trains 3 steps on 2 ranks, reads a JSON Lines file (fsdpp-data, with
# Arrow from the bundle's lib/) and runs fsdpp-estimate, with LibTorch found through python3's
# torch and through LIBTORCH_DIR. Also: every program's RUNPATH is
# $ORIGIN/../lib, and the archive fits the device tool's 64 MiB carry with room to spare.
#   bundle.sh BUILD_DIR SOURCE_DIR PYTHON
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd) python=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bash "$src/scripts/make_bundle.sh" "$build" "$work/fsdpp-bundle.tar.gz"
size=$(stat -c %s "$work/fsdpp-bundle.tar.gz")
(( size < 48 * 1048576 )) || { echo "FAIL: the bundle is $((size / 1048576)) MiB; it must stay well under the 64 MiB a device call carries"; exit 1; }
mkdir "$work/unpacked"
tar -C "$work/unpacked" -xzf "$work/fsdpp-bundle.tar.gz"
b=$work/unpacked/fsdpp
for f in "$b"/bin/*; do
  rp=$(readelf -d "$f" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
  # fsdpp-run links no LibTorch and has none (env.sh's LD_LIBRARY_PATH finds its libraries).
  [[ "$rp" == '$ORIGIN/../lib' || ( -z "$rp" && "$(basename "$f")" == fsdpp-run ) ]] ||
    { echo "FAIL: $f has RUNPATH '$rp'"; exit 1; }
done
[[ -f "$b/lib/libyaml-cpp.so.0.7" ]] || { echo "FAIL: the bundle lacks libyaml-cpp: $(ls "$b/lib")"; exit 1; }
# Arrow and Parquet come from the build machine's pyarrow wheel, which a GPU node lacks.
for lib in libarrow.so libparquet.so; do
  compgen -G "$b/lib/$lib.*" > /dev/null || { echo "FAIL: the bundle lacks $lib.*: $(ls "$b/lib")"; exit 1; }
done
! ls "$b/lib" | grep -E '^(libtorch|libc10|libc\.so|libm\.so)' || { echo "FAIL: the bundle carries LibTorch's or glibc's libraries"; exit 1; }
torch_dir=$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
venv_bin=$(dirname "$python")
cat > "$work/tiny.yaml" <<YAML
model: {dim: 32, n_layers: 2, n_heads: 2, max_seq_len: 32}
data: {path: $b/share/fsdpp/fortunes, tokenizer: byte, seq_len: 32, val_fraction: 0.05, cache_dir: $work/cache}
training:
  max_steps: 3
  per_device_train_batch_size: 2
  logging_steps: 1
  sample_tokens: 8
  report_to: none
  output_dir: $work/run
YAML
# Hidden: the build and source trees, the fortunes, and Debian's copies of the libraries the
# bundle carries but the C++ runtime (/dev/null over each file: loading one of them instead
# would fail).
hide=""
for lib in "$b"/lib/*.so*; do
  # Not the C++ runtime, which python3 (env.sh asks it for torch) loads before the bundle's.
  [[ "$(basename "$lib")" =~ ^(libstdc\+\+|libgcc_s) ]] && continue
  for dir in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu; do
    [[ -e "$dir/$(basename "$lib")" ]] && hide+="mount --bind /dev/null $dir/$(basename "$lib"); "
  done
done
mkdir "$work/empty"
unshare --mount bash -c "set -euo pipefail
  mount --bind $work/empty $build; mount --bind $work/empty $src
  [[ -d /usr/share/games/fortunes ]] && mount --bind $work/empty /usr/share/games/fortunes
  $hide
  export PATH=$venv_bin:/usr/bin:/bin
  cd $work
  $b/env.sh fsdpp-run --nproc-per-node 2 fsdpp-train $work/tiny.yaml > $work/train.log 2>&1 ||
    { cat $work/train.log; echo 'FAIL: training from the bundle failed'; exit 1; }
  grep -q 'done: 3 steps' $work/train.log || { cat $work/train.log; echo 'FAIL: no 3 steps'; exit 1; }
  printf '{\"text\": \"from the bundle\"}\n' > $work/one.jsonl
  $b/env.sh fsdpp-data records $work/one.jsonl > $work/records.log 2>&1 ||
    { cat $work/records.log; echo 'FAIL: fsdpp-data from the bundle failed'; exit 1; }
  grep -q 'from the bundle' $work/records.log || { cat $work/records.log; exit 1; }
  [[ \$(wc -l < $work/run/metrics.jsonl) -eq 3 ]] || { echo 'FAIL: metrics.jsonl has not 3 lines'; exit 1; }
  export PATH=/usr/bin:/bin  # no python3 with torch: LIBTORCH_DIR instead
  LIBTORCH_DIR=$torch_dir $b/env.sh fsdpp-estimate $work/tiny.yaml --world-size 1,2 > $work/estimate.log 2>&1 ||
    { cat $work/estimate.log; echo 'FAIL: fsdpp-estimate from the bundle failed'; exit 1; }
  if $b/env.sh fsdpp-estimate $work/tiny.yaml > $work/nopython.log 2>&1; then
    echo 'FAIL: env.sh ran without python3 torch or LIBTORCH_DIR'; exit 1
  fi
  grep -q 'cannot find LibTorch' $work/nopython.log || { cat $work/nopython.log; exit 1; }
"
echo "ok: the bundle ($((size / 1048576)) MiB) trains and estimates with the build and source trees hidden"
