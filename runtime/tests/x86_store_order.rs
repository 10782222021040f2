//! A store evaluates its index before its value, and checks the index's bounds after both
//! (the interpreter's order, `ir/src/interp/exec.rs`): where the index and the value of a
//! work-item both fault, the x86 code (scalar and 8-lane, `-O` or not) must name the
//! index's fault, as the interpreter does. Each case compares the whole error with the
//! interpreter's: global, local, private, 8-bit and f64 stores, under divergence, in
//! region code (kernels with barriers) and atomics.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{avx2, kernel};

use kiln_backends::x86::{compile, X86Options};
use kiln_ir::interp::run;
use kiln_ir::launch::{Arg, Buffer, LaunchError, NdRange};
use kiln_ir::Kernel;
use kiln_runtime::device::cpu::CpuRun;

/// Runs `k` on the interpreter and on x86 in all four ways (scalar or 8-lane, optimized
/// or not); every run must fail with the interpreter's error, which is returned. With
/// `spmd`, the 8-lane ways must have compiled to 8-lane code (no scalar fallback that
/// would make the comparison vacuous).
fn agrees(k: &Kernel, range: &NdRange, bufs: &[Buffer], spmd: bool) -> LaunchError {
    let args: Vec<Arg> = (0..bufs.len()).map(Arg::Buffer).collect();
    let want = run(k, range, &args, &mut bufs.to_vec()).expect_err("the case must fail");
    for optimize in [false, true] {
        for scalar in [true, false] {
            let opts = X86Options { optimize, scalar, ..X86Options::default() };
            let p = compile(k, &opts).unwrap_or_else(|e| panic!("{e}\n{k}"));
            if spmd && !scalar && avx2() {
                assert!(p.has_spmd(), "no 8-lane code (optimize {optimize}):\n{k}");
            }
            let got = p.run(range, &args, &mut bufs.to_vec());
            assert_eq!(got, Err(want.clone()), "optimize {optimize}, scalar {scalar}:\n{k}");
        }
    }
    want
}

fn i32s(n: usize) -> Buffer {
    Buffer::from_slice(&(0..n as i32).collect::<Vec<_>>())
}

fn u32s(n: usize) -> Buffer {
    Buffer::from_slice(&(0..n as u32).collect::<Vec<_>>())
}

/// Both faults in the work-item `at`, the index's named.
fn index_named(e: &LaunchError, at: u32, what: &str) {
    assert_eq!(e.work_item, Some([at, 0, 0]), "{e:?}");
    assert!(e.message.contains(what), "{e:?} names no {what}");
}

#[test]
fn a_global_store_whose_index_and_value_fault_names_the_index() {
    // The report's case: `xu[8]` and `x[8]` both fault in work-item 7.
    let k = kernel(
        "kernel k(x: ptr<global, i32>, xu: ptr<global, u32>, o: ptr<global, i32>) {
           let i: u32 = global_id(0);
           o[xu[i + 1u32] & 7u32] = x[i + 1u32];
         }",
    );
    let e = agrees(&k, &NdRange::new(&[8]), &[i32s(8), u32s(8), i32s(8)], true);
    index_named(&e, 7, "`xu[8]`");
    // A longer launch: the fault in a later batch's last lane.
    let e = agrees(&k, &NdRange::new(&[24]), &[i32s(24), u32s(24), i32s(8)], true);
    index_named(&e, 23, "`xu[24]`");
}

#[test]
fn a_division_in_the_value_comes_after_the_index_load() {
    let k = kernel(
        "kernel k(x: ptr<global, i32>, xu: ptr<global, u32>, o: ptr<global, i32>) {
           let i: u32 = global_id(0);
           o[xu[i + 3u32] % 8u32] = x[i] / x[(i + 4u32) % 8u32];
         }",
    );
    // Work-item 4 divides by x[0] = 0 and loads xu[7]; 5 loads xu[8] and divides by x[1].
    let e = agrees(&k, &NdRange::new(&[8]), &[i32s(8), u32s(8), i32s(8)], true);
    index_named(&e, 4, "division by zero");
    let k = kernel(
        "kernel k(x: ptr<global, i32>, xu: ptr<global, u32>, o: ptr<global, i32>) {
           let i: u32 = global_id(0);
           o[xu[i + 1u32] % 8u32] = x[i] / x[(i + 1u32) % 8u32];
         }",
    );
    // Work-item 7: `xu[8]` before `x[7] / x[0]`.
    let e = agrees(&k, &NdRange::new(&[8]), &[i32s(8), u32s(8), i32s(8)], true);
    index_named(&e, 7, "`xu[8]`");
}

