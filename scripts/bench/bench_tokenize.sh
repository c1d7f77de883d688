#!/usr/bin/env bash
# `ampctl tokenize` against tiktoken (OpenAI's, Rust compiled to WebAssembly, in node) on the
# fortunes corpus with GPT-2's tokenizer, in the same run on the same machine: the best of
# REPEATS encodings each (ampctl's "encoded in" time, without reading the tokenizer; tiktoken's
# encode(text, "all") call, after loading), ampctl with one thread (tiktoken's one core) and with
# every core. Also checks that both give the same number of tokens (tests/cli/tokenize_reference.py
# checks the ids themselves). Needs node and the npm packages of scripts/setup.sh.
#
#   bash scripts/bench/bench_tokenize.sh [AMPCTL [REPEATS]]    (defaults: build/ampctl, 5)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
ampctl=${1:-$root/build/ampctl}
repeats=${2:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
modules=${AMPCTL_NPM_MODULES:-$root/.cache/npm-tokenizers/node_modules}
if [[ ! -d $modules/tiktoken || ! -d $modules/gpt-3-encoder ]]; then
  echo "bench_tokenize: tiktoken and gpt-3-encoder are not in $modules (scripts/setup.sh)" >&2
  exit 2
fi
reference=$root/tests/cli/tokenize_reference.mjs
bash "$root/scripts/examples/fortunes_corpus.sh" "$work/fortunes.txt" >/dev/null
NODE_MODULES=$modules node "$reference" files "$work/tok"

best_ampctl() {  # THREADS -> best seconds of the encoding, and the token count
  local best="" tokens=""
  for ((i = 0; i < repeats; ++i)); do
    local line
    line=$("$ampctl" tokenize --tokenizer "$work/tok/gpt2" "$work/fortunes.txt" \
      --out "$work/out.bin" --threads "$1" 2>/dev/null)
    local s
    s=$(sed -n 's/.*encoded in \([0-9.]*\) s.*/\1/p' <<<"$line")
    tokens=$(sed -n 's/^wrote [^:]*: \([0-9]*\) tokens.*/\1/p' <<<"$line")
    if [[ -z $best ]] || awk -v a="$s" -v b="$best" 'BEGIN{exit !(a < b)}'; then best=$s; fi
  done
  echo "$best $tokens"
}

read -r tk_s tk_tokens bytes < <(NODE_MODULES=$modules node "$reference" time tiktoken-gpt2 \
  "$work/fortunes.txt" "$repeats" | python3 -c \
  'import json,sys; d=json.load(sys.stdin); print(d["seconds"], d["tokens"], d["bytes"])')
read -r one_s one_tokens < <(best_ampctl 1)
cores=$(nproc)
read -r all_s all_tokens < <(best_ampctl "$cores")
if [[ $one_tokens != "$tk_tokens" || $all_tokens != "$tk_tokens" ]]; then
  echo "bench_tokenize: token counts differ: ampctl $one_tokens / $all_tokens, tiktoken $tk_tokens" >&2
  exit 1
fi
python3 - "$bytes" "$tk_tokens" "$tk_s" "$one_s" "$all_s" "$cores" <<'PY'
import sys
size, tokens, tk, one, every, cores = sys.argv[1:]
size, tokens, tk, one, every = int(size), int(tokens), float(tk), float(one), float(every)
print(f"fortunes corpus: {size / 1e6:.2f} MB, {tokens} GPT-2 tokens (best of the repeats)")
print("| encoder | seconds | MB/s | tokens/s | vs tiktoken |")
print("|---|---|---|---|---|")
for name, s in [("tiktoken 1.0.22 (node, wasm, 1 thread)", tk), ("ampctl, 1 thread", one),
                (f"ampctl, {cores} threads", every)]:
    print(f"| {name} | {s:.3f} | {size / 1e6 / s:.1f} | {tokens / s:,.0f} | {tk / s:.2f}x |")
PY
