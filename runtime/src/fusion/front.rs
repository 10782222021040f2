//! The fusion front end: what a queue's fusion list ([`crate::QueueFusion::complete_fusion`]) and a
//! command graph's kernel chains ([`crate::graph::GraphProperties::fuse_chains`]) both call
//! to become one kernel. From a list of launches (kernel, nd-range, arguments, accessors) it
//! makes the [`FusionSpec`] (identical arguments, scalar arguments as constants, the
//! promotions the caller asks for, the barrier policy) over the members' own IR, which each
//! built program keeps ([`crate::context::ProgramData::module`]): kernels are never printed
//! and parsed back. It judges the list by one rule ([`FusionFront::check`]), fuses it with
//! [`kiln_passes::fusion::fuse_kernels`], and keeps the fused kernels in its cache.
//!
//! The cache key is the list's shape ([`FusionCacheKey`]), made from the launches without
//! formatting or fusing anything: the members' programs and kernel names (their full
//! identity, compared in full on a hit), every nd-range, every scalar argument's bits, and
//! for every buffer argument which of the list's buffers it is (by first use), its range,
//! length, element type, access mode and promotion properties, and the barrier and
//! promotion requests. Everything the fusion spec ([`kiln_passes::fusion::fusion_key`]) is
//! made of follows from these, so a repeated list costs one hash and one comparison. A
//! second identical sequence is a hit, from a queue or a graph alike; another kernel,
//! nd-range, identity pattern of the arguments, promotion, scalar value or property is a
//! miss, as in DPC++'s fusion cache.
//!
//! The rule: fusion runs every work-item's entries one after another (with a work-group
//! barrier between them when the caller allows it, unless every shared buffer is proven per
//! work-item, when the barrier orders nothing), so it is legal only when no work-item reads
//! or overwrites what another work-item of another entry wrote (outside its work-group,
//! with barriers). kiln proves it with the promotion legality check less its rule for
//! fresh arrays ([`fusion_keeps_result`]), each access judged under its guard with the
//! scalar arguments as constants; a list it cannot prove is not fused, never run with a
//! different result.

use std::cell::Cell;
use std::sync::Arc;

use hashbrown::{HashMap, HashSet};
use kiln_ir::launch::NdRange;
use kiln_ir::{Imm, Kernel, Module, Scalar};
use kiln_passes::fusion::{
    explain, fuse_kernels, fusion_keeps_result, ArgMap, BarrierPolicy, BufferReport, ConstValue,
    Constant, FusedKernel, FusionSpec, ParamRef, PromoteTo, Promotion, RangeSpec,
};

use crate::buffer::merge_accessors;
use crate::buffer::{arg_view, AccessMode, AccessProps, Accessor, Arg, BufferInner};
use crate::cache::{BuildCache, CacheStats};
use crate::context::{Context, KernelHandle, LayerCache, ProgramKey};

/// One launch of a list to fuse.
pub(crate) struct Member<'a> {
    pub kernel: &'a KernelHandle,
    pub range: &'a NdRange,
    pub args: &'a [Arg],
    /// Its requirements (merged, one per buffer).
    pub accessors: &'a [Accessor],
}

/// Which buffers the caller wants promoted.
pub(crate) enum Promote<'a> {
    /// None.
    Nothing,
    /// As the properties of the accessors and buffers ask (a queue's fusion list).
    Requested,
    /// To private memory, every buffer one entry writes and another uses that no command
    /// outside the list uses (`outside` says which are used outside: a graph's chain with
    /// `internalize`).
    Unshared(&'a dyn Fn(&BufferInner) -> bool),
}

/// What the caller asks of a fusion.
pub(crate) struct Request<'a> {
    /// Whether a work-group barrier may separate the entries (then lists accessed per
    /// work-group fuse too).
    pub barriers: bool,
    pub promote: Promote<'a>,
}

