#!/usr/bin/env bash
# Builds the x86-64 binaries benches/gpu/run.sh needs into benches/gpu/bin (stripped), here,
# where the Rust toolchain is; carry that folder to the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --bin kiln
test_bin=$(cargo test --release -p kiln-runtime --test cuda_diff --no-run --message-format=json \
  | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "cuda_diff" and m.get("executable"):
        print(m["executable"])')
mkdir -p benches/gpu/bin
cp target/release/kiln benches/gpu/bin/kiln
cp "$test_bin" benches/gpu/bin/cuda_diff
strip benches/gpu/bin/kiln benches/gpu/bin/cuda_diff
ls -la benches/gpu/bin
