//! Epilogue (store-side, producer-consumer) fusion: the first entry of the list is a
//! producer P and every later entry an element-wise consumer E. Instead of running the
//! entries one after another over one nd-range, E's body runs at each of P's stores to the
//! buffer X it reads, for the one work-item of E whose element of X that store writes: its
//! ids are recovered from the store's index, its reads of X see the stored value, and its
//! guards (`if i < n`) become conditions at the store. A GEMM followed by bias, ReLU and
//! scale kernels so becomes one kernel that applies them where it stores C, although a
//! GEMM work-item does not own the elements an element-wise work-item owns (which the
//! kernel-after-kernel fusion needs). The spec asks for it (`epilogue = true`).
//!
//! What kiln proves, by walking every work-item of P and E over their concrete nd-ranges
//! (`prove`) with values read from memory unknown, and otherwise refuses naming the rule
//! ([`FusionError::Epilogue`]):
//!
//! * E reads exactly one buffer the entries before it write (X), accesses it with scalar
//!   loads and stores, and writes no buffer an earlier entry uses other than X;
//! * E calls nothing (no barrier, fence or atomic) and allocates no array;
//! * the entries before E (the fused body so far) store each element of X at most once, at
//!   an index and under conditions that do not depend on memory, never read X, and never
//!   store it with a vector store or pass it to a call;
//! * every work-item of E that touches X touches one element of it, `c + Σ k[d] *
//!   global_id(d)` with positive coefficients, which the entries before it store, and that
//!   element tells which work-item it is (the map inverts on E's range); a work-item that
//!   touches no element of X does nothing that shows or can fault: no write, no read, no
//!   integer division by a value that may be zero (it runs nowhere in the fused kernel);
//! * no two work-items of E access one element of another buffer E writes (their order
//!   would matter).
//!
//! X is still stored, once per element with the value the consumers leave in it, unless a
//! `promote` request of the spec names it: then it is internalized (never read or written
//! in memory; its consumers see the value in a register). The fused kernel runs over P's
//! nd-range with P's work-group size.

mod map;
mod prove;
mod splice;

use std::fmt;

use hashbrown::{HashMap, HashSet};
use kiln_ir::launch::NdRange;
use kiln_ir::{
    Attrs, Builtin, Expr, ExprNode, FusedAttr, Kernel, Module, Mutator, Stmt, StmtNode, Var,
    Visitor,
};

use super::fuse::{self, Params, Signature};
use super::rewrite::ParamSubst;
use super::spec::{ArgMap, FusionSpec, PromoteTo};
use super::{nd_range_attr, ndrange, FuseOptions, FusedKernel, FusionError, FusionWarning};
use splice::{DropStores, Splice};

/// What an epilogue fusion did, consumer by consumer, or where it stopped and why (what
/// `kiln fuse --explain` prints for a spec with `epilogue = true`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpilogueReport {
    /// One line per consumer fused.
    pub steps: Vec<String>,
    /// Why the fusion was refused, if it was.
    pub refused: Option<FusionError>,
}

impl fmt::Display for EpilogueReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for s in &self.steps {
            writeln!(f, "{s}")?;
        }
        match &self.refused {
            Some(e) => write!(f, "epilogue fusion refused: {e}"),
            None => write!(f, "epilogue fusion: done"),
        }
    }
}

/// The report of fusing `spec` (which should ask for `epilogue = true`) over `module`.
pub fn explain_epilogue(module: &Module, spec: &FusionSpec) -> EpilogueReport {
    let mut steps = Vec::new();
    let opts = FuseOptions { post_fusion: super::identity, verify: false };
    let refused = fuse(module, spec, &opts, &mut steps).err();
    EpilogueReport { steps, refused }
}

/// How one entry uses the buffers, by class root.
#[derive(Default)]
struct Uses {
    loads: HashSet<usize>,
    stores: HashSet<usize>,
    /// Classes accessed with vector loads or stores.
    vector: HashSet<usize>,
    /// The operations it calls.
    calls: Vec<String>,
    allocs: bool,
    /// Whether it uses a local id, group id, local size or group count.
    local_builtins: bool,
}

fn uses(params: &Params, e: usize) -> Uses {
    struct U<'p> {
        roots: HashMap<&'p str, usize>,
        u: Uses,
    }
    impl Visitor for U<'_> {
        fn visit_expr(&mut self, e: &Expr) {
            match e.node() {
                ExprNode::Load { buf, .. } => {
                    self.u.loads.extend(self.roots.get(buf.name()));
                }
                ExprNode::VecLoad { buf, .. } => {
                    self.u.loads.extend(self.roots.get(buf.name()));
                    self.u.vector.extend(self.roots.get(buf.name()));
                }
                ExprNode::Builtin { kind, .. } => {
                    self.u.local_builtins |= matches!(
                        kind,
                        Builtin::LocalId
                            | Builtin::GroupId
                            | Builtin::LocalSize
                            | Builtin::NumGroups
                    )
                }
                _ => {}
            }
            kiln_ir::walk_expr(self, e)
        }
        fn visit_stmt(&mut self, s: &Stmt) {
            match s.node() {
                StmtNode::Store { buf, .. } => self.u.stores.extend(self.roots.get(buf.name())),
                StmtNode::VecStore { buf, .. } => {
                    self.u.stores.extend(self.roots.get(buf.name()));
                    self.u.vector.extend(self.roots.get(buf.name()));
                }
                StmtNode::Call { func, .. } => self.u.calls.push(func.name().to_string()),
                StmtNode::Alloc { .. } => self.u.allocs = true,
                _ => {}
            }
            kiln_ir::walk_stmt(self, s)
        }
    }
    let k = params.kernels[e];
    let roots = (k.params().iter().enumerate())
        .map(|(p, v)| (v.name(), params.roots[params.base[e] + p]))
        .collect();
    let mut u = U { roots, u: Uses::default() };
    u.visit_stmt(k.body());
    u.u
}

