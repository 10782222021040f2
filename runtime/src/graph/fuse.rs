//! Automatic fusion of kernel chains at finalize ([`super::GraphProperties::fuse_chains`]).
//!
//! A *chain* is a sequence of kernel nodes of one partition with equal nd-ranges, each an
//! immediate successor of the previous one, that can run as one node without reordering
//! anything else: contracting it leaves the graph acyclic and its own edges go forward.
//! Chains are grown greedily along the execution order, and the longest prefix of each that
//! passes the legality check below is fused with the fusion JIT ([`kiln_passes::fusion`]);
//! the fused kernel is built through the context's program cache, so an identical chain in
//! another graph is a cache hit. The search takes about n log n steps for n kernels.
//!
//! Fusion runs every work-item's entries one after another, so it is legal only when no
//! work-item reads or overwrites what another work-item of another entry wrote. kiln
//! proves it with the private-promotion legality check: every buffer that one entry writes
//! and another touches must pass it (each work-item touches only its own elements, writes
//! before it reads). Kernels that no passing prefix takes stay as they were, with a `debug`
//! log line (target `kiln::graph`) saying why.
//!
//! With [`super::GraphProperties::internalize`], those buffers that no node outside the
//! chain touches are promoted to private memory: the fused kernel neither reads nor writes
//! them.

use std::sync::Arc;

use hashbrown::{HashMap, HashSet};
use kiln_ir::launch::NdRange;
use kiln_ir::{parse_module, Imm, Kernel, Module};
use kiln_passes::fusion::{
    fuse_kernels, refused_promotions, ArgMap, BarrierPolicy, BindArg, Constant, FusedKernel,
    FusionSpec, ParamRef, PromoteTo, Promotion, RangeSpec,
};

use super::exec::FlatNode;
use super::NodeKind;
use crate::buffer::{Accessor, BufferInner};
use crate::context::{Context, KernelHandle};
use crate::fusion::jit::{check_args, constant, not_per_item};
use crate::scheduler::deps::merge_accessors;
use crate::scheduler::{KernelArg, PreparedLaunch};

impl BindArg for KernelArg {
    fn same(&self, other: &KernelArg) -> bool {
        match (self, other) {
            // Two ranges of one buffer (or a range and the whole) are different arguments.
            (KernelArg::Buffer(a), KernelArg::Buffer(b)) => {
                Arc::ptr_eq(&a.buffer, &b.buffer) && a.range == b.range
            }
            (KernelArg::Scalar(a), KernelArg::Scalar(b)) => a == b,
            _ => false,
        }
    }

    fn scalar(&self) -> Option<Imm> {
        match self {
            KernelArg::Scalar(v) => Some(*v),
            KernelArg::Buffer(_) => None,
        }
    }
}

/// A fused chain: its member nodes, what they were fused as, and the fused kernel.
#[derive(Clone)]
pub(crate) struct FusedUnit {
    pub members: Vec<usize>,
    module: Module,
    spec: FusionSpec,
    fused: FusedKernel,
    kernel: KernelHandle,
}

fn args_of(n: &FlatNode) -> &[KernelArg] {
    match &n.kind {
        NodeKind::Kernel { args, .. } => args,
        _ => &[],
    }
}

impl FusedUnit {
    /// `fused chain [node 1, node 2]`.
    pub fn label(&self, nodes: &[FlatNode]) -> String {
        let names: Vec<&str> = self.members.iter().map(|&m| &*nodes[m].label).collect();
        format!("fused chain [{}]", names.join(", "))
    }

    /// The launch of the fused kernel with the members' current arguments, and its
    /// requirements (the members', less the internalized buffers).
    pub fn launch(&self, nodes: &[FlatNode]) -> Result<(PreparedLaunch, Vec<Accessor>), String> {
        let args: Vec<Vec<KernelArg>> =
            self.members.iter().map(|&m| args_of(&nodes[m]).to_vec()).collect();
        let bound =
            self.fused.bind_args(&self.module, &self.spec, &args).map_err(|e| e.to_string())?;
        let mut internal: HashSet<u64> = HashSet::new();
        for (e, maps) in self.fused.args.iter().enumerate() {
            for (p, m) in maps.iter().enumerate() {
                if let (ArgMap::Promoted { .. }, KernelArg::Buffer(a)) = (m, &args[e][p]) {
                    internal.insert(a.buffer.id);
                }
            }
        }
        let accessors = merge_accessors(
            self.members
                .iter()
                .flat_map(|&m| nodes[m].accessors.iter().cloned())
                .filter(|a| !internal.contains(&a.buffer.id)),
        );
        let launch =
            PreparedLaunch::new(self.kernel.clone(), self.fused.range.clone(), &bound, &accessors);
        Ok((launch, accessors))
    }
}

