#!/usr/bin/env bash
# GPU proof for the PTX backend, in one command on the GPU machine (no Rust toolchain there):
#   benches/gpu/run.sh [BIN_DIR]
# BIN_DIR holds x86-64 binaries built elsewhere (default benches/gpu/bin): `kiln` (the CLI)
# and `cuda_diff` (the runtime's differential test binary). Build and collect them with
#   benches/gpu/build.sh
# It runs (1) the differential tests on the cuda device (examples, edge cases and random
# kernels vs the interpreter), (2) `kiln run --device cuda` on an example, (3) the benchmark
# (benches/gpu/bench.py), and prints a summary table.
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN="${1:-benches/gpu/bin}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true

echo "== differential tests: cuda device vs interpreter =="
start=$(date +%s%N)
KILN_EXAMPLES_DIR="$PWD/examples" KILN_REQUIRE_CUDA=1 KILN_CUDA_CASES="${KILN_CUDA_CASES:-300}" "$BIN/cuda_diff" --test-threads=1 --nocapture 2>&1 | tail -n 25
diff_rc=${PIPESTATUS[0]}
echo "differential tests: exit $diff_rc in $(( ($(date +%s%N) - start) / 1000000 )) ms"

echo "== kiln run --device cuda =="
"$BIN/kiln" run examples/saxpy.kir --device cuda --global 8 --arg x=iota:8 --arg y=iota:8 --arg a=2.0 --arg n=6
run_rc=$?

echo "== benchmark =="
python3 benches/gpu/bench.py "$BIN/kiln"
bench_rc=$?
echo
echo "summary: differential tests exit $diff_rc, kiln run --device cuda exit $run_rc, benchmark exit $bench_rc"
[ "$diff_rc" = 0 ] && [ "$run_rc" = 0 ] && [ "$bench_rc" = 0 ]
