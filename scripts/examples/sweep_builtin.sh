#!/usr/bin/env bash
# The same loss-scaler sweep with the built-in command: configs/sweep_scaler.yaml's `sweep:`
# section (scaler.init_scale x scaler.growth_interval, 4 runs), 2 at once, into
# sweeps/sweep_scaler/ with sweep.csv and sweep.json. Re-running it skips finished runs and
# resumes interrupted ones; Ctrl-C checkpoints every running run.
#   AMPCTL=build/ampctl scripts/examples/sweep_builtin.sh [--grid KEY=V1,V2,...] [--out DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."

AMPCTL=${AMPCTL:-build/ampctl}
exec "$AMPCTL" sweep --config configs/sweep_scaler.yaml --jobs "${JOBS:-2}" "$@"
