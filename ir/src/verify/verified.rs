//! [`Verified`]: a module whose kernels the verifier accepted, as a type.

use std::borrow::Cow;
use std::ops::Deref;
use std::sync::Arc;

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
        debug_assert!(super::check_module(&module).is_ok(), "a pass broke the module:\n{module}");
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

/// A module a build can start from: a [`Verified`] one, taken as it is, or a plain
/// [`Module`], which is verified first. Builds take this rather than `&Module` so that a
/// module verified where it was made is not verified again.
///
/// ```
/// use kiln_ir::verify::modules_verified;
/// use kiln_ir::{parse_module, ToVerified, Verified};
/// let m = parse_module("kernel k(x: ptr<global, u32>) { x[0] = 1; }").unwrap();
/// let v = Verified::new(m.clone()).unwrap();
/// let before = modules_verified();
/// assert!(v.to_verified().is_ok());
/// assert_eq!(modules_verified(), before, "a Verified is not verified again");
/// assert!(m.to_verified().is_ok());
/// assert_eq!(modules_verified(), before + 1);
/// ```
pub trait ToVerified {
    /// The module.
    fn as_module(&self) -> &Module;
    /// The module as [`Verified`], when it is one already.
    fn verified(&self) -> Option<&Verified>;
    /// The module as [`Verified`]: borrowed when it is one, else verified now.
    fn to_verified(&self) -> Result<Cow<'_, Verified>, Vec<VerifyError>> {
        match self.verified() {
            Some(v) => Ok(Cow::Borrowed(v)),
            None => Verified::new(self.as_module().clone()).map(Cow::Owned),
        }
    }
}

impl ToVerified for Module {
    fn as_module(&self) -> &Module {
        self
    }
    fn verified(&self) -> Option<&Verified> {
        None
    }
}

impl ToVerified for Verified {
    fn as_module(&self) -> &Module {
        &self.0
    }
    fn verified(&self) -> Option<&Verified> {
        Some(self)
    }
}

impl<T: ToVerified + ?Sized> ToVerified for &T {
    fn as_module(&self) -> &Module {
        (**self).as_module()
    }
    fn verified(&self) -> Option<&Verified> {
        (**self).verified()
    }
}

impl<T: ToVerified + ?Sized> ToVerified for Arc<T> {
    fn as_module(&self) -> &Module {
        (**self).as_module()
    }
    fn verified(&self) -> Option<&Verified> {
        (**self).verified()
    }
}
