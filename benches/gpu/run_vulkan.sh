#!/usr/bin/env bash
# Vulkan proof of the SPIR-V backend, in one command on the GPU machine's Vulkan driver
# (no Rust toolchain there):
#   run_vulkan.sh [BIN_DIR [EXAMPLES_DIR]]
# BIN_DIR holds x86-64 binaries built elsewhere by benches/gpu/build_vulkan.sh (default
# benches/gpu/bin): `kiln` and `vulkan_diff`. EXAMPLES_DIR holds the example .kir files
# (default examples). The Vulkan loader must be installed and the driver's ICD selected
# (VK_DRIVER_FILES); see benches/gpu/README.md.
# It runs (1) the Vulkan differential tests (examples, hand cases, edge cases, the issue-13
# regressions and KILN_VULKAN_CASES random kernels, default 300, against the interpreter),
# (2) `kiln run --device vulkan` on the examples, each compared with `--device interp`.
# KILN_VULKAN_LOG=FILE keeps the differential tests' whole output (the summary shows its end).
set -uo pipefail
BIN="${1:-benches/gpu/bin}"
EX="${2:-examples}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true

echo "== differential tests: vulkan device vs interpreter =="
start=$(date +%s%N)
KILN_EXAMPLES_DIR="$EX" KILN_REQUIRE_TOOLS=1 KILN_VULKAN_CASES="${KILN_VULKAN_CASES:-300}" \
  "$BIN/vulkan_diff" --test-threads=1 --nocapture 2>&1 | tee "${KILN_VULKAN_LOG:-/dev/null}" | tail -n 80
diff_rc=${PIPESTATUS[0]}
echo "differential tests: exit $diff_rc in $(( ($(date +%s%N) - start) / 1000000 )) ms"

echo "== kiln run --device vulkan vs --device interp =="
run_rc=0
run_one() {
  local name=$1; shift
  local want got
  want=$("$BIN/kiln" run "$EX/$name.kir" --device interp --full "$@" 2>&1) || { echo "$name: interp failed: $want"; run_rc=1; return; }
  got=$("$BIN/kiln" run "$EX/$name.kir" --device vulkan --full "$@" 2>&1) || { echo "$name: vulkan failed: $got"; run_rc=1; return; }
  if [ "$want" = "$got" ]; then
    echo "$name: vulkan output equals the interpreter's ($(printf '%s\n' "$got" | wc -l) buffers)"
  else
    echo "$name: DIFFERENT"; diff <(echo "$want") <(echo "$got") | head -n 20; run_rc=1
  fi
}
run_one saxpy --global 64 --local 16 --arg x=iota:64 --arg y=iota:64 --arg a=2.5 --arg n=61
run_one reduce --global 256 --arg x=iota:256 --arg partial=zeros:4 --arg n=250
run_one stencil2d --global 16,12 --local 4,4 --arg src=iota:192 --arg dst=zeros:192 --arg w=15 --arg h=11
run_one divergent --global 64 --local 16 --arg data=iota:64 --arg steps=zeros:64 --arg kind=zeros:64 --arg n=60
echo
echo "summary: differential tests exit $diff_rc, kiln run --device vulkan vs interp exit $run_rc"
[ "$diff_rc" = 0 ] && [ "$run_rc" = 0 ]
