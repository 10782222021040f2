//! Kernel fusion: the job of the SYCL user-driven kernel-fusion JIT (see
//! `KernelFusionJIT.md`), without LLVM.
//!
//! [`fuse_kernels`] fuses an ordered list of kernels (repeats allowed) into one kernel that
//! does exactly the visible work of running them one after another:
//!
//! 1. every entry's nd-range is validated and the fused nd-range chosen ([`ndrange`]: dims
//!    the largest, global size the largest linear size, local size and offset the specified
//!    ones, which must agree), refusing illegal combinations with an error naming the rule;
//! 2. identical parameters are merged (transitively) and passed once;
//! 3. scalar constants are checked to fit their parameters exactly and substituted, and
//!    promotions resolved: a conflict, an escaping pointer or accesses that [`legality`]
//!    cannot prove exact leave the buffer in global memory, with a [`FusionWarning`] naming
//!    the buffer, kernel and access (promotion is done when legal, never an error);
//! 4. each entry's body is rewritten ([`rewrite`]: unique names, substituted parameters,
//!    remapped built-ins, see [`remap`]) and placed in order, guarded by
//!    `if glid < N_k` when its linear size is smaller than the fused one, with a
//!    work-group barrier (local + global fences) between entries, outside the guards;
//! 5. the post-fusion pipeline runs: [`FuseOptions::post_fusion`], a single
//!    `fn(&Kernel) -> Kernel` call site, by default the `-O` pipeline
//!    ([`crate::pipeline::optimize`]: simplify, constant propagation, CSE, LICM, DCE, ...).
//!
//! The result, [`FusedKernel`], holds the kernel, its nd-range and for every original
//! argument an [`ArgMap`]. [`fusion_key`] gives a stable key for caching fused kernels.
//!
//! ```
//! use kiln_ir::parse_module;
//! use kiln_passes::fusion::{fuse_kernels, ArgMap, FusionSpec, ParamRef, PromoteTo, Promotion, RangeSpec};
//!
//! let m = parse_module(
//!     "kernel add(a: ptr<global, f32>, b: ptr<global, f32>, tmp: ptr<global, f32>) {
//!        let i: u32 = global_id(0); tmp[i] = a[i] + b[i]; }
//!      kernel mul(tmp: ptr<global, f32>, c: ptr<global, f32>, out: ptr<global, f32>) {
//!        let i: u32 = global_id(0); out[i] = tmp[i] * c[i]; }",
//! )
//! .unwrap();
//! let spec = FusionSpec {
//!     name: "fused".into(),
//!     kernels: vec!["add".into(), "mul".into()],
//!     ndranges: vec![RangeSpec::new(&[512]), RangeSpec::new(&[512])],
//!     identical: vec![vec![ParamRef::new(0, 2), ParamRef::new(1, 0)]],
//!     promote: vec![Promotion {
//!         param: ParamRef::new(0, 2),
//!         to: PromoteTo::Private,
//!         size: None,
//!         buffer_len: Some(512),
//!     }],
//!     ..FusionSpec::default()
//! };
//! let f = fuse_kernels(&m, &spec).unwrap();
//! let names: Vec<&str> = f.kernel.params().iter().map(|p| p.name()).collect();
//! assert_eq!(names, ["add_a", "add_b", "mul_c", "mul_out"]);
//! assert_eq!(f.args[1][0], ArgMap::Promoted { to: PromoteTo::Private, size: 1 });
//! assert!(f.kernel.to_string().contains("#nd_range(global = [512], offset = [0])"));
//! ```

pub mod bind;
pub mod internalize;
pub mod key;
pub mod legality;
pub mod ndrange;
pub mod remap;
pub mod rewrite;
pub mod spec;
pub mod toml_spec;

use hashbrown::HashMap;
use kiln_ir::launch::NdRange;
use kiln_ir::{
    AddrSpace, Attrs, Expr, FusedArg, FusedAttr, Kernel, MemFence, Module, Mutator, NdRangeAttr,
    Stmt, StmtNode, Type, Var, Visitor,
};
use thiserror::Error;

