//! `complete_fusion`'s call into the fusion JIT: a queue's fusion list becomes a
//! [`FusionSpec`] (identical arguments, promotions from the accessors' and buffers'
//! properties, scalar arguments as constants, the barrier policy), the fused kernel comes
//! from the context's fusion cache or from [`kiln_passes::fusion::fuse_kernels`], and its
//! launch binds the members' current arguments.
//!
//! The cache key is the fusion key ([`fusion_key`]: the spec's identical-argument
//! partition, promotions, constants and barrier policy) with the members' programs and
//! kernel names (their full identity, compared in full on a hit), every nd-range and the
//! access mode, length and range of every buffer argument. A second identical sequence is a hit;
//! another kernel, nd-range, identity pattern of the arguments, promotion, scalar value or
//! property is a miss, as in DPC++'s fusion cache.
//!
//! Fusion runs every work-item's entries one after another (with a work-group barrier
//! between them unless `no_barriers`, or unless every shared buffer is proven per
//! work-item, when the barrier orders nothing), so it is legal only when no work-item reads
//! or overwrites what another work-item of another entry wrote (outside its work-group,
//! with barriers). kiln proves it with the promotion legality check less its rule for
//! fresh arrays ([`fusion_keeps_result`]); a list it cannot prove is not fused: the fusion
//! is cancelled with a warning, never run with a different result.

use std::cell::Cell;
use std::sync::Arc;

use kiln_ir::launch::NdRange;
use kiln_ir::{parse_module, Imm, Kernel, Module, Type};
use kiln_passes::fusion::internalize::uses_work_group;
use kiln_passes::fusion::{
    fuse_kernels, fusion_keeps_result, fusion_key, ArgMap, BarrierPolicy, ConstValue, Constant,
    FusedKernel, FusionSpec, ParamRef, PromoteTo, Promotion, RangeSpec,
};

use super::FusionProps;
use crate::buffer::{AccessMode, Accessor, BufferInner};
use crate::context::{Context, KernelHandle, ProgramKey};
use crate::scheduler::deps::merge_accessors;
use crate::scheduler::KernelArg;

/// One kernel of a fusion list.
pub(crate) struct Member<'a> {
    pub kernel: &'a KernelHandle,
    pub range: &'a NdRange,
    pub args: &'a [KernelArg],
    /// Its requirements (merged, one per buffer).
    pub accessors: &'a [Accessor],
}

/// The fused launch that replaces a fusion list.
pub(crate) struct Fused {
    pub kernel: KernelHandle,
    pub range: NdRange,
    pub args: Vec<KernelArg>,
    /// The members' requirements, less the promoted buffers.
    pub accessors: Vec<Accessor>,
    pub cache_hit: bool,
    /// Promotions asked for and not done, and why.
    pub warnings: Vec<String>,
}

/// The key of the context's fusion cache (see the module's docs).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FusionCacheKey {
    spec: String,
    members: Vec<(ProgramKey, Arc<str>)>,
}

/// A fused kernel in the cache, or why the list cannot be fused.
pub type FusionOutcome = Result<Arc<FusedEntry>, String>;

/// What the fusion cache keeps for one key.
pub struct FusedEntry {
    module: Module,
    spec: FusionSpec,
    fused: FusedKernel,
    kernel: KernelHandle,
}

/// The cache's weight of an outcome (its kernel's text, roughly).
pub(crate) fn weigh(o: &FusionOutcome) -> usize {
    match o {
        Ok(e) => e.kernel.program.key.image.len() + 256,
        Err(why) => why.len() + 64,
    }
}

/// One argument of the list (a buffer, or one range of it: two ranges of one buffer are two
/// arguments): its parameters, the entries binding it, whether any writes its buffer.
struct Group {
    buffer: Arc<BufferInner>,
    /// The range bound (`None`: the whole buffer).
    range: Option<(usize, usize)>,
    params: Vec<ParamRef>,
    entries: Vec<usize>,
    writes: bool,
}