#[test]
fn an_out_of_bounds_index_is_checked_after_the_value() {
    // The index itself is in no fault, but out of bounds: the value's fault comes first.
    let k = kernel(
        "kernel k(x: ptr<global, i32>, xu: ptr<global, u32>, o: ptr<global, i32>) {
           let i: u32 = global_id(0);
           o[xu[i] * 2u32] = x[i + 1u32];
         }",
    );
    let e = agrees(&k, &NdRange::new(&[8]), &[i32s(8), u32s(8), i32s(8)], true);
    assert_eq!(e.work_item, Some([4, 0, 0]), "{e:?}");
    assert!(e.message.contains("store"), "{e:?}");
    let e = agrees(&k, &NdRange::new(&[8]), &[i32s(8), u32s(8), i32s(16)], true);
    index_named(&e, 7, "`x[8]`");
}

#[test]
fn under_divergence_the_index_is_named() {
    let k = kernel(
        "kernel k(x: ptr<global, i32>, xu: ptr<global, u32>, o: ptr<global, i32>) {
           let i: u32 = global_id(0);
           if (i & 1u32) == 1u32 {
             o[xu[i + 1u32] & 7u32] = x[i + 2u32];
           } else {
             o[i & 7u32] = 1;
           }
         }",
    );
    let e = agrees(&k, &NdRange::new(&[8]), &[i32s(8), u32s(8), i32s(8)], true);
    index_named(&e, 7, "`xu[8]`");
    // Work-item 7 faults in both; 5 only in its value, first.
    let e = agrees(&k, &NdRange::new(&[8]), &[i32s(7), u32s(8), i32s(8)], true);
    index_named(&e, 5, "`x[7]`");
}

#[test]
fn a_uniform_index_that_faults_is_named() {
    // A uniform index (a load at a group value) and a lane value that faults.
    let k = kernel(
        "kernel k(x: ptr<global, i32>, xu: ptr<global, u32>, o: ptr<global, i32>) {
           let i: u32 = global_id(0);
           o[xu[group_id(0) + 1u32] & 7u32] = x[i + 1u32];
         }",
    );
    let e = agrees(&k, &NdRange::new(&[16]).with_local(&[8]), &[i32s(9), u32s(2), i32s(8)], true);
    index_named(&e, 8, "`xu[2]`");
}

#[test]
fn local_and_private_stores_name_the_index() {
    let k = kernel(
        "kernel k(x: ptr<global, i32>, xu: ptr<global, u32>, o: ptr<global, i32>) {
           local t: i32[8];
           let i: u32 = global_id(0);
           t[xu[i + 1u32] & 7u32] = x[i + 1u32];
           o[i] = t[i & 7u32];
         }",
    );
    let e = agrees(&k, &NdRange::new(&[8]).with_local(&[8]), &[i32s(8), u32s(8), i32s(8)], true);
    index_named(&e, 7, "`xu[8]`");
    let k = kernel(
        "kernel k(x: ptr<global, i32>, xu: ptr<global, u32>, o: ptr<global, i32>) {
           private p: i32[4];
           let i: u32 = global_id(0);
           p[xu[i + 1u32] & 3u32] = x[i + 1u32];
           o[i] = p[i & 3u32];
         }",
    );
    let e = agrees(&k, &NdRange::new(&[8]), &[i32s(8), u32s(8), i32s(8)], true);
    index_named(&e, 7, "`xu[8]`");
}

#[test]
fn narrow_and_f64_stores_name_the_index() {
    let k = kernel(
        "kernel k(x: ptr<global, u8>, xu: ptr<global, u32>, o: ptr<global, u8>) {
           let i: u32 = global_id(0);
           o[xu[i + 1u32] & 7u32] = x[i + 1u32];
         }",
    );
    let bytes = Buffer::from_slice(&[1u8; 8]);
    let e = agrees(&k, &NdRange::new(&[8]), &[bytes.clone(), u32s(8), bytes], true);
    index_named(&e, 7, "`xu[8]`");
    let k = kernel(
        "kernel k(x: ptr<global, f64>, xu: ptr<global, u32>, o: ptr<global, f64>) {
           let i: u32 = global_id(0);
           o[xu[i + 1u32] & 7u32] = x[i + 1u32] * 2.0f64;
         }",
    );
    let f = Buffer::from_slice(&[1.5f64; 8]);
    let e = agrees(&k, &NdRange::new(&[8]), &[f.clone(), u32s(8), f], true);
    index_named(&e, 7, "`xu[8]`");
}

