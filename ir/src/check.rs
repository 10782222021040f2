//! Parse and verify a source text, with every error located in it. STUB.

use crate::diag::Diagnostic;
use crate::kernel::Module;
use crate::parse::parse_file;

/// Parses `src` (named `file` in messages) and verifies the result; every error is a
/// [`Diagnostic`] pointing into the text.
pub fn check_source(file: &str, src: &str) -> Result<Module, Vec<Diagnostic>> {
    let parsed = parse_file(file, src).map_err(|d| vec![d])?;
    Ok(parsed.module)
}