impl Group {
    /// The elements the kernels see through it: its range's, or the buffer's.
    fn len(&self) -> usize {
        self.range.map_or(self.buffer.len, |r| r.1)
    }
}

/// Refuses a list that binds one written buffer through two arguments whose elements
/// overlap without being the same (a range and its whole buffer, two overlapping ranges):
/// the fusion's legality check reasons per argument, so it would take them for independent
/// memory. Disjoint ranges of one buffer are independent and fine.
fn check_ranges(groups: &[Group]) -> Result<(), String> {
    for (i, a) in groups.iter().enumerate() {
        for b in &groups[i + 1..] {
            if !Arc::ptr_eq(&a.buffer, &b.buffer) || !(a.writes || b.writes) {
                continue;
            }
            let window = |g: &Group| g.range.unwrap_or((0, g.buffer.len));
            let ((ao, al), (bo, bl)) = (window(a), window(b));
            if ao < bo + bl && bo < ao + al {
                let show = |g: &Group| match g.range {
                    Some((o, n)) => format!("elements {o}..{}", o + n),
                    None => "the whole buffer".to_string(),
                };
                return Err(format!(
                    "buffer #{} is written and bound through overlapping accessors ({} and {}), \
                     which the fusion cannot prove independent",
                    a.buffer.id,
                    show(a),
                    show(b)
                ));
            }
        }
    }
    Ok(())
}

pub(crate) fn constant(v: Imm) -> ConstValue {
    match v {
        Imm::Bool(b) => ConstValue::Bool(b),
        Imm::Int(..) => ConstValue::Int(v.as_i128().unwrap_or_default()),
        Imm::Float(_, f) => ConstValue::Float(f),
    }
}

fn accessor_of<'a>(m: &'a Member, b: &Arc<BufferInner>) -> Option<&'a Accessor> {
    m.accessors.iter().find(|a| Arc::ptr_eq(&a.buffer, b))
}

/// The promotion the properties ask for on `g`, if any: the effective request of each
/// entry's accessor is its own property, else the buffer's (both given and different: a
/// conflict); all must agree that the buffer is promoted (a request against none is the
/// JIT's conflict, not promoted); local beats private; and the first entry using it must
/// write it only or declare `no_init` (a promoted buffer starts empty). `Err` says why a
/// request is not honoured.
fn promotion(members: &[Member], g: &Group) -> Result<Option<PromoteTo>, String> {
    let buf = g.buffer.promote();
    let mut asks = Vec::new();
    for &e in &g.entries {
        let acc = accessor_of(&members[e], &g.buffer).map(|a| a.props.promote).unwrap_or(None);
        let eff = match (acc, buf) {
            (Some(a), Some(b)) if a != b => {
                return Err(format!(
                    "the accessor of `{}` asks `{}` but the buffer `{}`",
                    members[e].kernel.name,
                    a.name(),
                    b.name()
                ))
            }
            (Some(a), _) | (None, Some(a)) => a,
            (None, None) => PromoteTo::None,
        };
        asks.push((e, eff));
    }
    if asks.iter().all(|(_, p)| *p == PromoteTo::None) {
        return Ok(None);
    }
    if let Some((e, _)) = asks.iter().find(|(_, p)| *p == PromoteTo::None) {
        return Err(format!(
            "the accessor of `{}` does not ask for promotion while another does (conflicting \
             requests)",
            members[*e].kernel.name
        ));
    }
    let first = &members[g.entries[0]];
    if let Some(a) = accessor_of(first, &g.buffer) {
        if a.mode != AccessMode::Write && !a.props.no_init {
            return Err(format!(
                "the first fused kernel using it, `{}`, reads its contents (a promoted buffer \
                 starts empty: declare that accessor write-only or `no_init`)",
                first.kernel.name
            ));
        }
    }
    let local = asks.iter().any(|(_, p)| *p == PromoteTo::Local);
    Ok(Some(if local { PromoteTo::Local } else { PromoteTo::Private }))
}

