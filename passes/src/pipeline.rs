//! The default optimization pipeline (`kiln opt -O`), the entry point other crates (kernel
//! fusion, backends) call after building or transforming a kernel.

use std::sync::OnceLock;

use kiln_ir::Kernel;

use crate::manager::{PassError, PassManager};

/// The passes of the default pipeline, in order.
pub const DEFAULT_PIPELINE: &str =
    "simplify,scalarize,var-to-let,constprop,cse,licm,let-opt,dce,simplify,strength,cse,peephole,let-opt";

/// The default pipeline as a pass manager.
pub fn default_pipeline() -> PassManager {
    // Every name above is a built-in pass (tested), so this never falls back.
    PassManager::from_names(DEFAULT_PIPELINE).unwrap_or_default()
}

/// Optimizes a kernel with the default pipeline. The result has the same meaning as `k`
/// (identical interpreter results, errors quoting `k`'s text: see [`crate::origin`]) and
/// verifies.
pub fn optimize(k: &Kernel) -> Kernel {
    try_optimize(k).unwrap_or_else(|_| k.clone())
}

/// [`optimize`], reporting a pass that produced invalid IR instead of falling back to `k`.
pub fn try_optimize(k: &Kernel) -> Result<Kernel, PassError> {
    // Built once: the pipeline is called for every fused kernel, and looking up ten pass
    // names each time showed up in its profile.
    static PIPELINE: OnceLock<PassManager> = OnceLock::new();
    // Errors of the optimized kernel quote the source's fault sites (see `origin`).
    PIPELINE.get_or_init(default_pipeline).run(&crate::origin::record_origins(k))
}