pub use spec::{
    ArgMap, BarrierPolicy, ConstValue, Constant, FusionSpec, ParamRef, PromoteTo, Promotion,
    RangeSpec, RemapMode,
};

pub use bind::{BindArg, BindError};
pub use key::{fusion_key, FusionKey};
use rewrite::{Names, ParamSubst, Rewriter};
pub use toml_spec::SpecError;

/// Why fusion was refused. Every variant names the violated rule.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum FusionError {
    /// The list of kernels is empty.
    #[error("nothing to fuse: the kernel list is empty")]
    Empty,
    /// A listed kernel is not in the module.
    #[error("entry {entry}: no kernel `{name}` in the module")]
    UnknownKernel {
        /// The entry.
        entry: usize,
        /// The missing name.
        name: String,
    },
    /// `ndranges` does not have one range per entry.
    #[error("{ranges} nd-ranges given for {kernels} kernels (one per entry required)")]
    RangeCount {
        /// Number of kernels.
        kernels: usize,
        /// Number of ranges.
        ranges: usize,
    },
    /// An nd-range is malformed.
    #[error("entry {entry}: invalid nd-range: {why}")]
    BadRange {
        /// The entry.
        entry: usize,
        /// What is wrong.
        why: String,
    },
    /// A `(entry, param)` reference is out of range.
    #[error("parameter reference ({entry}, {param}) does not exist: {why}")]
    BadParam {
        /// The entry.
        entry: usize,
        /// The parameter index.
        param: usize,
        /// Why.
        why: String,
    },
    /// Rule: identical parameters must have the same type.
    #[error("identical parameters ({}, {}) and ({}, {}) have different types `{}` and `{}`", .a.entry, .a.param, .b.entry, .b.param, .ta, .tb)]
    IdenticalTypeMismatch {
        /// One parameter.
        a: ParamRef,
        /// Its type.
        ta: Type,
        /// The other.
        b: ParamRef,
        /// Its type.
        tb: Type,
    },
    /// Rule: constants are for scalar parameters.
    #[error("parameter ({}, {}) of type `{ty}` cannot be a constant: only scalar parameters can", .at.entry, .at.param)]
    ConstantNotScalar {
        /// The parameter.
        at: ParamRef,
        /// Its type.
        ty: Type,
    },
    /// Rule: a constant fits its parameter's type exactly (see [`ConstValue::to_imm`]).
    #[error("constant for parameter ({}, {}) (`{param}` of `{kernel}`, type `{ty}`): {why}", .at.entry, .at.param)]
    ConstantDoesNotFit {
        /// The parameter.
        at: ParamRef,
        /// The kernel of the entry.
        kernel: String,
        /// The parameter's name.
        param: String,
        /// Its type.
        ty: Type,
        /// Why the value does not fit.
        why: String,
    },
    /// Rule: one argument has one value.
    #[error("parameter ({}, {}) is given two different constant values", .at.entry, .at.param)]
    ConflictingConstants {
        /// The parameter.
        at: ParamRef,
    },
    /// Rule: promotion is for pointer parameters.
    #[error("parameter ({}, {}) of type `{ty}` cannot be promoted: only buffers can", .at.entry, .at.param)]
    PromoteNotBuffer {
        /// The parameter.
        at: ParamRef,
        /// Its type.
        ty: Type,
    },
    /// Rule: no two specified local sizes may differ.
    #[error(
        "rule `local sizes agree`: entries {first} and {second} specify different local sizes"
    )]
    LocalSizeMismatch {
        /// First entry.
        first: usize,
        /// Second entry.
        second: usize,
    },
    /// Rule: no two specified offsets may differ.
    #[error("rule `offsets agree`: entries {first} and {second} specify different offsets")]
    OffsetMismatch {
        /// First entry.
        first: usize,
        /// Second entry.
        second: usize,
    },
    /// Rule: `#reqd_work_group_size` attributes must agree.
    #[error("rule `required work-group sizes agree`: entries {first} and {second} require different work-group sizes")]
    ReqdWorkGroupSizeMismatch {
        /// First entry.
        first: usize,
        /// Second entry.
        second: usize,
    },
    /// Rule: ranges differ, an offset is non-zero and some entry needs id remapping.
    #[error("rule `no offset with id remapping`: the ranges differ, the offset is non-zero and entry {entry} needs id remapping")]
    OffsetWithRemap {
        /// The entry needing remapping.
        entry: usize,
    },
    /// Rule: ranges differ, a local size is given and a range is not divisible by it.
    #[error("rule `local size divides the ranges`: the ranges differ and local size {local:?} does not divide the fused range or entry {entry}'s range")]
    NotDivisible {
        /// The entry.
        entry: usize,
        /// The local size.
        local: [u32; 3],
    },
    /// Rule: an entry with an explicit local size cannot have its ids remapped.
    #[error("rule `no explicit local size with id remapping`: entry {entry} has an explicit local size and needs id remapping")]
    LocalSizeWithRemap {
        /// The entry.
        entry: usize,
    },
    /// Rule: an entry whose work-groups cannot be preserved must not synchronize them (the
    /// kiln form of "a built-in that cannot be remapped": barriers and local memory of an
    /// entry that is remapped, or guarded without an explicit local size).
    #[error("rule `work-groups preserved`: entry {entry} uses barriers or local memory, but its work-groups are not preserved in the fused range (id remapping, or a guard without an explicit local size)")]
    WorkGroupNotPreserved {
        /// The entry.
        entry: usize,
    },
    /// Rule: the fused kernel's name must parse back as a kernel name.
    #[error("the fused kernel's name `{0}` is not an identifier that can name a kernel (letters, digits and `_`, not starting with a digit, not a keyword or type name)")]
    BadName(String),
    /// Rule: a fused kernel that needs the global linear id (guards or id remapping) has at
    /// most 2^32 work-items, since that id is a `u32`.
    #[error("rule `linear id fits u32`: the fused range has {items} work-items, but entries with different nd-ranges are placed by a u32 global linear id, which holds at most 4294967296")]
    TooManyWorkItems {
        /// The fused range's work-item count.
        items: u64,
    },
    /// The fused kernel failed verification (a bug in fusion).
    #[error("internal error: the fused kernel does not verify: {0}")]
    Internal(String),
}

