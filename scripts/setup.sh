#!/usr/bin/env bash
# Installs what fsdpp needs on a fresh Debian machine, and does nothing when it is all there.
# Debian packages come from apt; PyTorch (whose wheel carries LibTorch) goes into a virtual
# environment outside the clone, named by version, so a fresh clone reuses it.
set -euo pipefail
: "${TORCH_VERSION:?}" "${VENV:?}"

APT_PACKAGES=(cmake ninja-build g++ clang ccache pkg-config python3-venv
  libgtest-dev libgmock-dev libbenchmark-dev libyaml-cpp-dev libcli11-dev nlohmann-json3-dev
  libfmt-dev libxxhash-dev libsentencepiece-dev libgloo-dev
  libpcre2-dev libutf8proc-dev  # tokenizer.json: its Split regexes (PCRE2, JIT) and NFC/NFKC normalizers
  libzstd-dev zlib1g-dev  # data files compressed as .zst / .gz
  iproute2  # `ip netns`: the multi-node test's two hosts (tests/multinode/)
  openmpi-bin  # a real mpirun starting fsdpp-train's ranks (tests/launch/mpirun_train.sh)
  slurmctld slurmd slurm-client munge  # a real SLURM the test starts (tests/launch/slurm_job.sh)
  libclang-rt-dev  # clang's ASan/UBSan and libFuzzer runtimes: make test-asan, tests/fuzz/
  fortunes)  # English text for the default training job (/usr/share/games/fortunes)
# matplotlib: make bench charts; transformers: the Hugging Face Llama round trip test;
# tensorboard: its own event-file reader checks the files the trainer writes (train.tensorboard).
# pyarrow: its wheel ships Apache Arrow's C++ libraries and headers (Parquet, Arrow IPC), which
# fsdpp links as it links the torch wheel's LibTorch. tokenizers, sentencepiece, protobuf, jinja2,
# datasets, zstandard: the references the data tests compare fsdpp with (Hugging Face's ids, chat
# templates, save_to_disk directories, .zst files).
PIP_PACKAGES=("torch==${TORCH_VERSION}" numpy safetensors matplotlib "transformers==5.23.0"
  tensorboard "pyarrow==26.0.1" "tokenizers==0.23.3" "sentencepiece==0.2.3" protobuf "jinja2==3.1.6"
  "datasets==5.2.0" zstandard)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[setup] installing Debian packages: ${missing[*]}"
  sudo_cmd=(); [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

stamp="$VENV/.fsdpp-setup-done"
want="${PIP_PACKAGES[*]}"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "[setup] preparing Python environment $VENV (${want})"
  mkdir -p "$(dirname "$VENV")"
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --progress-bar off "${PIP_PACKAGES[@]}"
  "$VENV/bin/python" -c "import torch; assert torch.__version__.startswith('${TORCH_VERSION}'), torch.__version__"
  echo "$want" > "$stamp"
fi
