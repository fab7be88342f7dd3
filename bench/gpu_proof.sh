#!/usr/bin/env bash
# The GPU proof, for the device machine: bench/README.md, "On a GPU".
#
#   bench/gpu_proof.sh                    on a machine with a CUDA GPU; results under $OUT
#   GPU_PROOF_DRY=1 bench/gpu_proof.sh    here: checks the script, the carried wheels and the
#                                         no-GPU answer (bench/gpu_proof_check.py), in seconds
#
# Exit status: 0 all passed, 1 a step failed or a fact did not hold, 3 no CUDA device.
set -u
cd "$(dirname "$0")/.." || exit 2
PY=${GPU_PROOF_PYTHON:-python3}
if [ "${GPU_PROOF_DRY:-0}" = 1 ]; then
    exec "$PY" bench/gpu_proof_check.py "$@"
fi
exec "$PY" -u bench/gpu_proof.py "$@"