/// A promotion that was not done; the buffer stays in global memory and is written back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FusionWarning {
    /// The fused parameter index the buffer is passed as.
    pub param: ParamRef,
    /// Why promotion was refused.
    pub reason: String,
}

impl std::fmt::Display for FusionWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "promotion of parameter ({}, {}) refused: {}",
            self.param.entry, self.param.param, self.reason
        )
    }
}

/// A fused kernel with everything needed to launch it.
#[derive(Clone, Debug)]
pub struct FusedKernel {
    /// The fused kernel (after the post-fusion pipeline).
    pub kernel: Kernel,
    /// The nd-range to launch it with.
    pub range: NdRange,
    /// For each entry, for each original parameter: what became of it.
    pub args: Vec<Vec<ArgMap>>,
    /// Promotions that were refused.
    pub warnings: Vec<FusionWarning>,
}

/// Options of [`fuse_kernels_with`].
#[derive(Clone, Copy, Debug)]
pub struct FuseOptions {
    /// The post-fusion pipeline: the one call site where fused kernels are optimized.
    /// Defaults to [`crate::pipeline::optimize`]; [`identity`] skips optimization.
    pub post_fusion: fn(&Kernel) -> Kernel,
    /// Verify the fused kernel before and after the post-fusion pipeline. By default on in
    /// debug builds (and so in every test), off in release builds, as the pass manager
    /// does: there every consumer of a fused kernel verifies it anyway (each backend's
    /// input, the runtime's device builds), and the two checks were a fifth of the fused
    /// chain's JIT time.
    pub verify: bool,
}

/// The identity pipeline.
pub fn identity(k: &Kernel) -> Kernel {
    k.clone()
}

impl Default for FuseOptions {
    fn default() -> FuseOptions {
        FuseOptions { post_fusion: crate::pipeline::optimize, verify: cfg!(debug_assertions) }
    }
}

