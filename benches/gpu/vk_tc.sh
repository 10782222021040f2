#!/usr/bin/env bash
# The tensor-core GEMM on NVIDIA's Vulkan driver (SPV_KHR_cooperative_matrix) against cuBLAS
# in the same run, on the GPU machine (no Rust toolchain there):
#   vk_tc.sh VULKAN_MATRIX_BINARY [SIZES]
# VULKAN_MATRIX_BINARY is the test binary built elsewhere by
#   cargo test --no-run -p kiln-runtime --test vulkan_matrix
# (target/debug/deps/vulkan_matrix-HASH; the dev profile is fine: the GPU does the work).
# SIZES: comma-separated N for N^3 (default 4096). It runs (1) the binary's tests with
# KILN_REQUIRE_COOP_MATRIX=1: the GEMMs of odd sizes and every transposition against the
# interpreter, failing if the device lists no cooperative matrices; (2) its ignored
# tc_gemm_speed: each N^3 f16 GEMM (f32 out) checked on 256 elements against an f64
# product, then timed (median of 10 launches, each waited for); (3) torch.matmul on f16
# (cuBLAS, f32 accumulation) for the same sizes, CUDA events, and the ratio.
# KILN_VK_TC_CONFIGS=BMxBN:WMxWN:BK:STAGES,... times those blockings (default the default one);
# the ratio uses the fastest.
set -uo pipefail
BIN="${1:?usage: vk_tc.sh VULKAN_MATRIX_BINARY [SIZES]}"
SIZES="${2:-4096}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true

echo "== vulkan_matrix tests (KILN_REQUIRE_COOP_MATRIX=1) =="
KILN_REQUIRE_COOP_MATRIX=1 "$BIN" --test-threads=1 --nocapture 2>&1 | tail -n 30
test_rc=${PIPESTATUS[0]}

echo "== kiln on Vulkan =="
out=$(KILN_VK_TC_SIZES="$SIZES" "$BIN" --ignored --exact tc_gemm_speed --nocapture 2>&1)
speed_rc=$?
printf '%s\n' "$out" | grep -E "^(device|kiln vulkan)|panicked|error" || printf '%s\n' "$out" | tail -n 20

echo "== cuBLAS (torch.matmul, f16) and the ratio =="
KILN_OUT="$out" python3 - "$SIZES" <<'PY'
import os, re, sys
import torch
sizes = [int(s) for s in sys.argv[1].split(",")]
kiln = {}
for n, t in re.findall(
        r"kiln vulkan tc-gemm f16 (\d+)\^3 .*?: [\d.]+ ms, ([\d.]+) TFLOP/s", os.environ["KILN_OUT"]):
    kiln[int(n)] = max(kiln.get(int(n), 0.0), float(t))
print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}")
for n in sizes:
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    ref = torch.matmul(a.float(), b.float())
    got = torch.matmul(a, b).float()
    err = ((got - ref).abs().max() / ref.abs().max()).item()
    assert err < 1e-2, f"cuBLAS {n}^3 relative error {err}"
    for _ in range(3):
        torch.matmul(a, b)
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); torch.matmul(a, b); e.record(); e.synchronize()
        times.append(s.elapsed_time(e))
    ms = sorted(times)[len(times) // 2]
    tf = 2 * n ** 3 / (ms * 1e-3) / 1e12
    k = kiln.get(n)
    ratio = f"{k / tf:.2f}x cuBLAS" if k else "kiln: no result"
    print(f"cuBLAS f16 {n}^3: {ms:.3f} ms, {tf:.1f} TFLOP/s; kiln vulkan {k} TFLOP/s: {ratio}")
PY
py_rc=$?
echo "summary: tests exit $test_rc, kiln timing exit $speed_rc, cuBLAS exit $py_rc"
[ "$test_rc" = 0 ] && [ "$speed_rc" = 0 ] && [ "$py_rc" = 0 ]
