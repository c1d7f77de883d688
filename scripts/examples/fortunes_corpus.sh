#!/usr/bin/env bash
# The corpus of configs/gpt_fortunes.yaml: every fortune file of Debian packages concatenated
# into one text file; by default the `fortunes` package and `fortunes-min`, which it depends on,
# whose files lie in /usr/share/games/fortunes (scripts/setup.sh installs them). configs/gpt_finetune.yaml's second
# corpus is the `fortunes-bofh-excuses` package's file, written the same way.
# Only the packages' own regular files in that folder are taken (dpkg -L lists them; where dpkg
# does not know them, every regular file of the folder): the .dat index files and the .u8
# links (which point at the files themselves) are left out, as are other links, folders and other
# packages' files. The files go in byte order of their names (LC_ALL=C), so the corpus is the same
# on every machine with the same package. Writes to a temporary file next to OUT and renames it,
# so OUT is never half written.
#
#   bash scripts/examples/fortunes_corpus.sh [OUT [PACKAGES]]
#       OUT defaults to data/fortunes.txt, PACKAGES (comma-separated) to fortunes,fortunes-min:
#   bash scripts/examples/fortunes_corpus.sh data/bofh.txt fortunes-bofh-excuses
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
src=${FORTUNES_DIR:-/usr/share/games/fortunes}
out=${1:-$root/data/fortunes.txt}
packages=${2:-fortunes,fortunes-min}
IFS=, read -r -a package_list <<<"$packages"
package=${package_list[0]}
if [[ ! -d $src ]]; then
  echo "fortunes_corpus: $src not found; install Debian's '$package' package (scripts/setup.sh)" >&2
  exit 2
fi
owned=()
if command -v dpkg-query >/dev/null; then
  for p in "${package_list[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      echo "fortunes_corpus: Debian's '$p' package is not installed (apt-get install $p)" >&2
      exit 2
    fi
    mapfile -t -O "${#owned[@]}" owned < <(dpkg-query -L "$p" | sed -n "s|^$src/\([^/]*\)$|\1|p")
  done
fi
mapfile -t files < <(LC_ALL=C find "$src" -mindepth 1 -maxdepth 1 -type f ! -name '*.dat' \
  ! -name '*.u8' -printf '%f\n' | LC_ALL=C sort)
if ((${#owned[@]})); then
  mapfile -t files < <(printf '%s\n' "${files[@]}" | LC_ALL=C grep -Fxf <(printf '%s\n' "${owned[@]}") || true)
fi
if ((${#files[@]} == 0)) || [[ -z ${files[0]} ]]; then
  echo "fortunes_corpus: no fortune files of $packages in $src" >&2
  exit 2
fi
mkdir -p "$(dirname "$out")"
tmp=$(mktemp "$out.tmp.XXXXXX")
trap 'rm -f "$tmp"' EXIT
for f in "${files[@]}"; do cat "$src/$f"; done >"$tmp"
# mktemp makes the file 0600; the corpus gets the mode any new file gets here (0666 less the
# umask), as `cat > OUT` would give it.
chmod "$(printf '%o' $((0666 & ~$(umask))))" "$tmp"
mv "$tmp" "$out"
trap - EXIT
echo "fortunes_corpus: ${#files[@]} files of $packages, $(wc -c <"$out") bytes -> $out"