/// Fuses `spec.kernels` from `module` with the default options.
pub fn fuse_kernels(module: &Module, spec: &FusionSpec) -> Result<FusedKernel, FusionError> {
    fuse_kernels_with(module, spec, &FuseOptions::default())
}

struct UnionFind(Vec<usize>);

impl UnionFind {
    fn find(&mut self, mut x: usize) -> usize {
        while self.0[x] != x {
            self.0[x] = self.0[self.0[x]];
            x = self.0[x];
        }
        x
    }
    fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        // Keep the smaller index (the first occurrence) as the root.
        if ra < rb {
            self.0[rb] = ra;
        } else {
            self.0[ra] = rb;
        }
    }
}

/// The `#nd_range` attribute for a range.
pub fn nd_range_attr(r: &NdRange) -> NdRangeAttr {
    let d = r.dims.clamp(1, 3);
    NdRangeAttr {
        global: r.global[..d].to_vec(),
        local: r.local.map(|l| l[..d].to_vec()),
        offset: r.offset[..d].to_vec(),
    }
}

/// The range an `#nd_range` attribute describes.
pub fn nd_range_of(a: &NdRangeAttr) -> NdRange {
    let mut r = NdRange::new(&a.global).with_offset(&a.offset);
    if let Some(l) = &a.local {
        r = r.with_local(l);
    }
    r
}

fn fused_arg(m: &ArgMap) -> FusedArg {
    match *m {
        ArgMap::Param(i) => FusedArg::Param(i as u32),
        ArgMap::Identical(i) => FusedArg::Identical(i as u32),
        ArgMap::Promoted { to, size } => FusedArg::Promoted { local: to == PromoteTo::Local, size },
        ArgMap::Constant(imm) => FusedArg::Const(imm),
    }
}

