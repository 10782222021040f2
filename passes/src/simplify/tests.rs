//! The memo's entries for results change no result.

use super::{forget_kept_runs, simplify_kernel, RESULT_ENTRIES};
use crate::util::repository_kernels;

/// `f` run with the memo's entries for results on, and off.
fn both<T>(mut f: impl FnMut() -> T) -> (T, T) {
    let on = f();
    RESULT_ENTRIES.with(|c| c.set(false));
    // Kept e-graph runs are the same either way; forgotten, each side builds its own.
    forget_kept_runs();
    let off = f();
    RESULT_ENTRIES.with(|c| c.set(true));
    (on, off)
}

/// A settled result's memo entry answers what simplifying it again would: the `simplify`
/// pass and the whole `-O` pipeline give the same kernels with and without those entries,
/// on every kernel of the repository and on an unrolled one (whose repeated index
/// expressions meet earlier results).
#[test]
fn result_entries_change_nothing() {
    let mut kernels = repository_kernels();
    assert!(kernels.len() > 50, "{} kernels", kernels.len());
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
    for (file, k) in &kernels {
        let (on, off) = both(|| simplify_kernel(k).to_string());
        assert_eq!(on, off, "simplify of {} in {}", k.name(), file.display());
        let (on, off) = both(|| crate::pipeline::optimize(k).to_string());
        assert_eq!(on, off, "-O of {} in {}", k.name(), file.display());
    }
}
