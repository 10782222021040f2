#!/usr/bin/env bash
# Launch overhead on the GPU machine (issue 25 item 1), with binaries from
# benches/gpu/launch_build.sh and the Vulkan loader installed (benches/gpu/README.md):
#   bash benches/gpu/launch_run.sh [BIN_DIR]
# 1. vulkan_launch: pooled eager launches on NVIDIA's Vulkan driver against the interpreter;
#    resident and graph: eager launches and replays that return once submitted, on CUDA and
#    Vulkan (when BIN_DIR holds them, from build_all.sh);
# 2. launch_bench: kiln's per-kernel eager and replay costs on the cpu device, Vulkan and
#    CUDA (100 dependent tiny kernels on an in-order queue, and the same recorded as a
#    command graph and replayed);
# 3. vk_chain_ref: the same 100 dependent dispatches recorded by hand into one Vulkan command
#    buffer (the driver's floor under kiln's Vulkan replay);
# 4. launch_ref.py: cupy's eager launches and hand-built CUDA graphs of the same kernels and
#    of empty ones, on the same GPU, and kiln's numbers held against them and issue 25's
#    targets.
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN="${1:-benches/gpu/bin}"
export KILN_EXAMPLES_DIR="$PWD/examples" KILN_REQUIRE_TOOLS=1 KILN_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
rc=0
step() { # NAME COMMAND...
  local name=$1; shift
  "$@" 2>&1 | tail -n "${TAIL:-12}"
  local r=${PIPESTATUS[0]}
  echo "== $name: exit $r"
  [ "$r" = 0 ] || rc=1
}
step vulkan_launch "$BIN/vulkan_launch" --test-threads=1
for t in resident graph; do
  [ -x "$BIN/$t" ] && step "$t" "$BIN/$t" --test-threads=1
done
out=$(mktemp)
TAIL=40 step launch_bench bash -c "\"$BIN/launch_bench\" --bench --warm-up-time 1 --measurement-time 3 | tee $out"
[ -x "$BIN/vk_chain_ref" ] && step vk_chain_ref "$BIN/vk_chain_ref" --bench
TAIL=40 step launch_ref python3 benches/gpu/launch_ref.py --kiln "$out"
echo "summary: exit $rc"
exit $rc
