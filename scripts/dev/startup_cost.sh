#!/usr/bin/env bash
# What starting ampctl costs: the median of 5 runs of wall time and maximum RSS (GNU time -v) for
# `ampctl --version` and `ampctl validate --config CONFIG` (issue 33's figures; docs/design.md).
# Usage: scripts/dev/startup_cost.sh [AMPCTL] [CONFIG]   (defaults: build/ampctl,
# configs/quickstart.yaml). Needs /usr/bin/time (Debian: time).
set -euo pipefail
cd "$(dirname "$0")/../.."
ampctl=${1:-build/ampctl}
config=${2:-configs/quickstart.yaml}
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
median() { printf '%s\n' "$@" | sort -g | sed -n 3p; }
for what in version validate; do
  walls=() rss=()
  for _ in 1 2 3 4 5; do
    if [[ $what == version ]]; then
      /usr/bin/time -v "$ampctl" --version >/dev/null 2>"$tmp"
    else
      /usr/bin/time -v "$ampctl" validate --config "$config" >/dev/null 2>"$tmp"
    fi
    walls+=("$(awk -F': ' '/Elapsed \(wall/{n=split($2,t,":"); s=0; for(i=1;i<=n;i++) s=s*60+t[i]; print s}' "$tmp")")
    rss+=("$(awk '/Maximum resident/{print $NF}' "$tmp")")
  done
  printf '%-9s wall %ss (runs: %s)  max RSS %s MB\n' "$what" "$(median "${walls[@]}")" \
    "${walls[*]}" "$(($(median "${rss[@]}") / 1024))"
done