/// The search for chains: the graph, each node's place in the execution order, and marks
/// stamped per chain, so that no search clears an array (a graph of n nodes is searched in
/// about n steps, plus the nodes between a chain's first and last member).
struct Search<'a> {
    nodes: &'a [FlatNode],
    part: &'a [usize],
    /// Each node's index in the execution order (a topological order).
    pos: Vec<usize>,
    /// Fused into a unit already.
    used: Vec<bool>,
    /// `== stamp`: a member of the current chain.
    member: Vec<u32>,
    /// `== stamp`: known not to be reachable from the current chain.
    clear: Vec<u32>,
    /// `== walk`: seen by the current backward walk.
    seen: Vec<u32>,
    stamp: u32,
    walk: u32,
    /// The chains considered and not fused, with why.
    refused: Vec<RefusedChain>,
}

/// A chain of kernel nodes that finalize considered and did not fuse as one kernel
/// ([`super::ExecGraph::refused_chains`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusedChain {
    /// Its nodes' labels, in order (`node 3`, ``node 3 `name` ``).
    pub nodes: Vec<String>,
    /// Why, as a fusion-aware queue says why it refused a fusion.
    pub reason: String,
}

impl RefusedChain {
    fn new(nodes: &[FlatNode], members: &[usize], reason: String) -> RefusedChain {
        RefusedChain { nodes: members.iter().map(|&m| nodes[m].label.clone()).collect(), reason }
    }
}

impl std::fmt::Display for RefusedChain {
    /// `chain [node 0, node 1] not fused: ...`, at most eight labels shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.nodes.len();
        let shown = if n <= 8 {
            self.nodes.join(", ")
        } else {
            format!(
                "{}, ..., {} ({n} nodes)",
                self.nodes[..4].join(", "),
                self.nodes[n - 2..].join(", ")
            )
        };
        write!(f, "chain [{shown}] not fused as one kernel: {}", self.reason)
    }
}

impl Search<'_> {
    fn range(&self, i: usize) -> Option<&NdRange> {
        match &self.nodes[i].kind {
            NodeKind::Kernel { range, .. } => Some(range),
            _ => None,
        }
    }

    /// Whether `p`, not a member, is reachable from the current chain, whose first member
    /// is at `first` in the order. Then the chain and a successor of `p` cannot be one node
    /// (`p` would run after the chain and before that successor): contracting them would
    /// close a cycle. Walks back from `p` over nodes after `first` (only those can be
    /// reached from the chain), and remembers what it cleared: the chain grows only by
    /// successors of its last member, which come after every node walked here.
    fn reachable(&mut self, p: usize, first: usize) -> bool {
        self.walk += 1;
        let mut stack = vec![p];
        let mut walked = Vec::new();
        while let Some(x) = stack.pop() {
            if self.member[x] == self.stamp {
                return true;
            }
            if self.clear[x] == self.stamp || self.seen[x] == self.walk || self.pos[x] < first {
                continue;
            }
            self.seen[x] = self.walk;
            walked.push(x);
            stack.extend(self.nodes[x].preds.iter().copied());
        }
        for x in walked {
            self.clear[x] = self.stamp;
        }
        false
    }

    /// The successor of `last` that can join `chain` (started at `s`), if one can.
    fn next(&mut self, ir: &mut ChainIr, cx: &Inputs, last: usize) -> Option<usize> {
        let s = ir.members[0];
        let first = self.pos[s];
        for &m in &self.nodes[last].succs {
            if self.used[m] || self.range(m).is_none() || self.part[m] != self.part[s] {
                continue;
            }
            if self.range(m) != self.range(s) {
                tracing::debug!(target: "kiln::graph", "not fusing {} after {}: their nd-ranges differ", self.nodes[m].label, self.nodes[last].label);
                continue;
            }
            let nodes = self.nodes;
            let stamp = self.stamp;
            if nodes[m].preds.iter().any(|&p| self.member[p] != stamp && self.reachable(p, first)) {
                tracing::debug!(target: "kiln::graph", "not fusing {} after {}: another node depends on the chain and {} depends on it", self.nodes[m].label, self.nodes[last].label, self.nodes[m].label);
                continue;
            }
            match ir.push(cx, m) {
                Ok(()) => {
                    self.member[m] = stamp;
                    return Some(m);
                }
                Err(why) => {
                    let mut chain = ir.members.clone();
                    chain.push(m);
                    self.refused.push(RefusedChain::new(self.nodes, &chain, why));
                }
            }
        }
        None
    }
}

