//! [`fuse_kernels_with`]: the fusion driver, one function per step of the module docs'
//! list.

use hashbrown::HashMap;
use kiln_ir::{
    AddrSpace, Attrs, Expr, FusedArg, FusedAttr, Imm, Kernel, MemFence, Module, Mutator, Stmt,
    StmtNode, Type, Var,
};

use super::ndrange::{self, Plan};
use super::rewrite::{Names, ParamSubst, Rewriter};
use super::spec::{ArgMap, BarrierPolicy, FusionSpec, ParamRef, PromoteTo};
use super::{internalize, nd_range_attr, promote, remap, FuseOptions, FusedKernel, FusionError};

/// Every entry's kernel and parameters, numbered flat, with each parameter's class of
/// identical parameters (its root: the first member).
pub(super) struct Params<'m> {
    /// The kernel of each entry.
    pub kernels: Vec<&'m Kernel>,
    /// The flat number of each entry's first parameter.
    pub base: Vec<usize>,
    /// Every parameter of every entry, in entry order.
    pub all: Vec<(ParamRef, Var)>,
    /// The class root of each flat parameter.
    pub roots: Vec<usize>,
    /// The members of each class with more than one, by root, in flat order: a long chain
    /// has as many classes as entries, and finding each one's members by a scan of every
    /// parameter made its promotions take n^2 steps each.
    pub members: HashMap<usize, Vec<usize>>,
}

impl Params<'_> {
    /// The flat number of `r`, or an error naming it.
    pub fn flat(&self, r: ParamRef) -> Result<usize, FusionError> {
        let bad = |why: String| FusionError::BadParam { entry: r.entry, param: r.param, why };
        let k = self
            .kernels
            .get(r.entry)
            .ok_or_else(|| bad(format!("there are {} entries", self.kernels.len())))?;
        if r.param >= k.params().len() {
            return Err(bad(format!("`{}` has {} parameters", k.name(), k.params().len())));
        }
        Ok(self.base[r.entry] + r.param)
    }

    /// The entries the class `root` appears in, in order, each with the names it goes by
    /// there.
    pub fn names_in_entries(&self, root: usize) -> Vec<(usize, Vec<String>)> {
        let single = [root];
        let members = self.members.get(&root).map_or(&single[..], Vec::as_slice);
        let mut out: Vec<(usize, Vec<String>)> = Vec::new();
        for &m in members {
            let (e, name) = (self.all[m].0.entry, self.all[m].1.name().to_string());
            match out.last_mut() {
                Some((last, names)) if *last == e => names.push(name),
                _ => out.push((e, vec![name])),
            }
        }
        out
    }
}

/// Fuses `spec.kernels` from `module` into one kernel, with `opts` choosing the post-fusion
/// pipeline and whether the result is verified.
pub fn fuse_kernels_with(
    module: &Module,
    spec: &FusionSpec,
    opts: &FuseOptions,
) -> Result<FusedKernel, FusionError> {
    if spec.epilogue {
        return super::epilogue::fuse(module, spec, opts, &mut Vec::new());
    }
    let name = fused_name(spec)?;
    // Fusion's rewrites recurse over expressions: work on the depth-bounded kernels.
    let module = &kiln_ir::depth::bound_module(module);
    let (params, plan, consts) = analyse(module, spec)?;
    // 3. Promotions, per class.
    let (promoted, warnings) = promote::resolve(spec, &params, &plan, &consts)?;
    // 4. The fused signature and the entries' bodies.
    let sig = signature(&params, &consts, &promoted);
    let (body, args) = bodies(spec, &params, &plan, sig)?;
    let attrs = Attrs {
        reqd_work_group_size: params.kernels.iter().find_map(|k| k.attrs().reqd_work_group_size),
        fast_math: params.kernels.iter().all(|k| k.attrs().fast_math),
        nd_range: Some(nd_range_attr(&plan.fused)),
        fused: Some(FusedAttr {
            kernels: spec.kernels.clone(),
            args: args.iter().map(|a| a.iter().map(fused_arg).collect()).collect(),
        }),
    };
    let kernel = Kernel::with_attrs(name, body.params, attrs, Stmt::block(body.stmts));
    // 5. The post-fusion pipeline, with the result verified before and after.
    let kernel = post_fusion(kernel, opts)?;
    Ok(FusedKernel { kernel, range: plan.fused, args, warnings })
}

