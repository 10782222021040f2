#!/usr/bin/env bash
# Builds, here where Rust is, what benches/gpu/launch_run.sh needs into benches/gpu/bin
# (stripped): the launch-overhead benchmark (runtime/benches/launch.rs, optimized) as
# `launch_bench`, the hand-recorded Vulkan chain (runtime/benches/vk_chain_ref.rs: the
# driver's own cost per dependent dispatch) as `vk_chain_ref`, and the eager-launch tests (runtime/tests/vulkan_launch.rs) as
# `vulkan_launch`.
set -euo pipefail
cd "$(dirname "$0")/../.."
exe() { # the executable of the artifact named $1 in cargo's JSON messages on stdin
  python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == sys.argv[1] and m.get("executable"):
        print(m["executable"])' "$1"
}
mkdir -p benches/gpu/bin
cp "$(cargo bench -p kiln-runtime --bench launch --no-run --message-format=json | exe launch)" \
  benches/gpu/bin/launch_bench
cp "$(cargo bench -p kiln-runtime --bench vk_chain_ref --no-run --message-format=json | exe vk_chain_ref)" \
  benches/gpu/bin/vk_chain_ref
cp "$(cargo test -p kiln-runtime --test vulkan_launch --no-run --message-format=json | exe vulkan_launch)" \
  benches/gpu/bin/vulkan_launch
strip benches/gpu/bin/launch_bench benches/gpu/bin/vk_chain_ref benches/gpu/bin/vulkan_launch
ls -la benches/gpu/bin/launch_bench benches/gpu/bin/vk_chain_ref benches/gpu/bin/vulkan_launch