/// What the members' IR is made from.
struct Inputs<'a> {
    ctx: &'a Context,
    nodes: &'a [FlatNode],
    kernels: &'a [Option<KernelHandle>],
}

/// One buffer of a chain: its parameters and the entries binding it (both in entry order),
/// and the first entry that writes it.
struct Group {
    buffer: Arc<BufferInner>,
    params: Vec<ParamRef>,
    entries: Vec<usize>,
    first_write: Option<usize>,
}

impl Group {
    /// Whether, among the first `n` entries, one writes it and another uses it: then its
    /// accesses must be proven per work-item.
    fn shared(&self, n: usize) -> bool {
        self.first_write.is_some_and(|w| w < n)
            && self.entries.iter().take_while(|&&e| e < n).nth(1).is_some()
    }

    fn promotion(&self) -> Result<Promotion, String> {
        Ok(Promotion {
            param: self.params[0],
            to: PromoteTo::Private,
            size: None,
            buffer_len: Some(
                u32::try_from(self.buffer.len).map_err(|_| {
                    format!("buffer #{} is longer than 2^32 elements", self.buffer.id)
                })?,
            ),
        })
    }
}

/// A chain's IR as it grows: the members' kernels under distinct names, their ranges, and
/// the buffers they bind.
#[derive(Default)]
struct ChainIr {
    members: Vec<usize>,
    /// The distinct kernels, under the names the spec uses.
    kernels: Vec<Kernel>,
    /// The index in `kernels` of each (program image, kernel name) seen.
    named: HashMap<(usize, Arc<str>), usize>,
    /// The members' programs, parsed once each (by image).
    parsed: HashMap<usize, (Arc<str>, Module)>,
    names: Vec<String>,
    ranges: Vec<RangeSpec>,
    /// The members' scalar arguments, which the fused kernel takes as constants (so guards
    /// like `i < n` bound its accesses).
    constants: Vec<Constant>,
    groups: Vec<Group>,
    /// Each buffer's group, by buffer id.
    group_of: HashMap<u64, usize>,
}

impl ChainIr {
    /// Appends node `m` as the next entry, or says why it cannot be one.
    fn push(&mut self, cx: &Inputs, m: usize) -> Result<(), String> {
        let n = &cx.nodes[m];
        let k = cx.kernels[m].as_ref().ok_or("its kernel was not resolved")?;
        let key = &k.program.key;
        if k.sanitized.is_some()
            || !key.spec_consts.is_empty()
            || *key.options != *cx.ctx.env_build_options()
        {
            return Err(format!(
                "{} was built with build options or specialization constants, which a fused kernel does not carry",
                n.label
            ));
        }
        let NodeKind::Kernel { range, args, .. } = &n.kind else {
            return Err(format!("{} is not a kernel", n.label));
        };
        for a in args {
            // The chain's legality check and promotions reason per buffer; a ranged
            // accessor would need them per range, so such kernels stay unfused.
            if let KernelArg::Buffer(acc) = a {
                if let Some((o, len)) = acc.range {
                    return Err(format!(
                        "{} binds elements {o}..{} of buffer #{} through a ranged \
                         accessor, which graph chain fusion does not handle",
                        n.label,
                        o + len,
                        acc.buffer.id
                    ));
                }
            }
        }
        let image = Arc::as_ptr(&key.image) as *const u8 as usize;
        let at = match self.named.get(&(image, k.name.clone())) {
            Some(&at) => at,
            None => {
                if !self.parsed.contains_key(&image) {
                    let module = parse_module(&key.image).map_err(|d| d.to_string())?;
                    self.parsed.insert(image, (key.image.clone(), module));
                }
                let ir = self.parsed[&image]
                    .1
                    .kernel(&k.name)
                    .ok_or("the kernel is not in its program")?
                    .clone();
                let at = match self.kernels.iter().position(|x| x.name() == ir.name()) {
                    Some(at) if self.kernels[at].is_equal(&ir) => at,
                    Some(_) => {
                        let fresh = format!("{}_{}", ir.name(), self.kernels.len());
                        self.kernels.push(Kernel::with_attrs(
                            &fresh,
                            ir.params().to_vec(),
                            ir.attrs().clone(),
                            ir.body().clone(),
                        ));
                        self.kernels.len() - 1
                    }
                    None => {
                        self.kernels.push(ir);
                        self.kernels.len() - 1
                    }
                };
                self.named.insert((image, k.name.clone()), at);
                at
            }
        };
        check_args(&k.name, &self.kernels[at], args)
            .map_err(|why| format!("{}: {why}", n.label))?;
        let name = self.kernels[at].name().to_string();
        let e = self.members.len();
        let d = range.dims.clamp(1, 3);
        let mut r = RangeSpec::new(&range.global[..d]).with_offset(&range.offset[..d]);
        if let Some(l) = range.local {
            r = r.with_local(&l[..d]);
        }
        // Parameters bound to one buffer are one parameter.
        for (p, a) in args.iter().enumerate() {
            let acc = match a {
                KernelArg::Buffer(acc) => acc,
                KernelArg::Scalar(v) => {
                    let param = ParamRef::new(e, p);
                    self.constants.push(Constant { param, value: constant(*v) });
                    continue;
                }
            };
            let writes =
                n.accessors.iter().any(|x| Arc::ptr_eq(&x.buffer, &acc.buffer) && x.mode.writes());
            let g = *self.group_of.entry(acc.buffer.id).or_insert_with(|| {
                self.groups.push(Group {
                    buffer: acc.buffer.clone(),
                    params: Vec::new(),
                    entries: Vec::new(),
                    first_write: None,
                });
                self.groups.len() - 1
            });
            let g = &mut self.groups[g];
            g.params.push(ParamRef::new(e, p));
            if g.entries.last() != Some(&e) {
                g.entries.push(e);
            }
            if writes && g.first_write.is_none() {
                g.first_write = Some(e);
            }
        }
        self.members.push(m);
        self.names.push(name);
        self.ranges.push(r);
        Ok(())
    }

