//! The one barrier rule of every fusion API: the facade's `kiln::Jit::fuse` (through
//! [`fuse_spec`]), a queue's fusion list and a command graph's kernel chains (through the
//! fusion front end) decide alike whether fused entries are separated by a work-group
//! barrier, so one list of kernels fuses into one kernel whichever API fused it.

use kiln_ir::{Kernel, Module, Stmt, StmtNode, Visitor};
use kiln_passes::fusion::internalize::uses_work_group;
use kiln_passes::fusion::{
    fuse_kernels, fusion_keeps_result, BarrierPolicy, FusedKernel, FusionError, FusionSpec,
    ParamRef, PromoteTo,
};

/// `spec` with its barrier policy settled: a barrier between the entries orders nothing
/// when every buffer one entry writes and another uses is accessed per work-item
/// (`per_item`, [`fusion_keeps_result`]), no buffer is promoted to local memory and no
/// entry uses local memory or barriers itself; it is then left out, as `no_barriers` would
/// (on the cpu device a barrier also turns the work-item loop into resumable frames).
/// Otherwise the spec keeps the policy it asks for.
pub(crate) fn settle_barriers(module: &Module, spec: FusionSpec, per_item: bool) -> FusionSpec {
    let local = spec.promote.iter().any(|p| p.to == PromoteTo::Local)
        || spec.kernels.iter().filter_map(|n| module.kernel(n)).any(|k| uses_work_group(k.body()));
    if per_item && !local && spec.barriers == BarrierPolicy::WorkGroup {
        FusionSpec { barriers: BarrierPolicy::None, ..spec }
    } else {
        spec
    }
}

/// Fuses kernels of `module` as `spec` says, with its barrier policy settled by the rule
/// queue fusion and command graphs apply: what `kiln::Jit::fuse`
/// does. The buffers shared between entries are the ones `spec` declares identical (its
/// other parameters are distinct buffers); a group is shared where it spans several
/// entries and one of them writes it (stores to it or passes it to an atomic).
///
/// ```
/// use kiln_runtime::fusion::fuse_spec;
/// let m = kiln_ir::parse_module(
///     "kernel inc(b: ptr<global, i32>) { let i: u32 = global_id(0); b[i] = b[i] + 1; }",
/// )
/// .unwrap();
/// let spec = kiln_passes::fusion::FusionSpec::from_toml(
///     "kernels = [\"inc\", \"inc\"]\nndranges = [{ global = [4] }, { global = [4] }]\n\
///      identical = [[[0, 0], [1, 0]]]\n",
/// )
/// .unwrap();
/// // Each work-item touches its own element only: no barrier between the two.
/// let fused = fuse_spec(&m, &spec).unwrap();
/// assert!(!fused.kernel.to_string().contains("barrier"), "{}", fused.kernel);
/// ```
pub fn fuse_spec(module: &Module, spec: &FusionSpec) -> Result<FusedKernel, FusionError> {
    fuse_kernels(module, &settled_spec(module, spec)?)
}

/// `spec` as [`fuse_spec`] fuses it: its barrier policy settled by the rule. A spec that
/// no access could make legal is refused as the fusion would refuse it. An epilogue spec
/// is returned as it is.
pub fn settled_spec(module: &Module, spec: &FusionSpec) -> Result<FusionSpec, FusionError> {
    // An epilogue fusion places no barriers: its consumers run inside the producer's stores.
    if spec.epilogue {
        return Ok(spec.clone());
    }
    let shared = shared_params(module, spec);
    let per_item = shared.is_empty() || fusion_keeps_result(module, spec, &shared, false)?.is_ok();
    Ok(settle_barriers(module, spec.clone(), per_item))
}

/// One parameter of each group `spec` declares identical that spans several entries and
/// that one of them writes: the buffers whose accesses decide the barrier rule.
fn shared_params(module: &Module, spec: &FusionSpec) -> Vec<(ParamRef, Option<u32>)> {
    let writes = |r: &ParamRef| {
        let k = spec.kernels.get(r.entry).and_then(|n| module.kernel(n));
        k.and_then(|k| k.params().get(r.param).map(|p| writes_param(k, p.name()))).unwrap_or(true)
    };
    spec.identical
        .iter()
        .filter(|g| g.iter().any(|r| r.entry != g[0].entry) && g.iter().any(writes))
        .map(|g| (g[0], None))
        .collect()
}

/// Whether `kernel` may write through its pointer parameter `name`: a store to it, or a
/// call (an atomic) that takes it. Pointers are never bound by `let`, so the name is the
/// only way to reach the buffer.
fn writes_param(kernel: &Kernel, name: &str) -> bool {
    struct Find<'a> {
        name: &'a str,
        found: bool,
    }
    impl Visitor for Find<'_> {
        fn visit_stmt(&mut self, s: &Stmt) {
            match s.node() {
                StmtNode::Store { buf, .. } | StmtNode::VecStore { buf, .. }
                    if buf.name() == self.name =>
                {
                    self.found = true
                }
                StmtNode::Call { args, .. }
                    if args.iter().any(|a| a.as_var().is_some_and(|v| v.name() == self.name)) =>
                {
                    self.found = true
                }
                _ => {}
            }
            kiln_ir::walk_stmt(self, s)
        }
    }
    let mut f = Find { name, found: false };
    f.visit_stmt(kernel.body());
    f.found
}