/// Runs the options' post-fusion pipeline over a fused kernel, verifying it before and
/// after when the options ask (a failure is kiln's own bug: [`FusionError::Internal`]).
pub(super) fn post_fusion(kernel: Kernel, opts: &FuseOptions) -> Result<Kernel, FusionError> {
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
    Ok(kernel)
}

/// Whether fusing `spec` keeps the result of running its entries one after another, for
/// the buffers passed as `shared` (one parameter of each; in practice the buffers one entry
/// writes and another uses): every access to each must be at the work-item's own elements
/// (no two work-items touch one element), or, when `per_group` is set (barriers between the
/// entries and an explicit local size), at its work-group's own elements. This is the
/// promotion legality of [`legality`](super::legality) less its rule that reads see earlier
/// writes in the fused kernel: a buffer that stays in global memory keeps its contents.
/// `Err` is a [`FusionError`] that refuses `spec` whatever its accesses (a type, a constant,
/// an nd-range rule); `Ok(Err)` names the buffer, the kernel and the access not proven.
pub fn fusion_keeps_result(
    module: &Module,
    spec: &FusionSpec,
    shared: &[(ParamRef, Option<u32>)],
    per_group: bool,
) -> Result<Result<(), String>, FusionError> {
    let module = &kiln_ir::depth::bound_module(module);
    let (params, plan, consts) = analyse(module, spec)?;
    let to = if per_group { PromoteTo::Local } else { PromoteTo::Private };
    for &(param, len) in shared {
        params.flat(param)?;
        if let Err(why) = promote::in_place(spec, &params, &plan, &consts, param, to, len) {
            return Ok(Err(why));
        }
    }
    Ok(Ok(()))
}

/// What fusing `spec` rests on, in the order the checks report: the identical-parameter
/// classes (first, so that their errors name parameters), the nd-range plan and its
/// legality, and the constants per class.
pub(super) fn analyse<'m>(
    module: &'m Module,
    spec: &FusionSpec,
) -> Result<(Params<'m>, ndrange::Plan, HashMap<usize, Imm>), FusionError> {
    let params = identical_classes(entry_kernels(module, spec)?, spec)?;
    let kernels = &params.kernels;
    let norms: Vec<ndrange::Norm> = spec
        .ndranges
        .iter()
        .zip(kernels)
        .enumerate()
        .map(|(e, (r, k))| ndrange::normalize(e, r, k))
        .collect::<Result<_, _>>()?;
    let syncs: Vec<bool> = kernels.iter().map(|k| internalize::uses_work_group(k.body())).collect();
    let plan = ndrange::plan(&norms, kernels, &syncs)?;
    let consts = constants(spec, &params)?;
    Ok((params, plan, consts))
}

/// The fused kernel's name: the spec's, or `fused`; it must be an identifier.
pub(super) fn fused_name(spec: &FusionSpec) -> Result<String, FusionError> {
    if spec.kernels.is_empty() {
        return Err(FusionError::Empty);
    }
    let name = if spec.name.is_empty() { "fused".to_string() } else { spec.name.clone() };
    if !kiln_ir::parse::is_identifier(&name) {
        return Err(FusionError::BadName(name));
    }
    Ok(name)
}

/// The kernel of each entry, and one nd-range per entry.
pub(super) fn entry_kernels<'m>(
    module: &'m Module,
    spec: &FusionSpec,
) -> Result<Vec<&'m Kernel>, FusionError> {
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
    Ok(kernels)
}

