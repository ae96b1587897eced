#!/bin/sh
# Compiler launcher of the target that builds the precompiled header (cmake/CcachePch.cmake):
#   pch_checksum.sh <source dir> <compiler> <launcher...> <compiler> <args...>
# Runs the compile; after one that wrote a .pch it also writes <pch>.sum, a digest of what the
# PCH holds: the compiler, the flags with this clone's paths taken out, and the header
# preprocessed without line markers. ccache with pch_external_checksum hashes that file instead
# of the PCH, whose bytes embed the clone's absolute paths: objects compiled in another clone of
# the same commit then hit, while any change to what the PCH holds still misses.
set -eu
src=$1
cc=$2
shift 2
"$@"

out=
prev=
for a in "$@"; do
  [ "$prev" = "-o" ] && out=$a
  prev=$a
done
case "$out" in *.pch) ;; *) exit 0 ;; esac

# The compiler's args, without the launcher, the outputs and "-Xclang -emit-pch".
while [ $# -gt 0 ] && [ "$1" != "$cc" ]; do shift; done
shift
n=$#
i=0
skip=
xclang=
for a in "$@"; do
  i=$((i + 1))
  shift
  if [ -n "$skip" ]; then
    skip=
  elif [ -n "$xclang" ]; then
    xclang=
    [ "$a" = "-emit-pch" ] || set -- "$@" -Xclang "$a"
  else
    case "$a" in
      -o | -MT | -MF) skip=1 ;;
      -MD | -c) ;;
      -Xclang) xclang=1 ;;
      *) set -- "$@" "$a" ;;
    esac
  fi
  [ "$i" -eq "$n" ] && break
done

{
  "$cc" --version
  printf '%s\n' "$@" | sed "s|$src|@SRC@|g; s|$PWD|@BUILD@|g"
  "$cc" "$@" -E -P
} | sha256sum >"$out.sum.tmp"
mv "$out.sum.tmp" "$out.sum"
