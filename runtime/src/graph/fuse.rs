//! Automatic fusion of kernel chains at finalize ([`super::GraphProperties::fuse_chains`]).
//!
//! A *chain* is a sequence of kernel nodes of one partition with equal nd-ranges, each an
//! immediate successor of the previous one, that can run as one node without reordering
//! anything else: contracting it, with the chains fused before it, leaves the graph acyclic.
//! Chains are grown greedily along the execution order, and the longest prefix of each that
//! the fusion front end (`runtime/src/fusion/front.rs`, the one a fusion-aware queue uses)
//! accepts is fused through it, so an identical chain in another graph (or in a queue's
//! fusion list completed with `no_barriers`) is a hit of the context's fusion cache. The search takes about n log n
//! steps for n kernels, plus the nodes between a chain's first and last member.
//!
//! The rule is the queue's: fusion runs every work-item's entries one after another, so it
//! is legal only when every buffer one entry writes and another uses is accessed per
//! work-item (judged under each access's guard, with the kernels' scalar arguments as
//! constants). The fused kernel has no barrier between the entries. Chains considered and
//! not fused are reported with why ([`RefusedChain`]).
//!
//! With [`super::GraphProperties::internalize`], those buffers of a chain that no node
//! outside it touches are promoted to private memory where that is exact: the fused kernel
//! neither reads nor writes them.

use std::sync::Arc;

use hashbrown::HashMap;
use kiln_ir::launch::NdRange;
use kiln_passes::fusion::BufferReport;

use super::exec::FlatNode;
use super::NodeKind;
use crate::buffer::{Accessor, BufferInner};
use crate::context::{Context, KernelHandle};
use crate::fusion::front::{FusedEntry, FusionFront, Member, Promote, Request};
use crate::scheduler::PreparedLaunch;

/// A fused chain: its member nodes, their kernels, and the fused kernel.
#[derive(Clone)]
pub(crate) struct FusedUnit {
    pub members: Vec<usize>,
    kernels: Vec<KernelHandle>,
    entry: Arc<FusedEntry>,
}

/// Node `i` as an entry of a fused list, if it is a kernel node.
fn member<'a>(
    nodes: &'a [FlatNode],
    kernel: Option<&'a KernelHandle>,
    i: usize,
) -> Option<Member<'a>> {
    match (&nodes[i].kind, kernel) {
        (NodeKind::Kernel { range, args, .. }, Some(kernel)) => {
            Some(Member { kernel, range, args, accessors: &nodes[i].accessors })
        }
        _ => None,
    }
}

/// The entries of the chain `chain`, in order.
fn members<'a>(
    nodes: &'a [FlatNode],
    kernels: &'a [Option<KernelHandle>],
    chain: &[usize],
) -> Vec<Member<'a>> {
    chain.iter().filter_map(|&m| member(nodes, kernels[m].as_ref(), m)).collect()
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
        let members: Vec<Member> = self
            .members
            .iter()
            .zip(&self.kernels)
            .filter_map(|(&m, k)| member(nodes, Some(k), m))
            .collect();
        let (bound, accessors) = self.entry.bind(&members)?;
        let launch = PreparedLaunch::new(
            self.entry.kernel().clone(),
            *self.entry.range(),
            &bound,
            &accessors,
        )
        .map_err(|e| e.to_string())?;
        Ok((launch, accessors))
    }
}

/// A chain of kernel nodes that finalize considered and did not fuse as one kernel
/// ([`super::ExecGraph::refused_chains`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusedChain {
    /// Its nodes' labels, in order (`node 3`, ``node 3 `name` ``).
    pub nodes: Vec<String>,
    /// Why, as a fusion-aware queue says why it refused a fusion.
    pub reason: String,
    /// Its nodes, by index in the flattened graph.
    pub(crate) members: Vec<usize>,
}

impl RefusedChain {
    fn new(nodes: &[FlatNode], members: &[usize], reason: String) -> RefusedChain {
        RefusedChain {
            nodes: members.iter().map(|&m| nodes[m].label.clone()).collect(),
            reason,
            members: members.to_vec(),
        }
    }
}