    /// The spec fusing the first `n` entries, with no promotion.
    fn spec(&self, n: usize) -> FusionSpec {
        FusionSpec {
            name: format!("graph_chain_{}", self.members[0]),
            kernels: self.names[..n].to_vec(),
            ndranges: self.ranges[..n].to_vec(),
            identical: self
                .groups
                .iter()
                .map(|g| g.params.iter().take_while(|p| p.entry < n).copied().collect::<Vec<_>>())
                .filter(|ps| ps.len() > 1)
                .collect(),
            // No barrier between entries: a chain fuses only when every buffer one entry
            // writes and another touches is accessed per work-item (the check below), so no
            // work-item reads what another wrote in an earlier entry. (Barriers inside the
            // kernels stay.) A barrier there would cost every work-group a synchronization
            // per entry, and the cpu device a resume point.
            constants: self.constants.iter().filter(|c| c.param.entry < n).cloned().collect(),
            barriers: BarrierPolicy::None,
            ..FusionSpec::default()
        }
    }

    /// The legality check of the first `n` entries: every buffer one of them writes and
    /// another uses must pass private promotion (judged under each access's guard, with the
    /// scalar arguments as constants); `Err` says why not.
    fn check(&self, n: usize) -> Result<(), String> {
        let spec = FusionSpec {
            promote: self
                .groups
                .iter()
                .filter(|g| g.shared(n))
                .map(Group::promotion)
                .collect::<Result<_, _>>()?,
            ..self.spec(n)
        };
        let refused = refused_promotions(&self.module(), &spec).map_err(|e| e.to_string())?;
        match refused.first() {
            None => Ok(()),
            Some(w) => Err(not_per_item(false, &w.reason)),
        }
    }

    fn module(&self) -> Module {
        Module::new(self.kernels.clone())
    }
}

