//! Automatic fusion of kernel chains at finalize ([`super::GraphProperties::fuse_chains`]).
//!
//! A *chain* is a sequence of kernel nodes of one partition with equal nd-ranges, each an
//! immediate successor of the previous one, that can run as one node without reordering
//! anything else: contracting it leaves the graph acyclic and its own edges go forward.
//! Chains are grown greedily along the execution order and fused with the fusion JIT
//! ([`kiln_passes::fusion`]); the fused kernel is built through the context's program
//! cache, so an identical chain in another graph is a cache hit.
//!
//! Fusion runs every work-item's entries one after another, so it is legal only when no
//! work-item reads or overwrites what another work-item of another entry wrote. kiln
//! proves it with the private-promotion legality check: every buffer that one entry writes
//! and another touches must pass it (each work-item touches only its own elements, writes
//! before it reads). A chain that fails a check stays as it was, with a `debug` log line
//! (target `kiln::graph`) saying why.
//!
//! With [`super::GraphProperties::internalize`], those buffers that no node outside the
//! chain touches are promoted to private memory: the fused kernel neither reads nor writes
//! them.

use std::sync::Arc;

use kiln_ir::{parse_module, Imm, Kernel, Module};
use kiln_passes::fusion::{
    fuse_kernels, BarrierPolicy, BindArg, FusedKernel, FusionSpec, ParamRef, PromoteTo, Promotion,
    RangeSpec,
};

use super::exec::FlatNode;
use super::NodeKind;
use crate::buffer::{Accessor, BufferInner};
use crate::context::{Context, KernelHandle};
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
        let mut internal: Vec<&Arc<BufferInner>> = Vec::new();
        for (e, maps) in self.fused.args.iter().enumerate() {
            for (p, m) in maps.iter().enumerate() {
                if let (kiln_passes::fusion::ArgMap::Promoted { .. }, KernelArg::Buffer(a)) =
                    (m, &args[e][p])
                {
                    internal.push(&a.buffer);
                }
            }
        }
        let accessors = merge_accessors(
            self.members
                .iter()
                .flat_map(|&m| nodes[m].accessors.iter().cloned())
                .filter(|a| !internal.iter().any(|b| Arc::ptr_eq(b, &a.buffer))),
        );
        let launch =
            PreparedLaunch::new(self.kernel.clone(), self.fused.range.clone(), &bound, &accessors);
        Ok((launch, accessors))
    }
}

/// Whether `chain` can run as one node in its order: its edges go forward, and no node
/// outside it is both reachable from it and reaching it (contracting it stays acyclic).
fn contraction_ok(nodes: &[FlatNode], chain: &[usize]) -> bool {
    let pos = |n: usize| chain.iter().position(|&c| c == n);
    for (j, &c) in chain.iter().enumerate() {
        if nodes[c].succs.iter().any(|&s| pos(s).is_some_and(|i| i <= j)) {
            return false;
        }
    }
    let reach = |forward: bool| {
        let mut seen = vec![false; nodes.len()];
        let next = |n: usize| if forward { &nodes[n].succs } else { &nodes[n].preds };
        let mut stack: Vec<usize> = chain.iter().flat_map(|&c| next(c).clone()).collect();
        while let Some(n) = stack.pop() {
            if seen[n] || pos(n).is_some() {
                continue;
            }
            seen[n] = true;
            stack.extend(next(n).iter().copied());
        }
        seen
    };
    let (after, before) = (reach(true), reach(false));
    !after.iter().zip(&before).any(|(a, b)| *a && *b)
}

