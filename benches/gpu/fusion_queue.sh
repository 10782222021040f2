#!/usr/bin/env bash
# The fusion-mode loop benchmark (runtime/benches/fusion_queue.rs: Codeplay's 4-kernel
# shape, three inputs, an elementwise chain over 2^20 f32, intermediates promoted to private)
# on the GPU and on the host's cpu device, in one run, with the binary that
# benches/gpu/build_all.sh puts into benches/gpu/bin (no Rust needed here):
#   bash benches/gpu/fusion_queue.sh [BIN_DIR]
# Each device prints `chain4_<device>/unfused` and `chain4_<device>/fused` (time per
# iteration: four submissions and a wait, or start_fusion, four submissions, complete_fusion
# and a wait); the ratio unfused / fused is the speed-up of fusion mode on that device.
# Then the guarded chain (runtime/benches/fusion_guarded.rs: five `if i < n` kernels over
# n = 2^20 - 37 rounded up to 256) on cuda, vulkan and cpu: `guarded5_<device>/unfused` and
# `.../fused`; each run first checks that the chain fuses and gives the unfused bits.
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN="${1:-benches/gpu/bin}"
rc=0
for dev in cuda cpu; do
  out=$(KILN_BENCH_DEVICE=$dev "$BIN/fusion_queue" --bench --warm-up-time 1 --measurement-time 5 2>&1)
  r=$?
  echo "$out" | grep -E "^chain4|time:"
  if [ "$r" != 0 ]; then echo "$out" | grep -A2 panicked | head -n 4; echo "== $dev: exit $r"; rc=1; fi
done
for dev in cuda vulkan cpu; do
  out=$(KILN_BENCH_DEVICE=$dev "$BIN/fusion_guarded" --bench --warm-up-time 1 --measurement-time 5 2>&1)
  r=$?
  echo "$out" | grep -E "^guarded5|time:"
  if [ "$r" != 0 ]; then echo "$out" | grep -A2 panicked | head -n 4; echo "== guarded $dev: exit $r"; rc=1; fi
done
exit $rc
