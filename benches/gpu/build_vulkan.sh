#!/usr/bin/env bash
# Builds the x86-64 binaries benches/gpu/run_vulkan.sh needs into benches/gpu/bin (stripped),
# here, where the Rust toolchain is: `kiln` (the CLI) and `vulkan_diff` (the runtime's
# Vulkan differential test binary). Carry that folder, examples/ and run_vulkan.sh to the
# GPU machine. KILN_GPU_PROFILE=dev builds with the dev/test profiles instead of release
# (faster to build on a loaded machine; the tests are the same).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${KILN_GPU_PROFILE:-release}" = dev ]; then rel=(); kiln_bin=target/debug/kiln
else rel=(--release); kiln_bin=target/release/kiln; fi
cargo build "${rel[@]}" --bin kiln
test_bin=$(cargo test "${rel[@]}" -p kiln-runtime --test vulkan_diff --no-run --message-format=json \
  | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "vulkan_diff" and m.get("executable"):
        print(m["executable"])')
mkdir -p benches/gpu/bin
cp "$kiln_bin" benches/gpu/bin/kiln
cp "$test_bin" benches/gpu/bin/vulkan_diff
strip benches/gpu/bin/kiln benches/gpu/bin/vulkan_diff
ls -la benches/gpu/bin
