#!/usr/bin/env bash
# The corpus of configs/gpt_fortunes.yaml: every fortune file of Debian's `fortunes` package
# (/usr/share/games/fortunes; scripts/setup.sh installs it) concatenated into one text file.
# Only regular files are taken: the .dat index files and the .u8 links (which point at the
# files themselves) are left out, as are other links and folders. The files go in byte order
# of their names (LC_ALL=C), so the corpus is the same on every machine with the same package.
# Writes to a temporary file next to OUT and renames it, so OUT is never half written.
#
#   bash scripts/examples/fortunes_corpus.sh [OUT]     # OUT defaults to data/fortunes.txt
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
src=${FORTUNES_DIR:-/usr/share/games/fortunes}
out=${1:-$root/data/fortunes.txt}
if [[ ! -d $src ]]; then
  echo "fortunes_corpus: $src not found; install Debian's 'fortunes' package (scripts/setup.sh)" >&2
  exit 2
fi
mapfile -t files < <(LC_ALL=C find "$src" -mindepth 1 -maxdepth 1 -type f ! -name '*.dat' \
  ! -name '*.u8' -printf '%f\n' | LC_ALL=C sort)
if ((${#files[@]} == 0)); then
  echo "fortunes_corpus: no fortune files in $src" >&2
  exit 2
fi
mkdir -p "$(dirname "$out")"
tmp=$(mktemp "$out.tmp.XXXXXX")
trap 'rm -f "$tmp"' EXIT
for f in "${files[@]}"; do cat "$src/$f"; done >"$tmp"
mv "$tmp" "$out"
trap - EXIT
echo "fortunes_corpus: ${#files[@]} files, $(wc -c <"$out") bytes -> $out"
