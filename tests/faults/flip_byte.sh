#!/usr/bin/env bash
# flip_byte.sh FILE OFFSET: inverts the bits of the byte at OFFSET (negative: from the end).
set -euo pipefail
f=$1 off=$2
size=$(stat -c %s "$f")
[ "$off" -lt 0 ] && off=$((size + off))
byte=$(od -An -tu1 -j "$off" -N1 "$f" | tr -d ' ')
printf "$(printf '\\%03o' $((255 - byte)))" | dd of="$f" bs=1 seek="$off" count=1 conv=notrunc status=none
