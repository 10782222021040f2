//! The `kir` target: the module's canonical text, as the interpreter's programs hold it.
//!
//! The interpreter is the oracle, so its programs are the kernels exactly as written: no
//! optimization, and no sanitizer rewrite (it checks every access itself).

use kiln_ir::Verified;

use crate::target::{BackendError, Lowering, Target, VectorLowering};

/// The `kir` target: a verified module printed in the text format (which parses back).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Kir;

impl Target for Kir {
    type Output = String;
    fn name(&self) -> String {
        "kir".into()
    }
    fn lowering(&self) -> Lowering {
        Lowering { optimize: false, sanitize: false, vectors: VectorLowering::Native }
    }
    fn emit(&self, module: &Verified) -> Result<String, BackendError> {
        Ok(module.to_string())
    }
}