/// Numbers the parameters flat and merges the identical ones (transitively) into classes.
pub(super) fn identical_classes<'m>(
    kernels: Vec<&'m Kernel>,
    spec: &FusionSpec,
) -> Result<Params<'m>, FusionError> {
    let mut base = Vec::with_capacity(kernels.len());
    let mut all: Vec<(ParamRef, Var)> = Vec::new();
    for (e, k) in kernels.iter().enumerate() {
        base.push(all.len());
        for (p, v) in k.params().iter().enumerate() {
            all.push((ParamRef::new(e, p), v.clone()));
        }
    }
    let roots = (0..all.len()).collect();
    let mut params = Params { kernels, base, roots, all, members: HashMap::new() };
    let mut uf = UnionFind(params.roots.clone());
    for group in &spec.identical {
        let mut first: Option<usize> = None;
        for &r in group {
            let i = params.flat(r)?;
            if let Some(f) = first {
                let (ta, tb) = (params.all[f].1.ty(), params.all[i].1.ty());
                if ta != tb {
                    let a = params.all[f].0;
                    return Err(FusionError::IdenticalTypeMismatch { a, ta, b: r, tb });
                }
                uf.union(f, i);
            } else {
                first = Some(i);
            }
        }
    }
    params.roots = (0..params.all.len()).map(|i| uf.find(i)).collect();
    for (i, &root) in params.roots.iter().enumerate() {
        if root != i {
            params.members.entry(root).or_insert_with(|| vec![root]).push(i);
        }
    }
    Ok(params)
}

/// The constant of each class that has one, checked to fit its parameter exactly.
pub(super) fn constants(
    spec: &FusionSpec,
    params: &Params,
) -> Result<HashMap<usize, Imm>, FusionError> {
    let mut consts: HashMap<usize, Imm> = HashMap::new();
    for c in &spec.constants {
        let i = params.flat(c.param)?;
        let ty = params.all[i].1.ty();
        let Some(s) = ty.scalar() else {
            return Err(FusionError::ConstantNotScalar { at: c.param, ty });
        };
        let root = params.roots[i];
        let imm = c.value.to_imm(s).map_err(|why| FusionError::ConstantDoesNotFit {
            at: c.param,
            kernel: params.kernels[c.param.entry].name().to_string(),
            param: params.all[i].1.name().to_string(),
            ty,
            why,
        })?;
        if consts.get(&root).is_some_and(|old| *old != imm) {
            return Err(FusionError::ConflictingConstants { at: c.param });
        }
        consts.insert(root, imm);
    }
    Ok(consts)
}

/// What each class becomes in the fused kernel, and the fused kernel's parameters.
pub(super) struct Signature {
    pub names: Names,
    pub params: Vec<Var>,
    pub classes: HashMap<usize, (ParamSubst, ArgMap)>,
    pub prologue: Vec<Stmt>,
}

/// Each class becomes a constant, a promoted array or one fused parameter. Parameter names
/// are taken first, so that locals never take them.
pub(super) fn signature(
    params: &Params,
    consts: &HashMap<usize, Imm>,
    promoted: &HashMap<usize, (PromoteTo, u32)>,
) -> Signature {
    let mut names = Names::default();
    let mut fused_params: Vec<Var> = Vec::new();
    let mut classes: HashMap<usize, (ParamSubst, ArgMap)> = HashMap::new();
    let mut arrays: Vec<(Var, u32)> = Vec::new();
    for (i, (r, v)) in params.all.iter().enumerate() {
        let root = params.roots[i];
        if root != i || classes.contains_key(&root) {
            continue;
        }
        let kname = params.kernels[r.entry].name();
        if let Some(imm) = consts.get(&root) {
            classes.insert(root, (ParamSubst::Const(*imm), ArgMap::Constant(*imm)));
        } else if let Some(&(to, size)) = promoted.get(&root) {
            let space = if to == PromoteTo::Local { AddrSpace::Local } else { AddrSpace::Private };
            let elem = v.ty().elem().unwrap_or(kiln_ir::Scalar::U8);
            let a = Var::new(names.fresh(&format!("{kname}_{}", v.name())), Type::ptr(space, elem));
            arrays.push((a.clone(), size));
            classes.insert(root, (ParamSubst::Array(a, size), ArgMap::Promoted { to, size }));
        } else {
            let p = Var::new(names.fresh(&format!("{kname}_{}", v.name())), v.ty());
            classes.insert(root, (ParamSubst::Param(p.clone()), ArgMap::Param(fused_params.len())));
            fused_params.push(p);
        }
    }
    let prologue = arrays.iter().map(|(a, size)| Stmt::alloc(a, *size)).collect();
    Signature { names, params: fused_params, classes, prologue }
}