fn range_spec(r: &NdRange) -> RangeSpec {
    let d = r.dims.clamp(1, 3);
    let mut s = RangeSpec::new(&r.global[..d]).with_offset(&r.offset[..d]);
    if let Some(l) = r.local {
        s = s.with_local(&l[..d]);
    }
    s
}

/// Fuses `members` through the context's fusion cache.
pub(crate) fn fuse(ctx: &Context, members: &[Member], props: FusionProps) -> Result<Fused, String> {
    let mut names: Vec<String> = Vec::new();
    let mut idents: Vec<(ProgramKey, Arc<str>)> = Vec::new();
    for (e, m) in members.iter().enumerate() {
        let k = m.kernel;
        let key = &k.program.key;
        if k.sanitized.is_some()
            || !key.spec_consts.is_empty()
            || *key.options != *ctx.env_build_options()
        {
            return Err(format!(
                "kernel `{}` was built with build options or specialization constants, which \
                 a fused kernel does not carry",
                k.name
            ));
        }
        let id = (key.clone(), k.name.clone());
        // One name per distinct kernel: a name taken by another program's kernel is
        // made unique with the entry's number.
        let name = match idents.iter().position(|x| x.1 == id.1) {
            Some(i) if idents[i] == id => names[i].clone(),
            Some(_) => format!("{}__k{e}", k.name),
            None => k.name.to_string(),
        };
        names.push(name);
        idents.push(id);
    }
    let mut groups: Vec<Group> = Vec::new();
    let mut constants = Vec::new();
    for (e, m) in members.iter().enumerate() {
        for (p, a) in m.args.iter().enumerate() {
            let acc = match a {
                KernelArg::Scalar(v) => {
                    constants.push(Constant { param: ParamRef::new(e, p), value: constant(*v) });
                    continue;
                }
                KernelArg::Buffer(acc) => acc,
            };
            let writes = accessor_of(m, &acc.buffer).is_some_and(|x| x.mode.writes());
            let same = |g: &&mut Group| Arc::ptr_eq(&g.buffer, &acc.buffer) && g.range == acc.range;
            match groups.iter_mut().find(same) {
                Some(g) => {
                    g.params.push(ParamRef::new(e, p));
                    if !g.entries.contains(&e) {
                        g.entries.push(e);
                    }
                    g.writes |= writes;
                }
                None => groups.push(Group {
                    buffer: acc.buffer.clone(),
                    range: acc.range,
                    params: vec![ParamRef::new(e, p)],
                    entries: vec![e],
                    writes,
                }),
            }
        }
    }
    check_ranges(&groups)?;
    let mut warnings = Vec::new();
    let mut promote = Vec::new();
    for g in &groups {
        // A buffer bound through several ranges stays in global memory: promoting one of
        // them would drop the buffer from the fused command's requirements while another
        // range still uses it.
        let shared = groups.iter().filter(|o| Arc::ptr_eq(&o.buffer, &g.buffer)).count() > 1;
        match promotion(members, g) {
            Ok(None) => {}
            Ok(Some(_)) if shared => warnings.push(format!(
                "buffer #{} is not promoted: the fused kernels bind it through more than one \
                 range",
                g.buffer.id
            )),
            // A ranged accessor's private or local copy holds its range only.
            Ok(Some(to)) => promote.push(Promotion {
                param: g.params[0],
                to,
                size: None,
                buffer_len: Some(u32::try_from(g.len()).map_err(|_| {
                    format!("buffer #{} is longer than 2^32 elements", g.buffer.id)
                })?),
            }),
            Err(why) => warnings.push(format!("buffer #{} is not promoted: {why}", g.buffer.id)),
        }
    }
    let spec = FusionSpec {
        name: format!("fused_{}", names.join("_")),
        kernels: names,
        ndranges: members.iter().map(|m| range_spec(m.range)).collect(),
        identical: groups.iter().filter(|g| g.params.len() > 1).map(|g| g.params.clone()).collect(),
        promote,
        constants,
        barriers: if props.no_barriers { BarrierPolicy::None } else { BarrierPolicy::WorkGroup },
        ..FusionSpec::default()
    };
    // The fusion key of the spec, with what it keys by name alone (the kernels, keyed by
    // their programs here), every range and every buffer argument's access and length.
    let mut key = fusion_key(&Module::new(vec![]), &spec).0;
    for m in members {
        key.push_str(&format!(";{:?}", m.range));
        for a in m.args {
            match a {
                // The legality check bounds accesses by the buffers' (or ranges') lengths,
                // and the ranges decide which arguments are identical.
                KernelArg::Buffer(acc) => {
                    let mode = accessor_of(m, &acc.buffer).map(|x| x.mode);
                    let (elem, len) = (acc.buffer.elem, acc.buffer.len);
                    key.push_str(&format!(",{mode:?}x{len}{elem}@{:?}", acc.range));
                }
                // The arguments' types were checked against the parameters' on the miss.
                KernelArg::Scalar(v) => key.push_str(&format!(",{}", v.scalar())),
            }
        }
    }
    let key = FusionCacheKey { spec: key, members: idents };
    let built = Cell::new(false);
    let outcome = ctx
        .fusion_cache()
        .get_or_build(&key, || {
            built.set(true);
            Ok(build(ctx, members, &spec, &groups).map(Arc::new))
        })
        .unwrap_or_else(Err)?;
    let args: Vec<Vec<KernelArg>> = members.iter().map(|m| m.args.to_vec()).collect();
    let bound = outcome
        .fused
        .bind_args(&outcome.module, &outcome.spec, &args)
        .map_err(|e| e.to_string())?;
    let mut internal: Vec<&Arc<BufferInner>> = Vec::new();
    for (e, maps) in outcome.fused.args.iter().enumerate() {
        for (p, m) in maps.iter().enumerate() {
            if let (ArgMap::Promoted { .. }, KernelArg::Buffer(a)) = (m, &args[e][p]) {
                internal.push(&a.buffer);
            }
        }
    }
    for w in &outcome.fused.warnings {
        let g = groups.iter().find(|g| g.params.contains(&w.param));
        let b = g.map_or(String::new(), |g| format!("buffer #{} ", g.buffer.id));
        warnings.push(format!("{b}is not promoted: {}", w.reason));
    }
    let accessors = merge_accessors(
        members
            .iter()
            .flat_map(|m| m.accessors.iter().cloned())
            .filter(|a| !internal.iter().any(|b| Arc::ptr_eq(b, &a.buffer))),
    );
    Ok(Fused {
        kernel: outcome.kernel.clone(),
        range: outcome.fused.range.clone(),
        args: bound,
        accessors,
        cache_hit: !built.get(),
        warnings,
    })
}