/// The fused launch that replaces a list.
pub(crate) struct Fused {
    pub entry: Arc<FusedEntry>,
    pub args: Vec<Arg>,
    /// The members' requirements, less the promoted buffers.
    pub accessors: Vec<Accessor>,
    pub cache_hit: bool,
    /// Promotions asked for and not done, and why.
    pub warnings: Vec<String>,
}

/// The key of the fusion cache (see the module's docs): the list's shape, everything its
/// fusion depends on, made from the launches without formatting or building anything, so a
/// list seen before costs one hash and one comparison.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FusionCacheKey {
    barriers: bool,
    members: Vec<MemberShape>,
}

/// What the request asks of one buffer argument about promotion: the same list from a
/// queue and from a graph has one key when neither asks for any.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Ask {
    /// Nothing.
    Nothing,
    /// As the accessor's properties and the buffer's say ([`Promote::Requested`]).
    Props(AccessProps, Option<PromoteTo>),
    /// Promoted if one entry writes it and another uses it ([`Promote::Unshared`], a buffer
    /// not used outside the list).
    Unshared,
}

/// One launch of a list, as the fusion cache keys it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct MemberShape {
    /// The kernel's identity: its program and name.
    kernel: (ProgramKey, Arc<str>),
    dims: usize,
    global: [u32; 3],
    local: Option<[u32; 3]>,
    offset: [u32; 3],
    args: Vec<ArgShape>,
}

/// One argument of a launch, as the fusion cache keys it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum ArgShape {
    /// A scalar: a constant of the fused kernel, by its bits.
    Scalar(Scalar, u64),
    /// A buffer, named by the order in which the list first binds it (which arguments are
    /// identical, not which buffer), with what the legality check and the promotions read.
    Buffer {
        buffer: usize,
        range: Option<(usize, usize)>,
        len: usize,
        elem: Scalar,
        /// The launch's requirement on the buffer.
        access: Option<AccessMode>,
        ask: Ask,
    },
}

impl FusionCacheKey {
    fn new(members: &[Member], req: &Request) -> FusionCacheKey {
        let mut buffers: Vec<*const BufferInner> = Vec::new();
        let members = members
            .iter()
            .map(|m| {
                let args = m
                    .args
                    .iter()
                    .map(|a| match arg_view(a) {
                        None => {
                            let v = a.imm().expect("an argument is a scalar or a buffer");
                            ArgShape::Scalar(v.scalar(), v.to_bits())
                        }
                        Some((buf, range)) => {
                            let b = Arc::as_ptr(buf);
                            let buffer =
                                buffers.iter().position(|&x| x == b).unwrap_or_else(|| {
                                    buffers.push(b);
                                    buffers.len() - 1
                                });
                            let own = accessor_of(m, buf);
                            let ask = match req.promote {
                                Promote::Nothing => Ask::Nothing,
                                Promote::Requested => {
                                    let props = own.map(|x| x.props).unwrap_or_default();
                                    match (props, buf.promote()) {
                                        (p, None) if p == AccessProps::default() => Ask::Nothing,
                                        (p, b) => Ask::Props(p, b),
                                    }
                                }
                                Promote::Unshared(outside) if outside(buf) => Ask::Nothing,
                                Promote::Unshared(_) => Ask::Unshared,
                            };
                            ArgShape::Buffer {
                                buffer,
                                range,
                                len: buf.len,
                                elem: buf.elem,
                                access: own.map(|x| x.mode),
                                ask,
                            }
                        }
                    })
                    .collect();
                MemberShape {
                    kernel: (m.kernel.program.key.clone(), m.kernel.name.clone()),
                    dims: m.range.dims,
                    global: m.range.global,
                    local: m.range.local,
                    offset: m.range.offset,
                    args,
                }
            })
            .collect();
        FusionCacheKey { barriers: req.barriers, members }
    }
}

/// A fused kernel in the cache, or why the list cannot be fused.
pub type FusionOutcome = Result<Arc<FusedEntry>, String>;