/// Fuses `spec.kernels` from `module` into one kernel.
pub fn fuse_kernels_with(
    module: &Module,
    spec: &FusionSpec,
    opts: &FuseOptions,
) -> Result<FusedKernel, FusionError> {
    if spec.kernels.is_empty() {
        return Err(FusionError::Empty);
    }
    let name = if spec.name.is_empty() { "fused".to_string() } else { spec.name.clone() };
    if !kiln_ir::parse::is_identifier(&name) {
        return Err(FusionError::BadName(name));
    }
    // Fusion's rewrites recurse over expressions: work on the depth-bounded kernels.
    let module = &kiln_ir::depth::bound_module(module);
    let kernels: Vec<&Kernel> = spec
        .kernels
        .iter()
        .enumerate()
        .map(|(entry, name)| {
            module
                .kernel(name)
                .ok_or_else(|| FusionError::UnknownKernel { entry, name: name.clone() })
        })
        .collect::<Result<_, _>>()?;
    if spec.ndranges.len() != kernels.len() {
        return Err(FusionError::RangeCount {
            kernels: kernels.len(),
            ranges: spec.ndranges.len(),
        });
    }

    // Parameters, numbered flat.
    let mut base = Vec::with_capacity(kernels.len());
    let mut all: Vec<(ParamRef, Var)> = Vec::new();
    for (e, k) in kernels.iter().enumerate() {
        base.push(all.len());
        for (p, v) in k.params().iter().enumerate() {
            all.push((ParamRef::new(e, p), v.clone()));
        }
    }
    let flat = |r: ParamRef| -> Result<usize, FusionError> {
        let bad = |why: String| FusionError::BadParam { entry: r.entry, param: r.param, why };
        let k = kernels
            .get(r.entry)
            .ok_or_else(|| bad(format!("there are {} entries", kernels.len())))?;
        if r.param >= k.params().len() {
            return Err(bad(format!("`{}` has {} parameters", k.name(), k.params().len())));
        }
        Ok(base[r.entry] + r.param)
    };

    // Identical parameters.
    let mut uf = UnionFind((0..all.len()).collect());
    for group in &spec.identical {
        let mut first: Option<usize> = None;
        for &r in group {
            let i = flat(r)?;
            if let Some(f) = first {
                let (ta, tb) = (all[f].1.ty(), all[i].1.ty());
                if ta != tb {
                    return Err(FusionError::IdenticalTypeMismatch { a: all[f].0, ta, b: r, tb });
                }
                uf.union(f, i);
            } else {
                first = Some(i);
            }
        }
    }

    // Nd-ranges and legality.
    let norms: Vec<ndrange::Norm> = spec
        .ndranges
        .iter()
        .zip(&kernels)
        .enumerate()
        .map(|(e, (r, k))| ndrange::normalize(e, r, k))
        .collect::<Result<_, _>>()?;
    let syncs: Vec<bool> = kernels.iter().map(|k| internalize::uses_work_group(k.body())).collect();
    let plan = ndrange::plan(&norms, &kernels, &syncs)?;

    // Constants, per class.
    let mut consts: HashMap<usize, kiln_ir::Imm> = HashMap::new();
    for c in &spec.constants {
        let i = flat(c.param)?;
        let ty = all[i].1.ty();
        let Some(s) = ty.scalar() else {
            return Err(FusionError::ConstantNotScalar { at: c.param, ty });
        };
        let root = uf.find(i);
        let imm = c.value.to_imm(s).map_err(|why| FusionError::ConstantDoesNotFit {
            at: c.param,
            kernel: kernels[c.param.entry].name().to_string(),
            param: all[i].1.name().to_string(),
            ty,
            why,
        })?;
        if consts.get(&root).is_some_and(|old| *old != imm) {
            return Err(FusionError::ConflictingConstants { at: c.param });
        }
        consts.insert(root, imm);
    }

    // Promotions, per class.
    let mut warnings = Vec::new();
    let fused_items = plan.fused.work_items();
    // Per class: (requested on, to, size, buffer_len) of each request.
    type Request = (ParamRef, PromoteTo, Option<u32>, Option<u32>);
    let mut requests: HashMap<usize, Vec<Request>> = HashMap::new();
    let mut order: Vec<usize> = Vec::new();
    for pr in &spec.promote {
        let i = flat(pr.param)?;
        let ty = all[i].1.ty();
        if !ty.is_ptr() {
            return Err(FusionError::PromoteNotBuffer { at: pr.param, ty });
        }
        let groups = match plan.fused.local {
            Some(l) => {
                Some((0..plan.fused.dims).map(|d| (plan.fused.global[d] / l[d]) as u64).product())
            }
            None => None,
        };
        let size = pr.size.or_else(|| {
            let len = pr.buffer_len? as u64;
            let per = match pr.to {
                PromoteTo::Local => groups?,
                _ => fused_items,
            };
            u32::try_from(len / per.max(1)).ok()
        });
        let root = uf.find(i);
        if !requests.contains_key(&root) {
            order.push(root);
        }
        requests.entry(root).or_default().push((pr.param, pr.to, size, pr.buffer_len));
    }
    let mut promoted: HashMap<usize, (PromoteTo, u32)> = HashMap::new();
    let roots: Vec<usize> = (0..all.len()).map(|i| uf.find(i)).collect();
    for root in order {
        let reqs = &requests[&root];
        let at = reqs[0].0;
        let refuse = |reason: String| FusionWarning { param: at, reason };
        // A request on any member covers the whole argument; an explicit `none` on the same
        // argument conflicts.
        let kinds: Vec<PromoteTo> = reqs.iter().map(|r| r.1).collect();
        if kinds.contains(&PromoteTo::None) {
            if kinds.iter().any(|k| *k != PromoteTo::None) {
                warnings.push(refuse("conflicting requests: none and private/local".into()));
            }
            continue;
        }
        let members: Vec<usize> = (0..all.len()).filter(|&i| uf.find(i) == root).collect();
        let to = if reqs.iter().any(|r| r.1 == PromoteTo::Local) {
            PromoteTo::Local
        } else {
            PromoteTo::Private
        };
        if to == PromoteTo::Local && plan.fused.local.is_none() {
            warnings.push(refuse("local promotion needs an explicit local size".into()));
            continue;
        }
        let sizes: Vec<Option<u32>> = reqs.iter().map(|r| r.2).collect();
        if sizes.iter().any(|s| *s != sizes[0]) {
            warnings.push(refuse("conflicting requests: different sizes".into()));
            continue;
        }
        let Some(size) = sizes[0].filter(|&s| s > 0) else {
            warnings.push(refuse(
                "no usable size (give `size`, or a `buffer_len` of at least one element per work-item/work-group)".into(),
            ));
            continue;
        };
        if consts.contains_key(&root) {
            warnings.push(refuse("the parameter is also a constant".into()));
            continue;
        }
        // The buffer's parameter names in each entry (empty where it does not appear).
        let names_in: Vec<Vec<String>> = (0..kernels.len())
            .map(|e| {
                members
                    .iter()
                    .filter(|&&m| all[m].0.entry == e)
                    .map(|&m| all[m].1.name().to_string())
                    .collect()
            })
            .collect();
        // Escape analysis over every use, in every entry.
        let mut escaped = false;
        for (k, names) in kernels.iter().zip(&names_in) {
            if names.is_empty() {
                continue;
            }
            let mut v = internalize::Escapes { names, escaped: false };
            v.visit_stmt(k.body());
            escaped |= v.escaped;
        }
        if escaped {
            warnings.push(refuse(
                "the pointer escapes (used other than as `p[i]`: bound, passed to a call, cast)"
                    .into(),
            ));
            continue;
        }
        // Legality from the access patterns of every entry touching the buffer.
        let touchers: Vec<legality::Toucher> = kernels
            .iter()
            .enumerate()
            .filter_map(|(e, k)| {
                let names = names_in[e].clone();
                if names.is_empty() {
                    return None;
                }
                let consts = k
                    .params()
                    .iter()
                    .enumerate()
                    .filter_map(|(p, v)| {
                        consts.get(&roots[base[e] + p]).map(|imm| (v.name().to_string(), *imm))
                    })
                    .collect();
                Some(legality::Toucher {
                    entry: e,
                    kernel: k.name(),
                    body: k.body(),
                    plan: &plan.entries[e],
                    names,
                    consts,
                })
            })
            .collect();
        let req = legality::Request {
            to,
            size,
            // The smallest length given (a larger one cannot be true of the same buffer).
            buffer_len: reqs.iter().filter_map(|r| r.3).min(),
            barriers: spec.barriers,
        };
        if let Err(why) = legality::check(&plan.fused, &req, &touchers) {
            let (e, p) = (all[root].0.entry, all[root].1.name());
            warnings.push(refuse(format!(
                "`{p}` of `{}` stays in global memory: {why}",
                kernels[e].name()
            )));
            continue;
        }
        promoted.insert(root, (to, size));
    }

    // The fused signature.
    let mut names = Names::default();
    let mut fused_params: Vec<Var> = Vec::new();
    let mut class_subst: HashMap<usize, (ParamSubst, ArgMap)> = HashMap::new();
    let mut prologue: Vec<Stmt> = Vec::new();
    let mut arrays: Vec<(Var, u32)> = Vec::new();
    // Names of fused parameters first, so locals never take them.
    for (i, (r, v)) in all.iter().enumerate() {
        let root = uf.find(i);
        if root != i || class_subst.contains_key(&root) {
            continue;
        }
        let kname = kernels[r.entry].name();
        if let Some(imm) = consts.get(&root) {
            class_subst.insert(root, (ParamSubst::Const(*imm), ArgMap::Constant(*imm)));
        } else if let Some(&(to, size)) = promoted.get(&root) {
            let space = if to == PromoteTo::Local { AddrSpace::Local } else { AddrSpace::Private };
            let elem = v.ty().elem().unwrap_or(kiln_ir::Scalar::U8);
            let a = Var::new(names.fresh(&format!("{kname}_{}", v.name())), Type::ptr(space, elem));
            arrays.push((a.clone(), size));
            class_subst.insert(root, (ParamSubst::Array(a, size), ArgMap::Promoted { to, size }));
        } else {
            let p = Var::new(names.fresh(&format!("{kname}_{}", v.name())), v.ty());
            class_subst
                .insert(root, (ParamSubst::Param(p.clone()), ArgMap::Param(fused_params.len())));
            fused_params.push(p);
        }
    }
    for (a, size) in &arrays {
        prologue.push(Stmt::alloc(a, *size));
    }

    // The global linear id of the fused range, if any entry needs it.
    let f = &plan.fused;
    let glid = Var::new(names.fresh("fused_glid"), Type::U32);
    let needs_glid = plan.entries.iter().any(|e| e.guard || e.remap_ids);
    if needs_glid {
        let rel = |d: usize| {
            let g = Expr::global_id(d as u8);
            if f.offset[d] == 0 {
                g
            } else {
                g - Expr::u32(f.offset[d])
            }
        };
        let mut e = rel(f.dims - 1);
        for d in (0..f.dims - 1).rev() {
            e = rel(d) + Expr::u32(f.global[d]) * e;
        }
        prologue.push(Stmt::let_(&glid, e));
    }

    // Entry bodies.
    let mut hoisted: Vec<Stmt> = Vec::new();
    let mut body: Vec<Stmt> = Vec::new();
    let mut args_map: Vec<Vec<ArgMap>> = Vec::new();
    for (e, k) in kernels.iter().enumerate() {
        let mut params = HashMap::new();
        let mut amap = Vec::new();
        for (p, v) in k.params().iter().enumerate() {
            let i = base[e] + p;
            let root = uf.find(i);
            let (subst, m) = &class_subst[&root];
            params.insert(v.name().to_string(), subst.clone());
            amap.push(match m {
                ArgMap::Param(x) if root != i => ArgMap::Identical(*x),
                m => m.clone(),
            });
        }
        args_map.push(amap);
        let ep = &plan.entries[e];
        let mut rw = Rewriter {
            params,
            renames: HashMap::new(),
            names: &mut names,
            remap: remap::Remap {
                plan: ep,
                heterogeneous: plan.heterogeneous,
                mode: spec.remap,
                glid: &glid,
            },
        };
        let mut stmts = Vec::new();
        for s in k.body().stmts() {
            let s = rw.mutate_stmt(s);
            match s.node() {
                StmtNode::Alloc { var, .. } if var.ty().addr_space() == Some(AddrSpace::Local) => {
                    hoisted.push(s)
                }
                _ => stmts.push(s),
            }
        }
        if e > 0 && spec.barriers == BarrierPolicy::WorkGroup {
            body.push(Stmt::barrier(MemFence::BOTH));
        }
        if ep.guard {
            let n = ep.range.linear() as u32;
            body.push(Stmt::if_(glid.expr().cmp_lt(Expr::u32(n)), Stmt::block(stmts)));
        } else {
            body.extend(stmts);
        }
    }

    let mut all_stmts = hoisted;
    all_stmts.extend(prologue);
    all_stmts.extend(body);
    let attrs = Attrs {
        reqd_work_group_size: kernels.iter().find_map(|k| k.attrs().reqd_work_group_size),
        fast_math: kernels.iter().all(|k| k.attrs().fast_math),
        nd_range: Some(nd_range_attr(&plan.fused)),
        fused: Some(FusedAttr {
            kernels: spec.kernels.clone(),
            args: args_map.iter().map(|a| a.iter().map(fused_arg).collect()).collect(),
        }),
    };
    let kernel = Kernel::with_attrs(name, fused_params, attrs, Stmt::block(all_stmts));
    let verify = |k: &Kernel| -> Result<(), FusionError> {
        if opts.verify {
            kiln_ir::verify_kernel(k).map_err(|es| {
                FusionError::Internal(
                    es.iter().map(|e| e.message.clone()).collect::<Vec<_>>().join("; "),
                )
            })?;
        }
        Ok(())
    };
    verify(&kernel)?;
    let kernel = (opts.post_fusion)(&kernel);
    verify(&kernel)?;
    Ok(FusedKernel { kernel, range: plan.fused, args: args_map, warnings })
}