/// Whether `args` fit the parameters of `kernel` as its launch requires: one argument per
/// parameter, a scalar of the parameter's type, a buffer of the pointer's element type. A
/// kernel whose arguments do not fit is not fused (its own launch then reports the error);
/// `Err` names the kernel (as `name`), the parameter and both types.
pub(crate) fn check_args(name: &str, kernel: &Kernel, args: &[KernelArg]) -> Result<(), String> {
    let params = kernel.params();
    if args.len() != params.len() {
        return Err(format!(
            "kernel `{name}` takes {} arguments, {} given",
            params.len(),
            args.len()
        ));
    }
    for (i, (p, a)) in params.iter().zip(args).enumerate() {
        let (fits, given) = match a {
            KernelArg::Scalar(v) => {
                (p.ty() == Type::Scalar(v.scalar()), format!("a {} scalar", v.scalar()))
            }
            KernelArg::Buffer(acc) => (
                p.ty().is_ptr() && p.ty().elem() == Some(acc.buffer.elem),
                format!("a buffer of {}", acc.buffer.elem),
            ),
        };
        if !fits {
            return Err(format!(
                "kernel `{name}`: parameter `{}` is a {} but argument {i} is {given}",
                p.name(),
                p.ty()
            ));
        }
    }
    Ok(())
}

