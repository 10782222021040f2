#!/usr/bin/env bash
# The command-graph proof alone on the GPU machine (run_all.sh runs it too), with binaries
# from benches/gpu/build_all.sh (KILN_GPU_PROFILE=release for host timings worth reporting):
#   bash benches/gpu/run_graph.sh [BIN_DIR]
# 1. the graph and resident tests with CUDA present (device partitions as CUDA graphs,
#    buffers kept in device memory) and NVIDIA's Vulkan driver (recorded command buffers),
#    and graph_prop (random command sequences replayed on Vulkan against the interpreter);
# 2. graph.py: kiln's graph replay of 100 tiny kernels against a cupy-captured CUDA graph of
#    kiln's own PTX and against eager launches, and the 4-kernel elementwise chain over 2^28
#    f32 fused against unfused (target 2.4x);
# 3. graph_bench on Vulkan (2^24 elements: host-visible memory).
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN="${1:-benches/gpu/bin}"
export KILN_EXAMPLES_DIR="$PWD/examples" KILN_REQUIRE_TOOLS=1 KILN_REQUIRE_CUDA=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
rc=0
step() { # NAME COMMAND...
  local name=$1; shift
  local start; start=$(date +%s%N)
  "$@" 2>&1 | tail -n "${TAIL:-12}"
  local r=${PIPESTATUS[0]}
  echo "== $name: exit $r in $(( ($(date +%s%N) - start) / 1000000 )) ms"
  [ "$r" = 0 ] || rc=1
}
step graph "$BIN/graph" --test-threads=1
step resident "$BIN/resident" --test-threads=1
step graph_prop "$BIN/graph_prop"
TAIL=40 step "graph cuda" python3 benches/gpu/graph.py "$BIN"
TAIL=20 step "graph vulkan" "$BIN/graph_bench" --device vulkan --elems 16777216
echo "summary: exit $rc"
exit $rc
