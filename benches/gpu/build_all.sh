#!/usr/bin/env bash
# Builds, here where Rust is, every x86-64 binary benches/gpu/run_all.sh needs into
# benches/gpu/bin (stripped): `kiln` and the device test binaries (cuda_diff, cuda_optimized,
# vulkan_diff, sanitize, cpu_diff, embed, graph, resident, graph_prop, ranged, fusion_queue_tests, vectors), the
# command-graph benchmark (graph_bench, runtime/examples/graph_bench.rs) and the fusion_queue
# benchmark. KILN_GPU_PROFILE=release builds optimized ones
# (slower to build; the tests are the same).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${KILN_GPU_PROFILE:-dev}" = release ]; then rel=(--release); kiln_bin=target/release/kiln
else rel=(); kiln_bin=target/debug/kiln; fi
cargo build "${rel[@]}" --bin kiln
cargo build "${rel[@]}" -p kiln-runtime --example graph_bench
mkdir -p benches/gpu/bin
cp "$kiln_bin" benches/gpu/bin/kiln
cp "$(dirname "$kiln_bin")/examples/graph_bench" benches/gpu/bin/graph_bench
find_test() { # PACKAGE TEST
  cargo test "${rel[@]}" --all-features -p "$1" --test "$2" --no-run --message-format=json \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == sys.argv[1] and m.get("executable"):
        print(m["executable"])' "$2"
}
for t in cuda_diff cuda_optimized vulkan_diff sanitize cpu_diff graph resident graph_prop ranged; do
  cp "$(find_test kiln-runtime "$t")" "benches/gpu/bin/$t"
done
cp "$(find_test kiln embed)" benches/gpu/bin/embed
cp "$(find_test kiln vectors)" benches/gpu/bin/vectors
# The fusion-queue scenarios (named apart from the benchmark of the same name).
cp "$(find_test kiln-runtime fusion_queue)" benches/gpu/bin/fusion_queue_tests
# The fusion-mode loop benchmark (benches/gpu/fusion_queue.sh runs it), always optimized.
cargo bench -p kiln-runtime --bench fusion_queue --no-run --message-format=json \
  | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "fusion_queue" and m.get("executable"):
        print(m["executable"])' | xargs -I{} cp {} benches/gpu/bin/fusion_queue
# The guarded-chain fusion benchmark (benches/gpu/fusion_queue.sh runs it too).
cargo bench -p kiln-runtime --bench fusion_guarded --no-run --message-format=json \
  | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "fusion_guarded" and m.get("executable"):
        print(m["executable"])' | xargs -I{} cp {} benches/gpu/bin/fusion_guarded
strip benches/gpu/bin/*
ls -la benches/gpu/bin