/// Finds the chains of the graph (in `order`, the execution order) and fuses those that
/// can be; also returns the chains it did not fuse, with why. `kernels` are the resolved
/// kernels, `part` each node's partition.
///
/// From each kernel node not yet fused, in order, a chain grows greedily along successors
/// (equal nd-ranges, one partition, contractible). Of it, the longest prefix that passes
/// the legality check is fused: prefixes of 2, 4, 8, ... entries are checked while they
/// pass, then the length is bisected (a prefix of a legal chain is legal: it has fewer
/// accesses to prove and the same order). The chain grows only as far as the checks need,
/// so finalizing a chain of n kernels takes about n log n steps, where trying every
/// chain's suffixes took n^3.
pub(crate) fn fuse_chains(
    ctx: &Context,
    nodes: &[FlatNode],
    kernels: &[Option<KernelHandle>],
    part: &[usize],
    order: &[usize],
    internalize: bool,
) -> (Vec<FusedUnit>, Vec<RefusedChain>) {
    let len = nodes.len();
    let mut pos = vec![0; len];
    for (k, &i) in order.iter().enumerate() {
        pos[i] = k;
    }
    let mut search = Search {
        nodes,
        part,
        pos,
        used: vec![false; len],
        member: vec![0; len],
        clear: vec![0; len],
        seen: vec![0; len],
        stamp: 0,
        walk: 0,
        refused: Vec::new(),
    };
    let cx = Inputs { ctx, nodes, kernels };
    // The nodes using each buffer, to tell which buffers are used outside a chain.
    let mut users: HashMap<u64, Vec<usize>> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        for a in &n.accessors {
            let u = users.entry(a.buffer.id).or_default();
            if u.last() != Some(&i) {
                u.push(i);
            }
        }
    }
    let mut out = Vec::new();
    for &s in order {
        if search.used[s] || search.range(s).is_none() {
            continue;
        }
        search.stamp += 1;
        let mut ir = ChainIr::default();
        if let Err(why) = ir.push(&cx, s) {
            tracing::debug!(target: "kiln::graph", "{} not fused: {why}", nodes[s].label);
            continue;
        }
        search.member[s] = search.stamp;
        // Grows the chain to `n` entries if it can; the length it has.
        let mut grow = |ir: &mut ChainIr, n: usize| {
            while ir.members.len() < n {
                let last = ir.members[ir.members.len() - 1];
                match search.next(ir, &cx, last) {
                    Some(_) => {}
                    None => break,
                }
            }
            ir.members.len()
        };
        // `good`: a legal prefix length; `bad`: an illegal one, with why.
        let (mut good, mut bad): (usize, Option<(usize, String)>) = (1, None);
        let mut want = 2;
        loop {
            let n = grow(&mut ir, want);
            if n <= good {
                break;
            }
            match ir.check(n) {
                Ok(()) => good = n,
                Err(why) => {
                    bad = Some((n, why));
                    break;
                }
            }
            if n < want {
                break;
            }
            want = n * 2;
        }
        while let Some((b, _)) = &bad {
            let mid = (good + b) / 2;
            if mid == good {
                break;
            }
            match ir.check(mid) {
                Ok(()) => good = mid,
                Err(why) => bad = Some((mid, why)),
            }
        }
        if let Some((b, why)) = bad {
            search.refused.push(RefusedChain::new(nodes, &ir.members[..b], why));
        }
        if good < 2 {
            continue;
        }
        let label = ir.members[..good].iter().map(|&m| &*nodes[m].label).collect::<Vec<_>>();
        let label = label.join(", ");
        match fuse_prefix(ctx, nodes, &ir, good, &users, internalize) {
            Ok(u) => {
                for &m in &u.members {
                    search.used[m] = true;
                }
                tracing::debug!(target: "kiln::graph", "fused chain [{label}]");
                out.push(u);
            }
            Err(why) => {
                search.refused.push(RefusedChain::new(nodes, &ir.members[..good], why));
            }
        }
    }
    for r in &search.refused {
        tracing::debug!(target: "kiln::graph", "{r}");
    }
    (out, search.refused)
}

/// Fuses the first `n` entries of `ir`, which passed the legality check. With
/// `internalize`, the buffers they share that no other node uses are promoted to private
/// memory.
fn fuse_prefix(
    ctx: &Context,
    nodes: &[FlatNode],
    ir: &ChainIr,
    n: usize,
    users: &HashMap<u64, Vec<usize>>,
    internalize: bool,
) -> Result<FusedUnit, String> {
    let members = ir.members[..n].to_vec();
    let mut inside: Vec<usize> = members.clone();
    inside.sort_unstable();
    let outside = |g: &Group| {
        users.get(&g.buffer.id).is_some_and(|u| u.iter().any(|i| inside.binary_search(i).is_err()))
    };
    let mut spec = ir.spec(n);
    spec.promote = ir
        .groups
        .iter()
        .filter(|g| internalize && g.shared(n) && !outside(g))
        .map(Group::promotion)
        .collect::<Result<_, _>>()?;
    let module = ir.module();
    let fused = fuse_kernels(&module, &spec).map_err(|e| e.to_string())?;
    if let Some(w) = fused.warnings.first() {
        return Err(format!("internal error: a promotion the check allowed was refused ({w})"));
    }
    let program = ctx
        .build_program(&Module::new(vec![fused.kernel.clone()]), &[], "")
        .map_err(|e| e.to_string())?;
    let kernel = ctx.kernel(&program, fused.kernel.name()).map_err(|e| e.to_string())?;
    let unit = FusedUnit { members, module, spec, fused, kernel };
    unit.launch(nodes)?;
    Ok(unit)
}
