#!/usr/bin/env bash
# Every device proof in one command on the GPU machine (no Rust there), with binaries from
# benches/gpu/build_all.sh:
#   bash benches/gpu/run_all.sh [BIN_DIR]
# CUDA: the differential tests (cuda_diff, cuda_optimized), the sanitizer, the embedding
# API, the fusion-queue scenarios, ranged accessors and the fusion-queue loop benchmark; NVIDIA's Vulkan driver: vulkan_diff, the sanitizer, embedding; the cpu device on the
# host's cores (cpu_diff, and the 4-kernel chain timed with `kiln run --time`); kiln's
# generated SGEMM against cuBLAS (gemm.py), its convolution against cuDNN (conv.py), NVRTC's
# compile time for a similar CUDA C SGEMM against kiln's generation and emission
# (nvrtc_gemm.py); command graphs (the graph and resident tests on CUDA and Vulkan,
# graph.py: kiln's graph replay against a cupy-built CUDA graph of the same kernels and
# against eager launches, fused against unfused). The Vulkan loader must be installed (see
# benches/gpu/README.md).
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN="${1:-benches/gpu/bin}"
export KILN_EXAMPLES_DIR="$PWD/examples" KILN_REQUIRE_CUDA=1 KILN_REQUIRE_TOOLS=1
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
step cuda_diff "$BIN/cuda_diff" --test-threads=1
step cuda_optimized "$BIN/cuda_optimized" --test-threads=1
step vulkan_diff "$BIN/vulkan_diff" --test-threads=1
step sanitize "$BIN/sanitize" --test-threads=1
step embed "$BIN/embed" --test-threads=1
step vectors "$BIN/vectors" --test-threads=1
step graph "$BIN/graph" --test-threads=1
step resident "$BIN/resident" --test-threads=1
step graph_prop "$BIN/graph_prop"
step fusion_queue_tests "$BIN/fusion_queue_tests" --test-threads=1
# Ranged accessors on CUDA and NVIDIA's Vulkan against the interpreter (and the fusion
# queue's ranged scenario, in fusion_queue_tests above).
step ranged "$BIN/ranged" --test-threads=1
KILN_CPU_CASES=2000 step cpu_diff "$BIN/cpu_diff"
n=33554432
chain() { "$BIN/kiln" run benches/gpu/chain.kir --kernel fused --global $n --arg a=iota:$n \
  --arg b=zeros:$n --arg c=zeros:$n --arg out=zeros:$n --arg n=$n --time --repeat 10 "$@"; }
step "chain cpu, all threads" chain --device cpu
step "chain cpu, 1 thread" chain --device cpu --threads 1
step "chain cuda" chain --device cuda
TAIL=20 step "fusion queue (cuda, cpu)" bash benches/gpu/fusion_queue.sh "$BIN"
TAIL=60 step gemm python3 benches/gpu/gemm.py "$BIN/kiln"
TAIL=40 step "graph cuda" python3 benches/gpu/graph.py "$BIN"
TAIL=20 step "graph vulkan" "$BIN/graph_bench" --device vulkan --elems 16777216
TAIL=60 step conv python3 benches/gpu/conv.py "$BIN/kiln"
step "nvrtc vs kiln gemm compile" python3 benches/gpu/nvrtc_gemm.py "$BIN/kiln"
echo "summary: exit $rc"
exit $rc