/// A cache miss: the members' IR, the legality check, the fusion and the build.
fn build(
    ctx: &Context,
    members: &[Member],
    spec: &FusionSpec,
    groups: &[Group],
) -> Result<FusedEntry, String> {
    let mut kernels: Vec<Kernel> = Vec::new();
    let mut parsed: Vec<(Arc<str>, Module)> = Vec::new();
    for (m, name) in members.iter().zip(&spec.kernels) {
        let image = &m.kernel.program.key.image;
        if !parsed.iter().any(|(i, _)| Arc::ptr_eq(i, image)) {
            parsed.push((image.clone(), parse_module(image).map_err(|d| d.to_string())?));
        }
        let module = &parsed.iter().find(|(i, _)| Arc::ptr_eq(i, image)).expect("parsed").1;
        let ir = module
            .kernel(&m.kernel.name)
            .ok_or_else(|| format!("kernel `{}` is not in its program", m.kernel.name))?;
        check_args(&m.kernel.name, ir, m.args)?;
        if kernels.iter().any(|k| k.name() == name) {
            continue;
        }
        kernels.push(Kernel::with_attrs(
            name,
            ir.params().to_vec(),
            ir.attrs().clone(),
            ir.body().clone(),
        ));
    }
    let module = Module::new(kernels);
    let per_item = legal(&module, spec, members, groups)?;
    // A barrier between the entries orders nothing when every buffer they share is accessed
    // per work-item (and no entry uses local memory or barriers itself): leave it out, as `no_barriers` would
    // (on the cpu device a barrier also turns the work-item loop into resumable frames).
    let local = spec.promote.iter().any(|p| p.to == PromoteTo::Local)
        || module.kernels.iter().any(|k| uses_work_group(k.body()));
    let spec = &if per_item && !local && spec.barriers == BarrierPolicy::WorkGroup {
        FusionSpec { barriers: BarrierPolicy::None, ..spec.clone() }
    } else {
        spec.clone()
    };
    let fused = fuse_kernels(&module, spec).map_err(|e| e.to_string())?;
    let program = ctx
        .build_program(&Module::new(vec![fused.kernel.clone()]), &[], "")
        .map_err(|e| e.to_string())?;
    let kernel = ctx.kernel(&program, fused.kernel.name()).map_err(|e| e.to_string())?;
    Ok(FusedEntry { module, spec: spec.clone(), fused, kernel })
}

/// Whether running the entries one after another per work-item gives the same result as
/// running them one after another: every buffer one entry writes and another touches is
/// accessed per work-item (`Ok(true)`, also when there is none), or, with barriers between
/// the entries and an explicit local size, per work-group (`Ok(false)`)
/// ([`fusion_keeps_result`]).
fn legal(
    module: &Module,
    spec: &FusionSpec,
    members: &[Member],
    groups: &[Group],
) -> Result<bool, String> {
    let shared: Vec<(ParamRef, Option<u32>)> = groups
        .iter()
        .filter(|g| g.writes && g.entries.len() > 1)
        .map(|g| (g.params[0], u32::try_from(g.len()).ok()))
        .collect();
    if shared.is_empty() {
        return Ok(true);
    }
    // An error that refuses the list whatever its accesses is reported as it is.
    let keeps = |per_group| fusion_keeps_result(module, spec, &shared, per_group);
    let Err(why) = keeps(false).map_err(|e| e.to_string())? else { return Ok(true) };
    let per_group = spec.barriers == BarrierPolicy::WorkGroup
        && members.iter().all(|m| m.range.local.is_some());
    if per_group && keeps(true).map_err(|e| e.to_string())?.is_ok() {
        return Ok(false);
    }
    Err(not_per_item(per_group, &why))
}

/// The reason a list is not fused when a buffer it shares is not proven accessed per
/// work-item (or `per_group`, per work-group): `why` names the buffer and the access. Graph
/// chain fusion gives the same text.
pub(crate) fn not_per_item(per_group: bool, why: &str) -> String {
    format!(
        "fusing would change the result: a buffer one kernel writes and another uses is not \
         provably accessed per work-item{}: {why}",
        if per_group { " or per work-group" } else { "" }
    )
}
