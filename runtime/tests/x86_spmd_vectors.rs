//! Vector values (`f32x4`, `vload4`, `vstore`, `extract`) in the x86 8-lane code: kernels
//! written as OpenCL users write them (guards over ranges rounded up, odd sizes, loops,
//! local memory with barriers, uniform and per-lane indices, every element width) give the
//! interpreter's results, and its errors word for word: the first element out of bounds, a
//! misaligned index, the last lane out of bounds, in work-item order.

mod x86_common;

use x86_common::{avx2, fallback, kernel, three_ways};

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{Imm, Scalar};
use proptest::prelude::*;

/// Runs `src` three ways for every (global size, group size, `n`, `off`) and element
/// count of the buffers, requiring the 8-lane code where AVX2 is there; returns the
/// interpreter's errors.
fn cases(src: &str, ty: Scalar, lens: &[usize], runs: &[(u32, u32, u32, u32)]) -> Vec<String> {
    let k = kernel(src);
    assert_eq!(fallback(&k), None, "{k}");
    let mut errors = Vec::new();
    for &len in lens {
        let bufs = vec![iota(ty, len, 1), Buffer::zeroed(ty, len)];
        for &(global, group, n, off) in runs {
            let range = NdRange::new(&[global]).with_local(&[group]);
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n), Arg::scalar(off)];
            assert_eq!(three_ways(&k, &range, &args, &bufs), avx2(), "{k}");
            if let Err(e) = kiln_ir::interp::run(&k, &range, &args, &mut bufs.clone()) {
                errors.push(e.to_string());
            }
        }
    }
    errors
}

/// `len` elements of type `ty`: 1, 2, 3, ... times `step` (wrapping in narrow types).
fn iota(ty: Scalar, len: usize, step: u32) -> Buffer {
    let mut b = Buffer::zeroed(ty, len);
    for i in 0..len {
        let v = (i as u32 + 1).wrapping_mul(step);
        let x = if ty.is_float() {
            Imm::float(ty, f64::from(v) * 0.5)
        } else if ty.is_signed() {
            Imm::int(ty, i128::from(v) - i128::from(step) * (len as i128) / 2)
        } else {
            Imm::int(ty, i128::from(v))
        };
        b.set(i, x).expect("an element of the buffer's type");
    }
    b
}

/// Guarded elementwise work on four elements per work-item, the range rounded up: loads,
/// lane arithmetic, `extract` in an index and a value, and stores, for every width and
/// element type the 8-lane code keeps in lanes.
#[test]
fn guarded_vector_elementwise_kernels_agree() {
    let runs = [(16, 8, 64, 0), (16, 8, 61, 0), (24, 8, 50, 0), (8, 8, 3, 0), (40, 8, 128, 0)];
    for (ty, lit) in [("f32", "2.0"), ("u32", "2u32"), ("i32", "2")] {
        let src = format!(
            "kernel k(x: ptr<global, {ty}>, o: ptr<global, {ty}>, n: u32, off: u32) {{
               let i: u32 = global_id(0);
               if i * 4u32 + 3u32 < n {{
                 let v: {ty}x4 = vload4(x, i * 4u32);
                 let w: {ty}x4 = v * {ty}x4({lit}) + {ty}x4(extract(v, 3));
                 vstore(o, i * 4u32, w);
               }}
             }}"
        );
        let scalar = Scalar::from_name(ty).expect("a scalar type");
        cases(&src, scalar, &[64, 128, 160], &runs);
    }
    // Two lanes of u32 and eight of f32, the stored value a loaded vector itself.
    let src = "kernel k(x: ptr<global, u32>, o: ptr<global, u32>, n: u32, off: u32) {
                 let i: u32 = global_id(0);
                 if i < n {
                   let v: u32x2 = vload2(x, i * 2u32);
                   vstore(o, i * 2u32, u32x2(extract(v, 1), extract(v, 0) ^ i));
                 }
               }";
    cases(src, Scalar::U32, &[64, 130], &[(32, 8, 32, 0), (40, 8, 33, 0)]);
    let src = "kernel k(x: ptr<global, f32>, o: ptr<global, f32>, n: u32, off: u32) {
                 let i: u32 = global_id(0);
                 if i < n {
                   let v: f32x8 = vload8(x, i * 8u32);
                   vstore(o, i * 8u32, v);
                 }
               }";
    cases(src, Scalar::F32, &[256, 200], &[(32, 8, 32, 0), (32, 8, 25, 0)]);
}

