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

/// Runs `src` on `range` with buffers `a` (iota), `d` (zeros, `dn` elements) and `o`; every
/// way must give the interpreter's error, which must be in work-item 0 and contain `what`.
fn lanes_case(src: &str, n: u32, dn: usize, what: &str) {
    let k = kernel(src);
    let bufs = [u32s(n as usize), Buffer::from_slice(&vec![0u32; dn]), u32s(4 * n as usize)];
    let e = agrees(&k, &NdRange::new(&[n]), &bufs, false);
    assert_eq!(e.work_item, Some([0, 0, 0]), "{e:?}");
    assert!(e.message.contains(what), "{e:?} does not name {what}");
}

#[test]
fn an_operand_is_evaluated_before_a_later_operands_vector_load() {
    // Vector lowering binds `vload4(d, ..)` to a `let` ahead of the statement; `a[i + 8]`,
    // evaluated first by the interpreter, must be bound ahead of it.
    lanes_case(
        "kernel k(a: ptr<global, u32>, d: ptr<global, u32>, o: ptr<global, u32>) {
           let i: u32 = global_id(0);
           o[i] = a[i + 8u32] + extract(vload4(d, i * 4u32), 0);
         }",
        8,
        2,
        "`a[8]`",
    );
    // The same in a loop's bounds: `lo` before `hi`.
    lanes_case(
        "kernel k(a: ptr<global, u32>, d: ptr<global, u32>, o: ptr<global, u32>) {
           let i: u32 = global_id(0);
           for j: u32 in a[i + 8u32] .. extract(vload4(d, i * 4u32), 1) {
             o[i] = j;
           }
         }",
        8,
        2,
        "`a[8]`",
    );
    // And in a vector's lanes: `a[i + 8]` is the first lane.
    lanes_case(
        "kernel k(a: ptr<global, u32>, d: ptr<global, u32>, o: ptr<global, u32>) {
           let i: u32 = global_id(0);
           vstore(o, i * 4u32, u32x4(a[i + 8u32], 1u32, extract(vload4(d, i * 4u32), 1), 2u32));
         }",
        8,
        2,
        "`a[8]`",
    );
}

#[test]
fn a_lane_that_is_not_read_still_faults() {
    // The interpreter divides every lane; the lowering keeps only the lane read, so the
    // others are bound to `let`s for their faults.
    lanes_case(
        "kernel k(a: ptr<global, u32>, d: ptr<global, u32>, o: ptr<global, u32>) {
           let i: u32 = global_id(0);
           o[i] = extract(u32x4(a[i], a[i], a[i], a[i]) / u32x4(1u32, 1u32, 1u32, d[i]), 0);
         }",
        8,
        8,
        "division by zero",
    );
    // A lane that `insert` replaces is computed too.
    lanes_case(
        "kernel k(a: ptr<global, u32>, d: ptr<global, u32>, o: ptr<global, u32>) {
           let i: u32 = global_id(0);
           vstore(o, i * 4u32, insert(u32x4(a[i] / d[i], 1u32, 2u32, 3u32), 0, 5u32));
         }",
        8,
        8,
        "division by zero in `a[i] / d[i]`",
    );
}

#[test]
fn a_vector_operand_is_computed_whole_before_the_next() {
    // Lane 2 of the first division and lane 1 of the second fault: the interpreter divides
    // the first vector whole first, so the first division is named.
    let first = "in a lane of `u32x4(a[i]) / u32x4(1, 1, d[i], 1)`";
    lanes_case(
        "kernel k(a: ptr<global, u32>, d: ptr<global, u32>, o: ptr<global, u32>) {
           let i: u32 = global_id(0);
           vstore(o, i * 4u32, (u32x4(a[i]) / u32x4(1u32, 1u32, d[i], 1u32)) + (u32x4(7u32) / u32x4(1u32, d[i], 1u32, 1u32)));
         }",
        8,
        8,
        first,
    );
    // The same through an intrinsic's operands and a mask's select.
    lanes_case(
        "kernel k(a: ptr<global, u32>, d: ptr<global, u32>, o: ptr<global, u32>) {
           let i: u32 = global_id(0);
           vstore(o, i * 4u32, min(u32x4(a[i]) / u32x4(1u32, 1u32, d[i], 1u32), u32x4(7u32) / u32x4(1u32, d[i], 1u32, 1u32)));
         }",
        8,
        8,
        first,
    );
    lanes_case(
        "kernel k(a: ptr<global, u32>, d: ptr<global, u32>, o: ptr<global, u32>) {
           let i: u32 = global_id(0);
           vstore(o, i * 4u32, select(u32x4(a[i]) / u32x4(1u32, 1u32, d[i], 1u32) < u32x4(3u32), u32x4(1u32), u32x4(7u32) / u32x4(1u32, d[i], 1u32, 1u32)));
         }",
        8,
        8,
        first,
    );
}

#[test]
fn a_while_condition_keeps_its_lanes_faults() {
    // The condition's unread lanes fault before the loop's first iteration, and again
    // after an iteration (`j` grows until `d[j]` is past the buffer).
    lanes_case(
        "kernel k(a: ptr<global, u32>, d: ptr<global, u32>, o: ptr<global, u32>) {
           let i: u32 = global_id(0);
           var j: u32 = i;
           while extract(u32x4(a[i], a[i], a[i], a[i]) / u32x4(1u32, 1u32, 1u32, d[i]), 0) > 5u32 {
             j = j + 1u32;
           }
           o[i] = j;
         }",
        8,
        8,
        "division by zero",
    );
    lanes_case(
        "kernel k(a: ptr<global, u32>, d: ptr<global, u32>, o: ptr<global, u32>) {
           let i: u32 = global_id(0);
           var j: u32 = i * 4u32;
           while extract(vload4(d, j), 0) == 0u32 {
             j = j + 4u32;
           }
           o[i] = j;
         }",
        8,
        40,
        "vector load `d[",
    );
}