/// Labels in brackets, at most eight shown.
fn bracketed(labels: &[String]) -> String {
    let n = labels.len();
    if n <= 8 {
        labels.join(", ")
    } else {
        format!("{}, ..., {} ({n} nodes)", labels[..4].join(", "), labels[n - 2..].join(", "))
    }
}

impl std::fmt::Display for RefusedChain {
    /// `chain [node 0, node 1] not fused as one kernel: ...`, at most eight labels shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "chain [{}] not fused as one kernel: {}", bracketed(&self.nodes), self.reason)
    }
}

/// What finalize decided about one chain of kernel nodes, and why, buffer by buffer
/// ([`super::ExecGraph::explain`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainReport {
    /// Its nodes' labels, in order.
    pub nodes: Vec<String>,
    /// `Ok`: fused as one kernel; `Err`: not, with why.
    pub verdict: Result<(), String>,
    /// Per buffer that one of its kernels writes and another uses (or that a promotion
    /// names), the verdict on each access and on the buffer, in the words of
    /// `kiln fuse --explain`; `Err` when the chain is refused before its accesses are
    /// looked at.
    pub buffers: Result<Vec<BufferReport>, String>,
}

impl std::fmt::Display for ChainReport {
    /// `fused chain [a, b]:` or `chain [a, b] not fused as one kernel: why`, then the
    /// buffers' reports.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.verdict {
            Ok(()) => write!(f, "fused chain [{}]:", bracketed(&self.nodes))?,
            Err(why) => {
                write!(f, "chain [{}] not fused as one kernel: {why}", bracketed(&self.nodes))?
            }
        }
        match &self.buffers {
            Ok(b) if b.is_empty() => write!(f, "\nno buffer is shared by the kernels"),
            Ok(b) => b.iter().try_for_each(|r| write!(f, "\n{r}")),
            // The verdict says it already.
            Err(_) => Ok(()),
        }
    }
}

/// Which nodes use each buffer, to tell the buffers a chain shares with no one else.
pub(crate) struct Users(HashMap<u64, Vec<usize>>);

impl Users {
    pub(crate) fn new(nodes: &[FlatNode]) -> Users {
        let mut users: HashMap<u64, Vec<usize>> = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            for a in &n.accessors {
                let u = users.entry(a.buffer.id).or_default();
                if u.last() != Some(&i) {
                    u.push(i);
                }
            }
        }
        Users(users)
    }

    /// What graph chains ask of the front end: no barriers between the entries, and with
    /// `internalize`, private memory for the buffers no node outside `chain` uses.
    fn request<R>(&self, chain: &[usize], internalize: bool, f: impl FnOnce(&Request) -> R) -> R {
        let mut inside = chain.to_vec();
        inside.sort_unstable();
        let outside = |b: &BufferInner| {
            self.0.get(&b.id).is_some_and(|u| u.iter().any(|i| inside.binary_search(i).is_err()))
        };
        let promote = if internalize { Promote::Unshared(&outside) } else { Promote::Nothing };
        f(&Request { barriers: false, promote })
    }
}

/// The report on the chain `chain` (fused, or refused with `refused`).
pub(crate) fn explain(
    ctx: &Context,
    nodes: &[FlatNode],
    kernels: &[Option<KernelHandle>],
    chain: &[usize],
    refused: Option<&str>,
    internalize: bool,
) -> ChainReport {
    let entries = members(nodes, kernels, chain);
    let buffers = Users::new(nodes).request(chain, internalize, |req| {
        crate::fusion::front::of(ctx).explain(ctx, &entries, req)
    });
    ChainReport {
        nodes: chain.iter().map(|&m| nodes[m].label.clone()).collect(),
        verdict: refused.map_or(Ok(()), |r| Err(r.to_string())),
        buffers,
    }
}