/// The interpreter's errors, word for word: no guard, so some work-item's access starts
/// past the end, ends past it (the length not a multiple of 4), or starts at a misaligned
/// index (`off`); loads and stores; the lowest faulting work-item is the one reported,
/// whichever of its checks fails.
#[test]
fn vector_access_faults_are_the_interpreters() {
    let runs = [(16, 8, 0, 0), (16, 8, 0, 1), (16, 8, 0, 2), (16, 8, 0, 4), (24, 8, 0, 0)];
    let load = "kernel k(x: ptr<global, f32>, o: ptr<global, f32>, n: u32, off: u32) {
                  let i: u32 = global_id(0);
                  let v: f32x4 = vload4(x, i * 4u32 + off);
                  o[i] = extract(v, 0) + extract(v, 2);
                }";
    let errors = cases(load, Scalar::F32, &[64, 62, 65, 20], &runs);
    for want in ["vector load `x[", "out of bounds", "misaligned vector load"] {
        assert!(errors.iter().any(|e| e.contains(want)), "no error with {want:?}: {errors:?}");
    }
    let store = "kernel k(x: ptr<global, f32>, o: ptr<global, f32>, n: u32, off: u32) {
                   let i: u32 = global_id(0);
                   vstore(o, i * 4u32 + off, f32x4(x[i], 1.0, 2.0, x[i] * 3.0));
                 }";
    let errors = cases(store, Scalar::F32, &[64, 62, 65, 20], &runs);
    for want in ["vector store `o[", "out of bounds", "misaligned vector store"] {
        assert!(errors.iter().any(|e| e.contains(want)), "no error with {want:?}: {errors:?}");
    }
    // An i32 index below zero, and a misaligned one only in some lanes.
    let signed = "kernel k(x: ptr<global, i32>, o: ptr<global, i32>, n: u32, off: u32) {
                    let i: i32 = global_id(0) as i32;
                    let j: i32 = (i - 2) * 4 + select(i == 5, 2, 0);
                    let v: i32x4 = vload4(x, j);
                    vstore(o, i * 4, v + i32x4(extract(v, 3)));
                  }";
    let errors = cases(signed, Scalar::I32, &[64, 32], &[(16, 8, 0, 0), (8, 8, 0, 0)]);
    assert!(errors.iter().any(|e| e.contains("x[-8]")), "{errors:?}");
}

/// Vectors in loops (uniform and per-lane trip counts), under divergent control, with a
/// uniform index (every lane the same vector), and in local memory across barriers.
#[test]
fn vectors_in_loops_branches_and_local_memory_agree() {
    let looped = "kernel k(x: ptr<global, f32>, o: ptr<global, f32>, n: u32, off: u32) {
                    let i: u32 = global_id(0);
                    var acc: f32 = 0.0;
                    for j: u32 in 0u32 .. (i & 3u32) + n {
                      let v: f32x4 = vload4(x, j * 4u32);
                      let w: f32x4 = vload4(x, 0u32);
                      acc = acc + extract(v, 0) * extract(w, 1) + extract(v, 3);
                    }
                    if i % 3u32 == 0u32 {
                      vstore(o, i * 4u32, f32x4(acc, acc + 1.0, extract(vload4(x, 4u32), 2), acc));
                    }
                  }";
    cases(looped, Scalar::F32, &[64, 22], &[(16, 8, 1, 0), (16, 8, 3, 0), (13, 13, 2, 0)]);
    let local = include_str!("../../tests/filetests/passes/vectors_slm_buffer.kir");
    let k = kernel(local);
    assert_eq!(fallback(&k), None, "{k}");
    for (global, group) in [(4, 4), (8, 4)] {
        let bufs = vec![iota(Scalar::F32, 64, 3), Buffer::zeroed(Scalar::F32, 32)];
        let range = NdRange::new(&[global]).with_local(&[group]);
        assert_eq!(three_ways(&k, &range, &[Arg::Buffer(0), Arg::Buffer(1)], &bufs), avx2());
    }
    let triple = include_str!("../../tests/filetests/passes/slm_triple_buffer.kir");
    let k = kernel(triple);
    assert_eq!(fallback(&k), None, "{k}");
    let bufs = vec![iota(Scalar::F32, 256, 7), Buffer::zeroed(Scalar::F32, 64)];
    for (global, group) in [(4, 4), (16, 4)] {
        let range = NdRange::new(&[global]).with_local(&[group]);
        three_ways(&k, &range, &[Arg::Buffer(0), Arg::Buffer(1)], &bufs);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Random strides, offsets, lane counts, lengths and ranges: results or errors as the
    /// interpreter's.
    #[test]
    fn random_vector_accesses_agree(
        lanes in prop::sample::select(vec![2u8, 4, 8]),
        stride in 0u32..3,
        off in 0u32..9,
        len in 1usize..90,
        global in 1u32..40,
        guard in any::<bool>(),
    ) {
        let g = if guard { "i * 3u32 < n" } else { "true" };
        let idx = format!("i * {}u32 + off", stride * u32::from(lanes));
        let src = format!(
            "kernel k(x: ptr<global, u32>, o: ptr<global, u32>, n: u32, off: u32) {{
               let i: u32 = global_id(0);
               if {g} {{
                 let v: u32x{lanes} = vload{lanes}(x, {idx});
                 vstore(o, {idx} + off % 2u32, v + u32x{lanes}(extract(v, 1) * i));
               }}
             }}"
        );
        let k = kernel(&src);
        let bufs = vec![iota(Scalar::U32, len, 5), Buffer::zeroed(Scalar::U32, len)];
        let range = NdRange::new(&[global]).with_local(&[global]);
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(len as u32), Arg::scalar(off)];
        prop_assert_eq!(three_ways(&k, &range, &args, &bufs), avx2());
    }
}