/// Whether `body` stores `x` with a vector store or passes it to a call.
fn escapes(body: &Stmt, x: &Var) -> Option<String> {
    struct F<'a>(&'a Var, Option<String>);
    impl Visitor for F<'_> {
        fn visit_stmt(&mut self, s: &Stmt) {
            match s.node() {
                StmtNode::VecStore { buf, .. } if buf.name() == self.0.name() => {
                    self.1 = Some(format!("store `{}` with a vector store", buf.name()))
                }
                StmtNode::Call { func, args, .. }
                    if args
                        .iter()
                        .any(|a| a.as_var().is_some_and(|v| v.name() == self.0.name())) =>
                {
                    self.1 = Some(format!("pass `{}` to `{}`", self.0.name(), func.name()))
                }
                _ => {}
            }
            kiln_ir::walk_stmt(self, s)
        }
    }
    let mut f = F(x, None);
    f.visit_stmt(body);
    f.1
}

fn range_of(n: &ndrange::Norm) -> NdRange {
    NdRange { dims: n.dims, global: n.global, local: n.local, offset: n.offset.unwrap_or([0; 3]) }
}

/// Fuses `spec` as an epilogue chain; `log` receives one line per consumer fused.
pub(super) fn fuse(
    module: &Module,
    spec: &FusionSpec,
    opts: &FuseOptions,
    log: &mut Vec<String>,
) -> Result<FusedKernel, FusionError> {
    let name = fuse::fused_name(spec)?;
    let module = &kiln_ir::depth::bound_module(module);
    let kernels = fuse::entry_kernels(module, spec)?;
    let ranges: Vec<NdRange> = (spec.ndranges.iter().zip(&kernels).enumerate())
        .map(|(e, (r, k))| ndrange::normalize(e, r, k).map(|n| range_of(&n)))
        .collect::<Result<_, _>>()?;
    let params = fuse::identical_classes(kernels, spec)?;
    let consts = fuse::constants(spec, &params)?;
    let n = params.kernels.len();
    let refuse = |entry: usize, why: String| FusionError::Epilogue {
        entry,
        kernel: params.kernels[entry].name().to_string(),
        why,
    };
    if n < 2 {
        return Err(refuse(
            0,
            "an epilogue fusion needs a producer and a consumer after it".into(),
        ));
    }
    let Signature { mut names, params: fused_params, classes, .. } =
        fuse::signature(&params, &consts, &HashMap::new());
    let fused_var = |root: usize| match &classes[&root].0 {
        ParamSubst::Param(v) | ParamSubst::Array(v, _) => Some(v.clone()),
        ParamSubst::Const(_) => None,
    };
    let uses: Vec<Uses> = (0..n).map(|e| uses(&params, e)).collect();
    let (first, amap) = fuse::entry_body(&params, &classes, 0, &mut names, None);
    let mut cur = Stmt::block(first);
    let mut args_map = vec![amap];
    let mut inputs: Vec<usize> = Vec::new();
    let mut steps = 0u64;
    // The elements each buffer is stored at, as last walked.
    let mut known: HashMap<usize, HashSet<i128>> = HashMap::new();
    for k in 1..n {
        let u = &uses[k];
        let pname = |root: usize| format!("`{}`", params.all[root].1.name());
        if let Some(f) = u.calls.first() {
            return Err(refuse(k, format!("it calls `{f}`: an epilogue runs inside the producer's work-items, where barriers, fences and atomics of its own would order the wrong ones")));
        }
        if u.allocs {
            return Err(refuse(k, "it allocates an array".into()));
        }
        if u.local_builtins && ranges[k].local.is_none() {
            return Err(refuse(
                k,
                "it uses local ids, group ids or sizes, but its nd-range gives no local size"
                    .into(),
            ));
        }
        let before_w: HashSet<usize> =
            uses[..k].iter().flat_map(|u| u.stores.iter().copied()).collect();
        let before_any: HashSet<usize> =
            uses[..k].iter().flat_map(|u| u.stores.iter().chain(&u.loads).copied()).collect();
        let mut ins: Vec<usize> =
            u.loads.iter().copied().filter(|r| before_w.contains(r)).collect();
        ins.sort_unstable();
        let x = match ins[..] {
            [x] => x,
            [] => {
                return Err(refuse(
                    k,
                    "it reads no buffer the kernels before it write: it is not their epilogue"
                        .into(),
                ))
            }
            _ => {
                let all: Vec<String> = ins.iter().map(|&r| pname(r)).collect();
                return Err(refuse(k, format!("it reads {} buffers the kernels before it write ({}); an epilogue reads one", ins.len(), all.join(", "))));
            }
        };
        if u.vector.contains(&x) {
            return Err(refuse(k, format!("it accesses {} with vector loads or stores", pname(x))));
        }
        let mut clobbered: Vec<usize> =
            u.stores.iter().copied().filter(|&w| w != x && before_any.contains(&w)).collect();
        clobbered.sort_unstable();
        if let Some(&w) = clobbered.first() {
            return Err(refuse(k, format!("it writes {}, which a kernel before it uses: running it at their stores would change what they read", pname(w))));
        }
        let xf = fused_var(x).expect("a buffer read is a pointer");
        if let Some(what) = escapes(&cur, &xf) {
            return Err(refuse(k, format!("the kernels before it {what}")));
        }
        // A buffer whose stores were walked before and which no consumer since wrote
        // otherwise than in place keeps its elements: each site stores its element once.
        let stored = match known.remove(&x) {
            Some(s) => s,
            None => map::producer_stores(&cur, &ranges[0], &xf, &mut steps).map_err(|why| {
                refuse(
                    k,
                    format!(
                        "the kernels before it do not store {} once per element: {why}",
                        pname(x)
                    ),
                )
            })?,
        };
        let (body, amap) = fuse::entry_body(&params, &classes, k, &mut names, None);
        let consumer = Stmt::block(body);
        let written: HashSet<String> = (u.stores.iter().filter(|&&w| w != x))
            .filter_map(|&w| fused_var(w).map(|v| v.name().to_string()))
            .collect();
        let (imap, touched) =
            map::consumer_map(&consumer, &ranges[k], &xf, &written, &stored, &mut steps)
                .map_err(|why| refuse(k, why))?;
        let mut sp = Splice {
            x: &xf,
            consumer: &consumer,
            map: &imap,
            names: &mut names,
            free: &fused_params,
            sites: 0,
        };
        cur = sp.mutate_stmt(&cur);
        log.push(format!(
            "entry {k} (`{}`) runs at {} store(s) of {}, as its work-item whose element `{}` is \
             the store's index ({} of its work-items touch one)",
            params.kernels[k].name(),
            sp.sites,
            pname(x),
            imap.describe(),
            touched,
        ));
        args_map.push(amap);
        inputs.push(x);
        for w in &u.stores {
            known.remove(w);
        }
        known.insert(x, stored);
    }
    // Internalization of the buffers the spec calls temporary.
    let mut warnings = Vec::new();
    let mut internal: Vec<usize> = Vec::new();
    for p in &spec.promote {
        let i = params.flat(p.param)?;
        let ty = params.all[i].1.ty();
        if !ty.is_ptr() {
            return Err(FusionError::PromoteNotBuffer { at: p.param, ty });
        }
        let root = params.roots[i];
        if p.to == PromoteTo::None || internal.contains(&root) {
            continue;
        }
        if !inputs.contains(&root) {
            warnings.push(FusionWarning {
                param: p.param,
                reason: format!(
                    "`{}` is not a buffer an epilogue reads; it stays in global memory",
                    params.all[i].1.name()
                ),
            });
            continue;
        }
        internal.push(root);
    }
    let mut gone: Vec<usize> = Vec::new();
    for &root in &internal {
        let xf = fused_var(root).expect("a pointer");
        cur = DropStores(&xf).mutate_stmt(&cur);
        gone.extend(fused_params.iter().position(|v| v.name() == xf.name()));
    }
    let renumber = |i: usize| i - gone.iter().filter(|&&g| g < i).count();
    for maps in &mut args_map {
        for m in maps.iter_mut() {
            *m = match *m {
                ArgMap::Param(i) | ArgMap::Identical(i) if gone.contains(&i) => {
                    ArgMap::Promoted { to: PromoteTo::Private, size: 1 }
                }
                ArgMap::Param(i) => ArgMap::Param(renumber(i)),
                ArgMap::Identical(i) => ArgMap::Identical(renumber(i)),
                ref o => o.clone(),
            };
        }
    }
    let kept: Vec<Var> = (fused_params.iter().enumerate())
        .filter(|(i, _)| !gone.contains(i))
        .map(|(_, v)| v.clone())
        .collect();
    let attrs = Attrs {
        reqd_work_group_size: params.kernels[0].attrs().reqd_work_group_size,
        fast_math: params.kernels.iter().all(|k| k.attrs().fast_math),
        nd_range: Some(nd_range_attr(&ranges[0])),
        fused: Some(FusedAttr {
            kernels: spec.kernels.clone(),
            args: args_map.iter().map(|a| a.iter().map(fuse::fused_arg).collect()).collect(),
        }),
    };
    let kernel = Kernel::with_attrs(name, kept, attrs, cur);
    let kernel = fuse::post_fusion(kernel, opts)?;
    Ok(FusedKernel { kernel, range: ranges[0], args: args_map, warnings })
}
