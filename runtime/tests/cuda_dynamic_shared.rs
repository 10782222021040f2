//! Kernels whose local arrays need dynamic shared memory (past 48 KiB; the PTX backend puts
//! them in one `.extern` window) are refused by the CUDA device's build by name: its launch
//! passes no dynamic shared memory. Needs no GPU (`build_ptx_program` is the device's build).

use kiln_backends::options::BuildOptions;
use kiln_ir::{parse_module, Verified};
use kiln_runtime::device::cuda::build_ptx_program;

fn verified(src: &str) -> Verified {
    Verified::new(parse_module(src).unwrap()).unwrap()
}

#[test]
fn dynamic_shared_memory_kernels_are_refused_by_name() {
    let big = verified(
        "kernel big(o: ptr<global, f32>) { local t: f32[16384]; t[0] = 1.0; barrier(local); \
         o[0] = t[16383]; }",
    );
    let e = build_ptx_program(&big, &BuildOptions::default(), 90).unwrap_err().to_string();
    assert!(
        e.contains("`big`") && e.contains("65536") && e.contains("dynamic shared memory"),
        "{e}"
    );
    // At the static limit it builds.
    let fits = verified(
        "kernel fits(o: ptr<global, f32>) { local t: f32[12288]; t[0] = 1.0; barrier(local); \
         o[0] = t[12287]; }",
    );
    build_ptx_program(&fits, &BuildOptions::default(), 90).unwrap();
}