/// The fused kernel's parameters and statements.
struct Body {
    params: Vec<Var>,
    stmts: Vec<Stmt>,
}

/// The entries' rewritten bodies in order (step 4 of the module docs), after the hoisted
/// local arrays and the prologue; and each original argument's place in the fused kernel.
fn bodies(
    spec: &FusionSpec,
    params: &Params,
    plan: &Plan,
    sig: Signature,
) -> Result<(Body, Vec<Vec<ArgMap>>), FusionError> {
    let Signature { mut names, params: fused_params, classes, mut prologue } = sig;
    // The global linear id of the fused range, if any entry needs it.
    let f = &plan.fused;
    let glid = Var::new(names.fresh("fused_glid"), Type::U32);
    if plan.entries.iter().any(|e| e.guard || e.remap_ids) {
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
    let mut hoisted: Vec<Stmt> = Vec::new();
    let mut body: Vec<Stmt> = Vec::new();
    let mut args_map: Vec<Vec<ArgMap>> = Vec::new();
    for e in 0..params.kernels.len() {
        let ep = &plan.entries[e];
        let remap = remap::Remap {
            plan: ep,
            heterogeneous: plan.heterogeneous,
            mode: spec.remap,
            glid: &glid,
        };
        let (rewritten, amap) = entry_body(params, &classes, e, &mut names, Some(remap));
        args_map.push(amap);
        let mut stmts = Vec::new();
        for s in rewritten {
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
    let mut stmts = hoisted;
    stmts.extend(prologue);
    stmts.extend(body);
    Ok((Body { params: fused_params, stmts }, args_map))
}

/// Entry `e`'s top-level statements rewritten into the fused kernel (parameters substituted
/// by what their classes became, every binding renamed unique, built-ins as `remap` says),
/// and each of its original arguments' place in the fused kernel.
pub(super) fn entry_body(
    params: &Params,
    classes: &HashMap<usize, (ParamSubst, ArgMap)>,
    e: usize,
    names: &mut Names,
    remap: Option<remap::Remap>,
) -> (Vec<Stmt>, Vec<ArgMap>) {
    let k = params.kernels[e];
    let mut substs = HashMap::new();
    let mut amap = Vec::new();
    for (p, v) in k.params().iter().enumerate() {
        let i = params.base[e] + p;
        let root = params.roots[i];
        let (subst, m) = &classes[&root];
        substs.insert(v.name().to_string(), subst.clone());
        amap.push(match m {
            ArgMap::Param(x) if root != i => ArgMap::Identical(*x),
            m => m.clone(),
        });
    }
    let mut rw = Rewriter { params: substs, renames: HashMap::new(), names, remap };
    (k.body().stmts().iter().map(|s| rw.mutate_stmt(s)).collect(), amap)
}

pub(super) fn fused_arg(m: &ArgMap) -> FusedArg {
    match *m {
        ArgMap::Param(i) => FusedArg::Param(i as u32),
        ArgMap::Identical(i) => FusedArg::Identical(i as u32),
        ArgMap::Promoted { to, size } => FusedArg::Promoted { local: to == PromoteTo::Local, size },
        ArgMap::Constant(imm) => FusedArg::Const(imm),
    }
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
