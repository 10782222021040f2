//! [`Verified`]: a module whose kernels the verifier accepted, as a type.

use std::ops::Deref;

use crate::kernel::{Kernel, Module};

use super::{verify_module, VerifyError};

/// A module every kernel of which passed [`verify_module`]: what backends lower.
///
/// Backends rely on verified types (every pointer has an element type, every name is in
/// scope), so they take a `Verified` and never check again: a module is verified once per
/// build, where it is made. Passes keep modules verified, so their output is wrapped with
/// [`Verified::from_pass_output`] instead of being checked again (the pass manager checks
/// after every pass in debug builds).
///
/// ```
/// use kiln_ir::{parse_module, Verified};
/// let m = parse_module("kernel k(x: ptr<global, u32>) { x[0] = 1; }").unwrap();
/// let v = Verified::new(m).unwrap();
/// assert_eq!(v.kernels[0].name(), "k");
/// let bad = parse_module("kernel k(x: ptr<global, u32>) { x[0] = 1.5; }").unwrap();
/// assert!(Verified::new(bad).is_err());
/// ```
#[derive(Clone, Debug)]
pub struct Verified(pub(crate) Module);

impl Verified {
    /// Verifies `module`; every error found, in source order, if it does not verify.
    pub fn new(module: Module) -> Result<Verified, Vec<VerifyError>> {
        verify_module(&module)?;
        Ok(Verified(module))
    }

    /// A module of the one kernel `kernel`, verified.
    pub fn kernel(kernel: Kernel) -> Result<Verified, Vec<VerifyError>> {
        Verified::new(Module::new(vec![kernel]))
    }

    /// Wraps the output of a pass pipeline that was given verified kernels. Passes preserve
    /// validity (each is property-tested for it, and the pass manager verifies after every
    /// pass in debug builds); debug builds check it here too.
    pub fn from_pass_output(module: Module) -> Verified {
        debug_assert!(verify_module(&module).is_ok(), "a pass broke the module:\n{module}");
        Verified(module)
    }

    /// The module of the kernels `keep` accepts, in order: a part of a verified module is
    /// verified.
    pub fn retain(self, keep: impl Fn(&Kernel) -> bool) -> Verified {
        Verified(Module::new(self.0.kernels.into_iter().filter(|k| keep(k)).collect()))
    }

    /// The module.
    pub fn module(&self) -> &Module {
        &self.0
    }

    /// The module, unwrapped.
    pub fn into_module(self) -> Module {
        self.0
    }
}

impl Deref for Verified {
    type Target = Module;
    fn deref(&self) -> &Module {
        &self.0
    }
}