/// What the fusion cache keeps for one key: the fused kernel, and what binds its arguments.
pub struct FusedEntry {
    module: Module,
    spec: FusionSpec,
    fused: FusedKernel,
    kernel: KernelHandle,
    /// The promotions asked for and not done before fusing (the first parameter bound to
    /// the buffer, and why), named with the buffer of each list that hits.
    refused: Vec<(ParamRef, String)>,
}

impl FusedEntry {
    /// The fused kernel, built.
    pub(crate) fn kernel(&self) -> &KernelHandle {
        &self.kernel
    }

    /// The nd-range the fused kernel runs over.
    pub(crate) fn range(&self) -> &NdRange {
        &self.fused.range
    }

    /// The fused launch's arguments for the members' current ones, and its requirements
    /// (the members', less the promoted buffers).
    pub(crate) fn bind(&self, members: &[Member]) -> Result<(Vec<Arg>, Vec<Accessor>), String> {
        let args: Vec<Vec<Arg>> = members.iter().map(|m| m.args.to_vec()).collect();
        let bound =
            self.fused.bind_args(&self.module, &self.spec, &args).map_err(|e| e.to_string())?;
        let mut internal: Vec<&Arc<BufferInner>> = Vec::new();
        for (e, maps) in self.fused.args.iter().enumerate() {
            for (p, m) in maps.iter().enumerate() {
                if let (ArgMap::Promoted { .. }, Some(a)) = (m, args[e][p].buffer()) {
                    internal.push(&a.buffer);
                }
            }
        }
        let accessors = merge_accessors(
            members
                .iter()
                .flat_map(|m| m.accessors.iter().cloned())
                .filter(|a| !internal.iter().any(|b| Arc::ptr_eq(b, &a.buffer))),
        );
        Ok((bound, accessors))
    }
}

/// The cache's weight of an outcome (its kernel's text, roughly).
fn weigh(o: &FusionOutcome) -> usize {
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

    /// Whether one entry writes it and another uses it: its accesses decide legality.
    fn shared(&self) -> bool {
        self.writes && self.entries.len() > 1
    }

    fn len_u32(&self) -> Result<u32, String> {
        u32::try_from(self.len())
            .map_err(|_| format!("buffer #{} is longer than 2^32 elements", self.buffer.id))
    }
}