/// Finds the chains of the graph (in `order`, the execution order) and fuses those that
/// can be. `kernels` are the resolved kernels, `part` each node's partition.
pub(crate) fn fuse_chains(
    ctx: &Context,
    nodes: &[FlatNode],
    kernels: &[Option<KernelHandle>],
    part: &[usize],
    order: &[usize],
    internalize: bool,
) -> Vec<FusedUnit> {
    let range = |i: usize| match &nodes[i].kind {
        NodeKind::Kernel { range, .. } => Some(range),
        _ => None,
    };
    let mut used = vec![false; nodes.len()];
    let mut out = Vec::new();
    for &s in order {
        if used[s] || range(s).is_none() {
            continue;
        }
        let mut chain = vec![s];
        loop {
            let last = chain[chain.len() - 1];
            let mut next = None;
            for &m in &nodes[last].succs {
                if used[m] || range(m).is_none() || part[m] != part[s] {
                    continue;
                }
                if range(m) != range(s) {
                    tracing::debug!(target: "kiln::graph", "not fusing {} after {}: their nd-ranges differ", nodes[m].label, nodes[last].label);
                    continue;
                }
                let mut c = chain.clone();
                c.push(m);
                if contraction_ok(nodes, &c) {
                    next = Some(m);
                    break;
                }
                tracing::debug!(target: "kiln::graph", "not fusing {} after {}: another node depends on the chain and {} depends on it", nodes[m].label, nodes[last].label, nodes[m].label);
            }
            match next {
                Some(m) => chain.push(m),
                None => break,
            }
        }
        if chain.len() < 2 {
            continue;
        }
        let label = chain.iter().map(|&m| &*nodes[m].label).collect::<Vec<_>>().join(", ");
        match fuse_one(ctx, nodes, kernels, chain, internalize) {
            Ok(u) => {
                for &m in &u.members {
                    used[m] = true;
                }
                tracing::debug!(target: "kiln::graph", "fused chain [{label}]");
                out.push(u);
            }
            Err(why) => tracing::debug!(target: "kiln::graph", "chain [{label}] not fused: {why}"),
        }
    }
    out
}

/// One buffer of a chain: its parameters, the entries binding it, whether any writes it.
type Group = (Arc<BufferInner>, Vec<ParamRef>, Vec<usize>, bool);