#[test]
fn region_code_names_the_index() {
    // A barrier kernel: the store between barriers, to a local array and a buffer.
    let k = kernel(
        "kernel k(x: ptr<global, i32>, xu: ptr<global, u32>, o: ptr<global, i32>) {
           local t: i32[8];
           let l: u32 = local_id(0);
           t[l] = x[l];
           barrier(local);
           t[xu[global_id(0) + 1u32] & 7u32] = x[global_id(0) + 1u32];
           barrier(local);
           o[xu[global_id(0) + 2u32] & 7u32] = t[(l + 1u32) & 7u32] + x[global_id(0) + 2u32];
         }",
    );
    let e =
        agrees(&k, &NdRange::new(&[16]).with_local(&[8]), &[i32s(16), u32s(16), i32s(8)], false);
    index_named(&e, 15, "`xu[16]`");
    // Work-item 14 of the shorter buffers: `xu[15]` before `x[15]`.
    let e =
        agrees(&k, &NdRange::new(&[16]).with_local(&[8]), &[i32s(15), u32s(15), i32s(8)], false);
    index_named(&e, 14, "`xu[15]`");
}

#[test]
fn atomics_name_the_index() {
    let k = kernel(
        "kernel k(x: ptr<global, i32>, xu: ptr<global, u32>, o: ptr<global, i32>) {
           let i: u32 = global_id(0);
           atomic_add(o, xu[i + 1u32] & 7u32, x[i + 1u32]);
         }",
    );
    let e = agrees(&k, &NdRange::new(&[8]), &[i32s(8), u32s(8), i32s(8)], false);
    index_named(&e, 7, "`xu[8]`");
}

#[test]
fn a_vector_store_evaluates_its_index_before_its_value() {
    // Vector lowering binds the value's lanes (here a vector load) to `let`s ahead of the
    // store: the index, which may fault, must be bound ahead of them. Work-item 6 loads
    // `xu[7]` (index) and `x[8..12]` (value); the index's fault is the one reported.
    let k = kernel(
        "kernel k(x: ptr<global, u32>, xu: ptr<global, u32>, o: ptr<global, u32>) {
           let i: u32 = global_id(0);
           vstore(o, (xu[i + 1u32] & 1u32) * 4u32, vload4(x, i / 6u32 * 8u32));
         }",
    );
    let e = agrees(&k, &NdRange::new(&[8]), &[u32s(8), u32s(7), u32s(8)], false);
    index_named(&e, 6, "`xu[7]`");
    // A broadcast of a load (bound to a `let` too) in the value.
    let k = kernel(
        "kernel k(x: ptr<global, u32>, xu: ptr<global, u32>, o: ptr<global, u32>) {
           let i: u32 = global_id(0);
           vstore(o, (xu[i + 1u32] & 1u32) * 4u32, u32x4(x[i + 2u32]) + u32x4(1u32, 2u32, 3u32, 4u32));
         }",
    );
    let e = agrees(&k, &NdRange::new(&[8]), &[u32s(8), u32s(7), u32s(8)], false);
    index_named(&e, 6, "`xu[7]`");
}

#[test]
fn a_scalar_store_of_a_loaded_lane_evaluates_its_index_first() {
    // The lane read lowers to a `let` of the vector load ahead of the store.
    let k = kernel(
        "kernel k(x: ptr<global, u32>, xu: ptr<global, u32>, o: ptr<global, u32>) {
           let i: u32 = global_id(0);
           o[xu[i + 1u32] & 7u32] = extract(vload4(x, i / 6u32 * 8u32), 1);
         }",
    );
    let e = agrees(&k, &NdRange::new(&[8]), &[u32s(8), u32s(7), u32s(8)], false);
    index_named(&e, 6, "`xu[7]`");
    // An atomic's index, before a lane of a loaded vector.
    let k = kernel(
        "kernel k(x: ptr<global, u32>, xu: ptr<global, u32>, o: ptr<global, u32>) {
           let i: u32 = global_id(0);
           atomic_add(o, xu[i + 1u32] & 7u32, extract(vload4(x, i / 6u32 * 8u32), 2));
         }",
    );
    let e = agrees(&k, &NdRange::new(&[8]), &[u32s(8), u32s(7), u32s(8)], false);
    index_named(&e, 6, "`xu[7]`");
}