/// Refuses a list that binds one written buffer through two arguments whose elements
/// overlap without being the same (a range and its whole buffer, two overlapping ranges):
/// the legality check reasons per argument, so it would take them for independent memory.
/// Disjoint ranges of one buffer are independent and fine.
fn check_ranges(groups: &[Group]) -> Result<(), String> {
    // Only arguments of one buffer can overlap: each is compared with the earlier ones of
    // its buffer (a chain of a thousand kernels has a thousand buffers).
    let mut earlier: HashMap<u64, Vec<&Group>> = HashMap::new();
    for b in groups {
        let same = earlier.entry(b.buffer.id).or_default();
        for &a in same.iter().filter(|a| a.writes || b.writes) {
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
        same.push(b);
    }
    Ok(())
}

fn constant(v: Imm) -> ConstValue {
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
fn requested(members: &[Member], g: &Group) -> Result<Option<PromoteTo>, String> {
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

/// The reason a list is not fused when a buffer it shares is not proven accessed per
/// work-item (or `per_group`, per work-group): `why` names the buffer and the access.
fn not_per_item(per_group: bool, why: &str) -> String {
    format!(
        "fusing would change the result: a buffer one kernel writes and another uses is not \
         provably accessed per work-item{}: {why}",
        if per_group { " or per work-group" } else { "" }
    )
}

/// A list made ready for the fusion JIT: its distinct kernels' IR under distinct names, the
/// entries' names, and its arguments.
struct Input {
    module: Module,
    names: Vec<String>,
    groups: Vec<Group>,
    constants: Vec<Constant>,
}

impl Input {
    /// `Err` when a member cannot be fused at all, saying why.
    fn new(ctx: &Context, members: &[Member]) -> Result<Input, String> {
        let mut kernels: Vec<Kernel> = Vec::new();
        let mut names: Vec<String> = Vec::new();
        // Each distinct kernel's index in `kernels`, and each kernel name's first user.
        let mut distinct: HashMap<(ProgramKey, Arc<str>), usize> = HashMap::new();
        let mut taken: HashSet<Arc<str>> = HashSet::new();
        for (e, m) in members.iter().enumerate() {
            let ir = FusionFront::ir(ctx, m)?;
            let id = (m.kernel.program.key.clone(), m.kernel.name.clone());
            let at = match distinct.get(&id) {
                Some(&at) => at,
                None => {
                    // One name per distinct kernel: a name taken by another program's kernel
                    // is made unique with the entry's number.
                    let name = if !taken.insert(m.kernel.name.clone()) {
                        format!("{}__k{e}", m.kernel.name)
                    } else {
                        m.kernel.name.to_string()
                    };
                    // The kernel itself (one reference count) unless it is renamed.
                    kernels.push(if name == ir.name() {
                        ir
                    } else {
                        Kernel::with_attrs(
                            &name,
                            ir.params().to_vec(),
                            ir.attrs().clone(),
                            ir.body().clone(),
                        )
                    });
                    distinct.insert(id.clone(), kernels.len() - 1);
                    kernels.len() - 1
                }
            };
            names.push(kernels[at].name().to_string());
        }
        let mut groups: Vec<Group> = Vec::new();
        let mut group_of: HashMap<(u64, Option<(usize, usize)>), usize> = HashMap::new();
        let mut constants = Vec::new();
        for (e, m) in members.iter().enumerate() {
            for (p, a) in m.args.iter().enumerate() {
                let Some((buffer, range)) = arg_view(a) else {
                    if let Some(v) = a.imm() {
                        let param = ParamRef::new(e, p);
                        constants.push(Constant { param, value: constant(v) });
                    }
                    continue;
                };
                let writes = accessor_of(m, buffer).is_some_and(|x| x.mode.writes());
                let g = *group_of.entry((buffer.id, range)).or_insert_with(|| {
                    groups.push(Group {
                        buffer: buffer.clone(),
                        range,
                        params: Vec::new(),
                        entries: Vec::new(),
                        writes: false,
                    });
                    groups.len() - 1
                });
                let g = &mut groups[g];
                g.params.push(ParamRef::new(e, p));
                if g.entries.last() != Some(&e) {
                    g.entries.push(e);
                }
                g.writes |= writes;
            }
        }
        check_ranges(&groups)?;
        Ok(Input { module: Module::new(kernels), names, groups, constants })
    }

    /// The spec fusing the list with `promote` and the barrier policy asked for; the
    /// promotions asked for and not honoured, with why.
    fn spec(
        &self,
        members: &[Member],
        req: &Request,
    ) -> Result<(FusionSpec, Vec<(ParamRef, String)>), String> {
        let mut warnings = Vec::new();
        let mut promote = Vec::new();
        let mut ranges_of: HashMap<u64, usize> = HashMap::new();
        for g in &self.groups {
            *ranges_of.entry(g.buffer.id).or_default() += 1;
        }
        for g in &self.groups {
            let asked = match req.promote {
                Promote::Nothing => Ok(None),
                Promote::Requested => requested(members, g),
                Promote::Unshared(outside) => {
                    Ok((g.shared() && !outside(&g.buffer)).then_some(PromoteTo::Private))
                }
            };
            // A buffer bound through several ranges stays in global memory: promoting one of
            // them would drop the buffer from the fused command's requirements while another
            // range still uses it.
            let ranges = ranges_of[&g.buffer.id];
            match asked {
                Ok(None) => {}
                Ok(Some(_)) if ranges > 1 => warnings.push((
                    g.params[0],
                    "the fused kernels bind it through more than one range".to_string(),
                )),
                // A ranged accessor's private or local copy holds its range only.
                Ok(Some(to)) => promote.push(Promotion {
                    param: g.params[0],
                    to,
                    size: None,
                    buffer_len: Some(g.len_u32()?),
                }),
                Err(why) => warnings.push((g.params[0], why)),
            }
        }
        // The distinct kernels' names, at most four, name the fused kernel.
        let mut shown: Vec<&str> = Vec::new();
        for n in &self.names {
            if !shown.contains(&n.as_str()) {
                shown.push(n);
            }
        }
        let more = shown.len() > 4;
        shown.truncate(4);
        let spec = FusionSpec {
            name: format!("fused_{}{}", shown.join("_"), if more { "_etc" } else { "" }),
            kernels: self.names.clone(),
            ndranges: members.iter().map(|m| range_spec(m.range)).collect(),
            identical: self
                .groups
                .iter()
                .filter(|g| g.params.len() > 1)
                .map(|g| g.params.clone())
                .collect(),
            promote,
            constants: self.constants.clone(),
            barriers: if req.barriers { BarrierPolicy::WorkGroup } else { BarrierPolicy::None },
            ..FusionSpec::default()
        };
        Ok((spec, warnings))
    }

    /// Whether running the entries one after another per work-item gives the same result as
    /// running them one after another: every buffer one entry writes and another touches is
    /// accessed per work-item (`Ok(true)`, also when there is none), or, with barriers
    /// between the entries and an explicit local size, per work-group (`Ok(false)`)
    /// ([`fusion_keeps_result`]).
    fn legal(&self, spec: &FusionSpec, members: &[Member]) -> Result<bool, String> {
        let shared: Vec<(ParamRef, Option<u32>)> = self
            .groups
            .iter()
            .filter(|g| g.shared())
            .map(|g| (g.params[0], u32::try_from(g.len()).ok()))
            .collect();
        if shared.is_empty() {
            return Ok(true);
        }
        // An error that refuses the list whatever its accesses is reported as it is.
        let keeps = |per_group| fusion_keeps_result(&self.module, spec, &shared, per_group);
        let Err(why) = keeps(false).map_err(|e| e.to_string())? else { return Ok(true) };
        let per_group = spec.barriers == BarrierPolicy::WorkGroup
            && members.iter().all(|m| m.range.local.is_some());
        if per_group && keeps(true).map_err(|e| e.to_string())?.is_ok() {
            return Ok(false);
        }
        Err(not_per_item(per_group, &why))
    }
}

/// The fusion front end of `ctx`: made at its first use, kept by the context.
pub(crate) fn of(ctx: &Context) -> &FusionFront {
    ctx.layer_cache(FusionFront::new)
}

impl LayerCache for FusionFront {
    fn stats(&self) -> CacheStats {
        self.cache.stats()
    }

    fn clear(&self) {
        self.cache.clear()
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// The fusion front end and its cache of fused kernels; each [`Context`] holds one.
pub(crate) struct FusionFront {
    cache: BuildCache<FusionCacheKey, FusionOutcome, String>,
}

impl FusionFront {
    /// A front end whose cache holds at most `max_bytes` (0: unlimited).
    pub(crate) fn new(max_bytes: u64) -> FusionFront {
        FusionFront { cache: BuildCache::new(max_bytes, weigh) }
    }

    /// The fused kernels in the cache.
    pub(crate) fn kernels(&self) -> Vec<Kernel> {
        self.cache.values().into_iter().flatten().map(|e| e.fused.kernel.clone()).collect()
    }

    /// The IR of `m`'s kernel, if it can be fused at all: built without build options,
    /// specialization constants or the sanitizer (none of which a fused kernel carries),
    /// and given arguments that fit its parameters. `Err` says why not.
    fn ir(ctx: &Context, m: &Member) -> Result<Kernel, String> {
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
        let ir = k
            .program
            .module
            .kernel(&k.name)
            .ok_or_else(|| format!("kernel `{}` is not in its program", k.name))?;
        // A kernel whose arguments do not fit is not fused (its own launch then reports
        // the error).
        crate::buffer::check_kernel_args(ir, m.args)
            .map_err(|e| format!("kernel `{}`: {e}", k.name))?;
        Ok(ir.clone())
    }

    /// Whether `m` can be an entry of a fused list at all; `Err` says why not.
    pub(crate) fn joinable(ctx: &Context, m: &Member) -> Result<(), String> {
        Self::ir(ctx, m).map(|_| ())
    }

    /// Whether `members`, fused without barriers between them, keep the result: the rule
    /// (see the module's docs), without building anything. `Err` says why not, in the words
    /// [`fuse`](Self::fuse) uses.
    pub(crate) fn check(&self, ctx: &Context, members: &[Member]) -> Result<(), String> {
        let input = Input::new(ctx, members)?;
        let req = Request { barriers: false, promote: Promote::Nothing };
        let (spec, _) = input.spec(members, &req)?;
        input.legal(&spec, members).map(|_| ())
    }

    /// What fusion decides about each buffer of `members` that more than one of them
    /// touches or a promotion names, as `kiln fuse --explain` reports it.
    pub(crate) fn explain(
        &self,
        ctx: &Context,
        members: &[Member],
        req: &Request,
    ) -> Result<Vec<BufferReport>, String> {
        let input = Input::new(ctx, members)?;
        let (spec, _) = input.spec(members, req)?;
        explain(&input.module, &spec).map_err(|e| e.to_string())
    }

    /// Fuses `members` as `req` asks, through the cache; `Err` says why they cannot be.
    pub(crate) fn fuse(
        &self,
        ctx: &Context,
        members: &[Member],
        req: &Request,
    ) -> Result<Fused, String> {
        let key = FusionCacheKey::new(members, req);
        // A list that is not in the cache is checked before the cache counts a build: one
        // that cannot be fused at all is refused as it is, and nothing is cached for it.
        let mut input = match self.cache.get(&key) {
            Some(_) => None,
            None => Some(Input::new(ctx, members)?),
        };
        let built = Cell::new(false);
        let entry = self
            .cache
            .get_or_build(&key, || {
                built.set(true);
                let input = match input.take() {
                    Some(i) => i,
                    None => Input::new(ctx, members)?,
                };
                let (spec, refused) = input.spec(members, req)?;
                Ok(build(ctx, &input, spec, refused, members).map(Arc::new))
            })
            .unwrap_or_else(Err)?;
        let (args, accessors) = entry.bind(members)?;
        // The warnings name this list's buffers.
        let buffer = |p: &ParamRef| match members
            .get(p.entry)
            .and_then(|m| m.args.get(p.param))
            .and_then(arg_view)
        {
            Some((b, _)) => format!("buffer #{} ", b.id),
            None => String::new(),
        };
        let fused = entry.fused.warnings.iter().map(|w| (&w.param, &w.reason));
        let warnings = (entry.refused.iter().map(|(p, why)| (p, why)))
            .chain(fused)
            .map(|(p, why)| format!("{}is not promoted: {why}", buffer(p)))
            .collect();
        Ok(Fused { entry, args, accessors, cache_hit: !built.get(), warnings })
    }
}

/// A cache miss: the legality check, the fusion and the build.
fn build(
    ctx: &Context,
    input: &Input,
    spec: FusionSpec,
    refused: Vec<(ParamRef, String)>,
    members: &[Member],
) -> Result<FusedEntry, String> {
    let per_item = input.legal(&spec, members)?;
    let spec = super::rule::settle_barriers(&input.module, spec, per_item);
    let fused = fuse_kernels(&input.module, &spec).map_err(|e| e.to_string())?;
    let program = ctx
        .build_program(&Module::new(vec![fused.kernel.clone()]), &[], "")
        .map_err(|e| e.to_string())?;
    let kernel = ctx.kernel(&program, fused.kernel.name()).map_err(|e| e.to_string())?;
    Ok(FusedEntry { module: input.module.clone(), spec, fused, kernel, refused })
}
