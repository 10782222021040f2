//! The build driver: the one path from a module to a target's output, shared by the CLI and
//! every device.
//!
//! A build verifies the module once ([`Verified::new`]), applies the bounds sanitizer's
//! rewrite when the options ask for it and the target wants it, runs the `-O` pipeline unless
//! the options say `-O0` or the target runs kernels as written, and emits. What each step
//! refuses comes back as one [`BackendError`].
//!
//! ```
//! use kiln_backends::driver::build;
//! use kiln_backends::options::BuildOptions;
//! use kiln_backends::ptx::{Options, Ptx};
//! let m = kiln_ir::parse_module("kernel k(x: ptr<global, u32>) { x[0] = 2 + 3; }").unwrap();
//! let built = build(&Ptx(Options::sm(80)), &m, &BuildOptions::parse("-O").unwrap()).unwrap();
//! assert!(built.output.contains("st.global.u32"));
//! assert!(built.sanitized.is_none());
//! ```

use kiln_ir::{Kernel, Module, Verified};
use kiln_passes::sanitize::{sanitize_kernel, Sanitized};
use kiln_passes::vectors::{lower_vectors, VectorLowering};

use crate::options::BuildOptions;
use crate::target::{BackendError, ErrorKind, Lowering, Target};

/// What a build made: the target's output, the kernels it was emitted from, and the
/// sanitizer's tables when the bounds sanitizer rewrote them.
#[derive(Clone, Debug)]
pub struct Built<O> {
    /// The target's output.
    pub output: O,
    /// The kernels as emitted (sanitized and optimized as the build asked).
    pub kernels: Verified,
    /// One entry per kernel, in module order, when `-fsanitize=bounds` rewrote them: what
    /// the hidden parameters are and how to read a violation back.
    pub sanitized: Option<Vec<Sanitized>>,
}

/// Builds `module` for `target` under `options`.
pub fn build<T: Target + ?Sized>(
    target: &T,
    module: &Module,
    options: &BuildOptions,
) -> Result<Built<T::Output>, BackendError> {
    let name = target.name();
    let verified =
        Verified::new(module.clone()).map_err(|errs| BackendError::ill_formed(&name, &errs))?;
    build_verified(target, verified, options)
}

/// [`build`] of a module that is verified already.
pub fn build_verified<T: Target + ?Sized>(
    target: &T,
    module: Verified,
    options: &BuildOptions,
) -> Result<Built<T::Output>, BackendError> {
    let name = target.name();
    let (kernels, sanitized) = lower(&name, target.lowering(), module, options)?;
    let output = target.emit(&kernels)?;
    Ok(Built { output, kernels, sanitized })
}

/// The steps before emission: the sanitizer's rewrite and the `-O` pipeline, as `lowering`
/// and `options` ask; `target` names the target in errors.
pub fn lower(
    target: &str,
    lowering: Lowering,
    module: Verified,
    options: &BuildOptions,
) -> Result<(Verified, Option<Vec<Sanitized>>), BackendError> {
    let (module, sanitized) = if lowering.sanitize && options.sanitize_bounds {
        let (m, s) = sanitize(&module);
        (m, Some(s))
    } else {
        (module, None)
    };
    // The target's vector support decides, not the options: a target cannot emit vectors
    // it does not lower.
    let module = if lowering.vectors != VectorLowering::Native
        && module.kernels.iter().any(kiln_passes::vectors::uses_vectors)
    {
        let kernels = module.kernels.iter().map(|k| lower_vectors(k, lowering.vectors)).collect();
        Verified::from_pass_output(Module::new(kernels))
    } else {
        module
    };
    if !(lowering.optimize && options.optimize) {
        return Ok((module, sanitized));
    }
    let optimized = module
        .kernels
        .iter()
        .map(|k| {
            kiln_passes::pipeline::try_optimize(k).map_err(|e| {
                BackendError::new(target, k.name(), ErrorKind::Optimizer, format!("optimizer: {e}"))
            })
        })
        .collect::<Result<Vec<Kernel>, _>>()?;
    Ok((Verified::from_pass_output(Module::new(optimized)), sanitized))
}

/// The bounds sanitizer's rewrite of every kernel (`-fsanitize=bounds`): the rewritten
/// module and, per kernel, the tables a launch needs to pass the hidden parameters and read
/// a violation back. The rewrite is deterministic, so a program loaded from a cache gets
/// its tables from the same module again.
pub fn sanitize(module: &Verified) -> (Verified, Vec<Sanitized>) {
    let sanitized: Vec<Sanitized> = module.kernels.iter().map(sanitize_kernel).collect();
    let kernels = sanitized.iter().map(|s| s.kernel.clone()).collect();
    (Verified::from_pass_output(Module::new(kernels)), sanitized)
}
