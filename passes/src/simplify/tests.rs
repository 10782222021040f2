//! The memo's entries for results, and the kept normal forms of regions, change no result.

use super::{forget_kept_runs, simplify_kernel, NORM_ENTRIES, RESULT_ENTRIES};
use crate::util::repository_kernels;

/// `f` run with the memo's entries for results on, and off.
fn both<T>(f: impl FnMut() -> T) -> (T, T) {
    both_with(&RESULT_ENTRIES, f)
}

/// `f` run with `switch` on, and off.
fn both_with<T>(
    switch: &'static std::thread::LocalKey<std::cell::Cell<bool>>,
    mut f: impl FnMut() -> T,
) -> (T, T) {
    let on = f();
    switch.with(|c| c.set(false));
    // Kept e-graph runs are the same either way; forgotten, each side builds its own.
    forget_kept_runs();
    let off = f();
    switch.with(|c| c.set(true));
    (on, off)
}

/// A settled result's memo entry answers what simplifying it again would: the `simplify`
/// pass and the whole `-O` pipeline give the same kernels with and without those entries,
/// on every kernel of the repository and on an unrolled one (whose repeated index
/// expressions meet earlier results).
#[test]
fn result_entries_change_nothing() {
    for (file, k) in &kernels() {
        let (on, off) = both(|| simplify_kernel(k).to_string());
        assert_eq!(on, off, "simplify of {} in {}", k.name(), file.display());
        let (on, off) = both(|| crate::pipeline::optimize(k).to_string());
        assert_eq!(on, off, "-O of {} in {}", k.name(), file.display());
    }
}

/// The normal forms of regions kept for the rest of a simplification answer what
/// normalizing them again would: the `simplify` pass and `-O` give the same kernels with
/// and without them, on every kernel of the repository, an unrolled one, and a generated
/// GEMM's epilogue (whose stores' values hold loads at the stores' own indices).
#[test]
fn kept_normal_forms_change_nothing() {
    for (file, k) in &kernels() {
        let (on, off) = both_with(&NORM_ENTRIES, || simplify_kernel(k).to_string());
        assert_eq!(on, off, "simplify of {} in {}", k.name(), file.display());
        let (on, off) = both_with(&NORM_ENTRIES, || crate::pipeline::optimize(k).to_string());
        assert_eq!(on, off, "-O of {} in {}", k.name(), file.display());
    }
}

/// Every kernel of the repository, an unrolled one and an epilogue's vector stores.
fn kernels() -> Vec<(std::path::PathBuf, kiln_ir::Kernel)> {
    let mut kernels = repository_kernels();
    let unrolled = kiln_ir::parse_module(
        "kernel k(x: ptr<global, f32>, y: ptr<global, f32>, n: i32) {
            let g: i32 = global_id(0) as i32;
            for i: i32 in 0 .. 8 {
                let j: i32 = (g * 8 + i) * 4 + 0 * n;
                y[j - 4 + 4] = x[(j + 1) * 1] + x[j + 2 - 1] * x[2 * (j + 0) - j];
                y[j + 1 + n - n] = x[j * 1 + 2] + x[(j + 1) * 2 - j - 1];
            }
        }",
    )
    .expect("parses")
    .kernels
    .remove(0);
    let unrolled = crate::unroll::unroll(&unrolled);
    kernels.push(("unrolled".into(), unrolled));
    let epilogue = kiln_ir::parse_module(
        "kernel e(c: ptr<global, f32>, alpha: f32, beta: f32, m0: i32, n0: i32) {
            let tx: i32 = local_id(0) as i32;
            let ty: i32 = local_id(1) as i32;
            vstore(c, (m0 + ty * 4) * 64 + (n0 + tx * 4), f32x4(alpha) * f32x4(1.0, 2.0, 3.0, 4.0) + f32x4(beta) * vload4(c, (m0 + ty * 4) * 64 + (n0 + tx * 4)));
            vstore(c, (m0 + (ty * 4 + 1)) * 64 + (n0 + (tx * 4 + 32)), f32x4(alpha) * f32x4(5.0, 6.0, 7.0, 8.0) + f32x4(beta) * vload4(c, (m0 + (ty * 4 + 1)) * 64 + (n0 + (tx * 4 + 32))));
            c[(m0 + ty * 4) * 64 + (n0 + tx * 4) * 1 + 0] = c[(m0 + ty * 4) * 64 + n0 + tx * 4] * 2.0;
        }",
    )
    .expect("parses")
    .kernels
    .remove(0);
    kernels.push(("epilogue".into(), epilogue));
    assert!(kernels.len() > 50, "{} kernels", kernels.len());
    kernels
}