fn fuse_one(
    ctx: &Context,
    nodes: &[FlatNode],
    kernels: &[Option<KernelHandle>],
    members: Vec<usize>,
    internalize: bool,
) -> Result<FusedUnit, String> {
    // The members' IR, from their programs' canonical text, under distinct names.
    let mut module: Vec<Kernel> = Vec::new();
    let mut names = Vec::new();
    let mut ranges = Vec::new();
    for &m in &members {
        let n = &nodes[m];
        let k = kernels[m].as_ref().ok_or("a kernel was not resolved")?;
        let key = &k.program.key;
        if k.sanitized.is_some()
            || !key.spec_consts.is_empty()
            || *key.options != *ctx.env_build_options()
        {
            return Err(format!(
                "{} was built with build options or specialization constants, which a fused kernel does not carry",
                n.label
            ));
        }
        let m_ir = parse_module(&key.image).map_err(|d| d.to_string())?;
        let ir = m_ir.kernel(&k.name).ok_or("the kernel is not in its program")?;
        let name = match module.iter().find(|x| x.name() == ir.name()) {
            Some(x) if x.is_equal(ir) => ir.name().to_string(),
            Some(_) => {
                let fresh = format!("{}_{}", ir.name(), module.len());
                module.push(Kernel::with_attrs(
                    &fresh,
                    ir.params().to_vec(),
                    ir.attrs().clone(),
                    ir.body().clone(),
                ));
                fresh
            }
            None => {
                module.push(ir.clone());
                ir.name().to_string()
            }
        };
        names.push(name);
        if let NodeKind::Kernel { range, .. } = &n.kind {
            let d = range.dims.clamp(1, 3);
            let mut r = RangeSpec::new(&range.global[..d]).with_offset(&range.offset[..d]);
            if let Some(l) = range.local {
                r = r.with_local(&l[..d]);
            }
            ranges.push(r);
        }
    }
    let module = Module::new(module);
    // Parameters bound to one buffer are one parameter; buffers one entry writes and another
    // touches are the ones whose accesses must be proven per work-item.
    let mut groups: Vec<Group> = Vec::new();
    for (e, &m) in members.iter().enumerate() {
        for (p, a) in args_of(&nodes[m]).iter().enumerate() {
            let KernelArg::Buffer(acc) = a else { continue };
            // The chain's legality check and promotions reason per buffer; a ranged
            // accessor would need them per range, so such chains stay unfused.
            if let Some((o, n)) = acc.range {
                return Err(format!(
                    "{} binds elements {o}..{} of buffer #{} through a ranged \
                     accessor, which graph chain fusion does not handle",
                    nodes[m].label,
                    o + n,
                    acc.buffer.id
                ));
            }
            let writes = nodes[m]
                .accessors
                .iter()
                .any(|x| Arc::ptr_eq(&x.buffer, &acc.buffer) && x.mode.writes());
            match groups.iter_mut().find(|g| Arc::ptr_eq(&g.0, &acc.buffer)) {
                Some(g) => {
                    g.1.push(ParamRef::new(e, p));
                    if !g.2.contains(&e) {
                        g.2.push(e);
                    }
                    g.3 |= writes;
                }
                None => {
                    groups.push((acc.buffer.clone(), vec![ParamRef::new(e, p)], vec![e], writes))
                }
            }
        }
    }
    let shared: Vec<_> = groups.iter().filter(|g| g.3 && g.2.len() > 1).collect();
    let promote =
        |g: &(Arc<BufferInner>, Vec<ParamRef>, Vec<usize>, bool)| -> Result<Promotion, String> {
            Ok(Promotion {
                param: g.1[0],
                to: PromoteTo::Private,
                size: None,
                buffer_len: Some(
                    u32::try_from(g.0.len).map_err(|_| "a buffer longer than 2^32 elements")?,
                ),
            })
        };
    let mut spec = FusionSpec {
        name: format!("graph_chain_{}", members[0]),
        kernels: names,
        ndranges: ranges,
        identical: groups.iter().filter(|g| g.1.len() > 1).map(|g| g.1.clone()).collect(),
        // No barrier between entries: a chain fuses only when every buffer one entry
        // writes and another touches is accessed per work-item (the check below), so no
        // work-item reads what another wrote in an earlier entry. (Barriers inside the
        // kernels stay.) A barrier there would cost every work-group a synchronization per
        // entry, and the cpu device a resume point.
        barriers: BarrierPolicy::None,
        ..FusionSpec::default()
    };
    // The legality check: every shared written buffer promoted in a trial fusion.
    let trial_spec = FusionSpec {
        promote: shared.iter().map(|g| promote(g)).collect::<Result<_, _>>()?,
        ..spec.clone()
    };
    let trial = fuse_kernels(&module, &trial_spec).map_err(|e| e.to_string())?;
    if let Some(w) = trial.warnings.first() {
        return Err(format!(
            "a buffer one kernel writes and another uses is not provably accessed per work-item ({w})"
        ));
    }
    let outside = |b: &Arc<BufferInner>| {
        nodes.iter().enumerate().any(|(i, n)| {
            !members.contains(&i) && n.accessors.iter().any(|a| Arc::ptr_eq(&a.buffer, b))
        })
    };
    let internal: Vec<_> = shared.iter().filter(|g| internalize && !outside(&g.0)).collect();
    let fused = if internal.len() == shared.len() {
        spec = trial_spec;
        trial
    } else {
        spec.promote = internal.iter().map(|g| promote(g)).collect::<Result<_, _>>()?;
        fuse_kernels(&module, &spec).map_err(|e| e.to_string())?
    };
    let program = ctx
        .build_program(&Module::new(vec![fused.kernel.clone()]), &[], "")
        .map_err(|e| e.to_string())?;
    let kernel = ctx.kernel(&program, fused.kernel.name()).map_err(|e| e.to_string())?;
    let unit = FusedUnit { members, module, spec, fused, kernel };
    unit.launch(nodes)?;
    Ok(unit)
}
