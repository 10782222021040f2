//! The generator's kernels are checked once: verified on their own ([`verify_generated`],
//! what [`generate`](super::generate) hands out) or, on the way to a backend, by the `-O`
//! pipeline's verifier ([`optimize_generated`], what
//! [`generate_optimized`](super::generate_optimized) hands out). Verifying the generator's
//! output and then `-O`'s would check the same kernel twice, a fifteenth of the tuned GEMM's
//! generate → `-O` → PTX time.

use kiln_ir::Kernel;

/// Checks a kernel the generator built: a failure is the generator's bug, reported as an
/// internal error naming the kernel and quoting the verifier's first message.
pub(crate) fn verify_generated(k: &Kernel) -> Result<(), String> {
    kiln_ir::verify_kernel(k).map_err(|e| {
        let first = e.first().map(|x| x.to_string()).unwrap_or_default();
        format!("internal error: the generated kernel `{}` does not verify: {first}", k.name())
    })
}

/// A kernel the generator built, not yet verified, through the `-O` pipeline
/// ([`try_optimize`](kiln_passes::pipeline::try_optimize)), whose verifier checks the result:
/// never `-O`'s fallback to its input, which here would be unverified. When the result does
/// not verify, the generator's kernel is verified after all to say whose bug it is: the
/// generator's ([`verify_generated`]'s message) or the pass's that `-O` names. Debug builds
/// (the tests) verify the generator's kernel first as well, so that a generator bug a pass
/// happens to remove still fails there.
pub(crate) fn optimize_generated(k: &Kernel) -> Result<Kernel, String> {
    if cfg!(debug_assertions) {
        verify_generated(k)?;
    }
    kiln_passes::pipeline::try_optimize(k).map_err(|e| match verify_generated(k) {
        Err(generator_bug) => generator_bug,
        Ok(()) => format!("internal error: `-O` broke the generated kernel `{}`: {e}", k.name()),
    })
}

#[cfg(test)]
mod tests {
    use kiln_ir::{AddrSpace, Expr, Kernel, Scalar, Stmt, Type, Var};

    use super::*;

    /// `out[0] = x` with `x` bound nowhere: what a generator bug looks like.
    fn broken() -> Kernel {
        let out = Var::new("out", Type::ptr(AddrSpace::Global, Scalar::I32));
        let x = Var::new("x", Type::I32);
        Kernel::new("gemm_broken", vec![out.clone()], Stmt::store(&out, Expr::i32(0), x.expr()))
    }

    #[test]
    fn a_generator_bug_is_reported_naming_the_kernel_by_both_checks() {
        let k = broken();
        let alone = verify_generated(&k).expect_err("does not verify");
        let optimized = optimize_generated(&k).expect_err("does not verify");
        for e in [alone, optimized] {
            assert!(
                e.starts_with("internal error: the generated kernel `gemm_broken` does not verify"),
                "{e}"
            );
            assert!(e.contains('x'), "{e}");
        }
    }
}
