//! The verifier: type checking, scoping and address-space rules. STUB.

use std::fmt;

use crate::expr::Expr;
use crate::kernel::{Kernel, Module};
use crate::stmt::Stmt;

/// The IR object an error is about.
#[derive(Clone, Debug)]
pub enum Node {
    /// An expression.
    Expr(Expr),
    /// A statement.
    Stmt(Stmt),
}

/// One verification failure.
#[derive(Clone, Debug)]
pub struct VerifyError {
    /// The kernel it was found in.
    pub kernel: String,
    /// What is wrong, naming the offending construct.
    pub message: String,
    /// The offending node, if the error is about one.
    pub node: Option<Node>,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "in kernel `{}`: {}", self.kernel, self.message)
    }
}

impl std::error::Error for VerifyError {}

/// Verifies one kernel, returning every error found.
pub fn verify_kernel(_k: &Kernel) -> Result<(), Vec<VerifyError>> {
    Ok(())
}

/// Verifies every kernel of a module (and that kernel names are unique).
pub fn verify_module(m: &Module) -> Result<(), Vec<VerifyError>> {
    let errs: Vec<VerifyError> = m
        .kernels
        .iter()
        .filter_map(|k| verify_kernel(k).err())
        .flatten()
        .collect();
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs)
    }
}