/// The search for chains over the graph with the chains fused so far contracted, each into
/// one unit, and marks stamped per chain, so that no search clears an array.
struct Search<'a> {
    ctx: &'a Context,
    nodes: &'a [FlatNode],
    kernels: &'a [Option<KernelHandle>],
    part: &'a [usize],
    /// Each node's unit: itself, or the first member of the fused chain holding it.
    rep: Vec<usize>,
    /// Each unit's nodes, by representative.
    unit: Vec<Vec<usize>>,
    /// Each unit's place, by representative, in a topological order of the contracted
    /// graph; `order[pos[u]] == u`.
    pos: Vec<usize>,
    /// The units in that order (`usize::MAX`: a place left free by a contraction).
    order: Vec<usize>,
    /// Fused into a unit already.
    used: Vec<bool>,
    /// `== stamp`: a member of the current chain.
    member: Vec<u32>,
    /// `== stamp`: a unit known not to be reachable from the current chain.
    clear: Vec<u32>,
    /// `== walk`: seen by the current walk.
    seen: Vec<u32>,
    stamp: u32,
    walk: u32,
    /// The chains considered and not fused, with why.
    refused: Vec<RefusedChain>,
}

impl Search<'_> {
    fn range(&self, i: usize) -> Option<&NdRange> {
        match &self.nodes[i].kind {
            NodeKind::Kernel { range, .. } => Some(range),
            _ => None,
        }
    }

    /// Whether the unit of `p`, not a member, is reachable from the current chain in the
    /// contracted graph; the chain's first member is at `first` in the order. Then the
    /// chain and a successor of `p` cannot be one node (`p` would run after the chain and
    /// before that successor): contracting them would close a cycle. Walks back from `p`'s
    /// unit over units after `first` (only those can be reached from the chain), and
    /// remembers what it cleared: the chain grows only by successors of its members, which
    /// it reaches already, so what it cannot reach stays unreachable.
    fn reachable(&mut self, p: usize, first: usize) -> bool {
        self.walk += 1;
        let mut stack = vec![self.rep[p]];
        let mut walked = Vec::new();
        while let Some(u) = stack.pop() {
            if self.member[u] == self.stamp {
                return true;
            }
            if self.clear[u] == self.stamp || self.seen[u] == self.walk || self.pos[u] < first {
                continue;
            }
            self.seen[u] = self.walk;
            walked.push(u);
            for &x in &self.unit[u] {
                stack.extend(self.nodes[x].preds.iter().map(|&q| self.rep[q]).filter(|&r| r != u));
            }
        }
        for u in walked {
            self.clear[u] = self.stamp;
        }
        false
    }

    /// The successor of `last` that can join `chain`, if one can.
    fn next(&mut self, chain: &[usize], last: usize) -> Option<usize> {
        let s = chain[0];
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
            let joins = match member(nodes, self.kernels[m].as_ref(), m) {
                Some(e) => FusionFront::joinable(self.ctx, &e),
                None => Err("its kernel was not resolved".into()),
            }
            .map_err(|why| format!("{}: {why}", nodes[m].label));
            match joins {
                Ok(()) => {
                    self.member[m] = stamp;
                    return Some(m);
                }
                Err(why) => {
                    let mut refused = chain.to_vec();
                    refused.push(m);
                    self.refused.push(RefusedChain::new(nodes, &refused, why));
                }
            }
        }
        None
    }

    /// Contracts the fused chain `chain` into one unit, keeping `order` topological: of the
    /// units between its first and last member, those it reaches move after it, the others
    /// before it (none reaches it and is reached by it: the search refused such chains).
    fn contract(&mut self, chain: &[usize]) {
        let (a, b) = (self.pos[chain[0]], self.pos[chain[chain.len() - 1]]);
        self.walk += 1;
        for &m in chain {
            self.seen[m] = self.walk;
        }
        // The units the chain reaches, up to its last member's place (units after it
        // cannot lead back before it).
        let mut after = Vec::new();
        let mut stack: Vec<usize> = Vec::new();
        for &m in chain {
            stack.extend(self.nodes[m].succs.iter().map(|&s| self.rep[s]));
        }
        while let Some(u) = stack.pop() {
            if self.seen[u] == self.walk || self.pos[u] > b {
                continue;
            }
            self.seen[u] = self.walk;
            after.push(u);
            for &x in &self.unit[u] {
                stack.extend(self.nodes[x].succs.iter().map(|&s| self.rep[s]));
            }
        }
        after.sort_unstable_by_key(|&u| self.pos[u]);
        let before: Vec<usize> = self.order[a..=b]
            .iter()
            .copied()
            .filter(|&u| u != usize::MAX && self.seen[u] != self.walk)
            .collect();
        let r = chain[0];
        let window = before.iter().copied().chain([r]).chain(after.iter().copied());
        let mut at = a;
        for u in window {
            self.order[at] = u;
            self.pos[u] = at;
            at += 1;
        }
        self.order[at..=b].fill(usize::MAX);
        for &m in chain {
            self.rep[m] = r;
            self.used[m] = true;
            if m != r {
                self.unit[m].clear();
            }
        }
        self.unit[r] = chain.to_vec();
    }

    /// `Err` says why the first `n` members of `chain` cannot be fused.
    fn check(&self, chain: &[usize], n: usize) -> Result<(), String> {
        let entries = members(self.nodes, self.kernels, &chain[..n]);
        crate::fusion::front::of(self.ctx).check(self.ctx, &entries)
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
        ctx,
        nodes,
        kernels,
        part,
        rep: (0..len).collect(),
        unit: (0..len).map(|i| vec![i]).collect(),
        pos,
        order: order.to_vec(),
        used: vec![false; len],
        member: vec![0; len],
        clear: vec![0; len],
        seen: vec![0; len],
        stamp: 0,
        walk: 0,
        refused: Vec::new(),
    };
    let users = Users::new(nodes);
    let mut out = Vec::new();
    for &s in order {
        if search.used[s] || search.range(s).is_none() {
            continue;
        }
        search.stamp += 1;
        let joins = match member(nodes, kernels[s].as_ref(), s) {
            Some(e) => FusionFront::joinable(ctx, &e),
            None => Err("its kernel was not resolved".into()),
        };
        if let Err(why) = joins {
            tracing::debug!(target: "kiln::graph", "{} not fused: {why}", nodes[s].label);
            continue;
        }
        let mut chain = vec![s];
        search.member[s] = search.stamp;
        // Grows the chain to `n` entries if it can; the length it has.
        let grow = |search: &mut Search, chain: &mut Vec<usize>, n: usize| {
            while chain.len() < n {
                match search.next(chain, chain[chain.len() - 1]) {
                    Some(m) => chain.push(m),
                    None => break,
                }
            }
            chain.len()
        };
        // `good`: a legal prefix length; `bad`: an illegal one, with why.
        let (mut good, mut bad): (usize, Option<(usize, String)>) = (1, None);
        let mut want = 2;
        loop {
            let n = grow(&mut search, &mut chain, want);
            if n <= good {
                break;
            }
            match search.check(&chain, n) {
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
            match search.check(&chain, mid) {
                Ok(()) => good = mid,
                Err(why) => bad = Some((mid, why)),
            }
        }
        if let Some((b, why)) = bad {
            search.refused.push(RefusedChain::new(nodes, &chain[..b], why));
        }
        if good < 2 {
            continue;
        }
        let prefix = &chain[..good];
        let entries = members(nodes, kernels, prefix);
        let fused = users.request(prefix, internalize, |req| {
            crate::fusion::front::of(ctx).fuse(ctx, &entries, req)
        });
        match fused {
            Ok(f) => {
                let label = prefix.iter().map(|&m| &*nodes[m].label).collect::<Vec<_>>();
                tracing::debug!(target: "kiln::graph", "fused chain [{}]", label.join(", "));
                for w in &f.warnings {
                    crate::fusion::warn(ctx, &format!("fused chain [{}]: {w}", label.join(", ")));
                }
                search.contract(prefix);
                out.push(FusedUnit {
                    members: prefix.to_vec(),
                    kernels: entries.iter().map(|e| e.kernel.clone()).collect(),
                    entry: f.entry,
                });
            }
            Err(why) => search.refused.push(RefusedChain::new(nodes, prefix, why)),
        }
    }
    for r in &search.refused {
        tracing::debug!(target: "kiln::graph", "{r}");
    }
    (out, search.refused)
}
