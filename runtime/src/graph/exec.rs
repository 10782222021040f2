//! Finalize: from a modifiable graph to an executable one, and its submission and update.

use std::collections::VecDeque;
use std::sync::Arc;

use kiln_ir::{Imm, Scalar};

use super::fuse::{self, ChainReport, FusedUnit, RefusedChain};
use super::recorded::{self, Recorded};
use super::{GraphError, GraphProperties, KernelRef, NodeData, NodeId, NodeKind};
use crate::buffer::merge_accessors;
use crate::buffer::Arg;
use crate::buffer::{AccessMode, Accessor};
use crate::context::{Context, KernelHandle};
use crate::device::Device;
use crate::error::RuntimeError;
use crate::event::Event;
use crate::queue::{next_command_id, Queue};
use crate::scheduler::command::{copy, fill, HostTaskContext};
use crate::scheduler::{Action, CommandDesc, PreparedLaunch, SharedHostFn};
use crate::sync::{ranks, RankedMutex};

/// A node of the flattened graph (sub-graphs inlined).
#[derive(Clone)]
pub(crate) struct FlatNode {
    pub label: String,
    pub kind: NodeKind,
    pub accessors: Vec<Accessor>,
    pub preds: Vec<usize>,
    pub succs: Vec<usize>,
}

/// What runs: one node, or a fused chain of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unit {
    Node(usize),
    Fused(usize),
}

/// The executable graph's description, from which its plan is (re)built on update.
#[derive(Clone)]
struct ExecState {
    nodes: Vec<FlatNode>,
    kernels: Vec<Option<KernelHandle>>,
    fused: Vec<FusedUnit>,
    /// Per partition, the units in execution order.
    order: Vec<Vec<Unit>>,
    /// Per node of the modifiable graph, its flattened nodes.
    top: Vec<Vec<usize>>,
}

pub(super) enum StepKind {
    Launch(PreparedLaunch),
    Copy(Accessor, Accessor),
    Fill(Accessor, Imm),
    Host(SharedHostFn),
    Nothing,
}

struct Step {
    label: String,
    kind: StepKind,
}

/// One partition, prepared: its steps in order, the union of their requirements, and the
/// runs of its steps recorded into device command lists (by step range, in order).
struct PlanPart {
    accessors: Vec<Accessor>,
    steps: Vec<Step>,
    recorded: Vec<Recorded>,
    /// Whether a step is a host task: then the partition runs on a worker, never on the
    /// submitting thread (see `SubmitOpts::inline`).
    host: bool,
}

/// What a submission runs: replaced as a whole on update, so runs in flight keep theirs.
struct Plan {
    parts: Vec<PlanPart>,
}

/// An executable graph ([`super::Graph::finalize`]): partitions of prepared work, in order.
///
/// Each partition is a list of steps in reverse-DFS order (kernel launches with their
/// buffers and device arguments resolved, copies, fills; or one host task) and runs as one
/// command on the context's workers, after the previous partition. A submission's
/// partitions take part in the scheduler's dependency tracking with the union of their
/// nodes' buffer requirements, so work submitted before and after (eagerly, or other
/// graphs) is ordered with them as with any command. Runs of one executable graph are
/// ordered: a run starts after the previous one has finished.
pub struct ExecGraph {
    ctx: Context,
    name: String,
    /// The chains finalize did not fuse, with why.
    refused: Vec<RefusedChain>,
    /// Whether fused chains keep their unshared buffers in private memory.
    internalize: bool,
    state: RankedMutex<ExecState>,
    plan: RankedMutex<Arc<Plan>>,
    last_run: RankedMutex<Option<Event>>,
}

impl std::fmt::Debug for ExecGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecGraph").field("name", &self.name).finish_non_exhaustive()
    }
}

/// Inlines sub-graphs: `nodes` are appended to `out`; returns per node its flattened
/// (entry, exit, all) nodes.
fn flatten(nodes: &[NodeData], prefix: &str, out: &mut Vec<FlatNode>) -> Vec<[Vec<usize>; 3]> {
    let mut ends: Vec<[Vec<usize>; 3]> = Vec::with_capacity(nodes.len());
    for (i, n) in nodes.iter().enumerate() {
        let label = format!("{prefix}{}", n.label(i));
        match &n.kind {
            NodeKind::Sub(sub) if !sub.is_empty() => {
                let inner = flatten(sub, &format!("{label} > "), out);
                let entries = sub
                    .iter()
                    .zip(&inner)
                    .filter(|(s, _)| s.preds.is_empty())
                    .flat_map(|(_, e)| e[0].clone())
                    .collect();
                let exits = sub
                    .iter()
                    .zip(&inner)
                    .filter(|(s, _)| s.succs.is_empty())
                    .flat_map(|(_, e)| e[1].clone())
                    .collect();
                let all = inner.iter().flat_map(|e| e[2].clone()).collect();
                ends.push([entries, exits, all]);
            }
            kind => {
                let kind =
                    if matches!(kind, NodeKind::Sub(_)) { NodeKind::Empty } else { kind.clone() };
                let id = out.len();
                out.push(FlatNode {
                    label,
                    kind,
                    accessors: n.accessors.clone(),
                    preds: Vec::new(),
                    succs: Vec::new(),
                });
                ends.push([vec![id], vec![id], vec![id]]);
            }
        }
    }
    for (i, n) in nodes.iter().enumerate() {
        for &s in &n.succs {
            for &a in &ends[i][1] {
                for &b in &ends[s][0] {
                    if !out[a].succs.contains(&b) {
                        out[a].succs.push(b);
                        out[b].preds.push(a);
                    }
                }
            }
        }
    }
    ends
}

/// A cycle of `nodes` as `a -> b -> a`, if there is one.
fn find_cycle(nodes: &[FlatNode]) -> Option<String> {
    let mut indeg: Vec<usize> = nodes.iter().map(|n| n.preds.len()).collect();
    let mut queue: VecDeque<usize> = (0..nodes.len()).filter(|&i| indeg[i] == 0).collect();
    let mut done = vec![false; nodes.len()];
    while let Some(n) = queue.pop_front() {
        done[n] = true;
        for &s in &nodes[n].succs {
            indeg[s] -= 1;
            if indeg[s] == 0 {
                queue.push_back(s);
            }
        }
    }
    // Every node left has a predecessor left: walk them back until one repeats.
    let start = (0..nodes.len()).find(|&i| !done[i])?;
    let mut walk = vec![start];
    loop {
        let cur = *walk.last()?;
        let p = *nodes[cur].preds.iter().find(|&&p| !done[p])?;
        if let Some(pos) = walk.iter().position(|&w| w == p) {
            // walk[i + 1] -> walk[i] are edges, and p = walk[pos] -> the last one.
            let mut cycle: Vec<&str> = vec![&nodes[p].label];
            cycle.extend(walk[pos..].iter().rev().map(|&i| &*nodes[i].label));
            return Some(cycle.join(" -> "));
        }
        walk.push(p);
    }
}

/// DPC++'s partitioning: host tasks get partitions of their own, their predecessors the
/// partition before and their successors the one after; a host task reached again from a
/// later one (a backward edge from `make_edge`) is processed again, and the nodes waiting
/// for it merged with the predecessors of the one that reached it. Returns the partition
/// of each node, numbered from 0 in execution order.
fn partitions(nodes: &[FlatNode]) -> Result<Vec<usize>, GraphError> {
    let is_host = |i: usize| matches!(nodes[i].kind, NodeKind::Host(_));
    let mut num: Vec<i64> = vec![-1; nodes.len()];
    let mut list: VecDeque<usize> = (0..nodes.len()).filter(|&i| is_host(i)).collect();
    let mut current: i64 = -1;
    fn up(nodes: &[FlatNode], num: &mut [i64], host: &dyn Fn(usize) -> bool, n: usize, p: i64) {
        if (num[n] != -1 && num[n] <= p) || host(n) {
            return;
        }
        num[n] = p;
        for &q in &nodes[n].preds {
            up(nodes, num, host, q, p);
        }
    }
    fn down(
        nodes: &[FlatNode],
        num: &mut [i64],
        host: &dyn Fn(usize) -> bool,
        n: usize,
        p: i64,
        list: &mut VecDeque<usize>,
    ) {
        if host(n) {
            if num[n] != -1 {
                list.push_front(n);
            }
            return;
        }
        num[n] = p;
        for &s in &nodes[n].succs {
            down(nodes, num, host, s, p, list);
        }
    }
    let mut rounds = 0usize;
    while let Some(ht) = list.pop_front() {
        rounds += 1;
        if rounds > nodes.len() * nodes.len() + 8 {
            return Err(GraphError::Unsupported {
                node: nodes[ht].label.clone(),
                why: "the host tasks' dependencies could not be partitioned".into(),
            });
        }
        current += 1;
        for &p in &nodes[ht].preds {
            up(nodes, &mut num, &is_host, p, current);
        }
        current += 1;
        num[ht] = current;
        current += 1;
        let before = list.len();
        for &s in &nodes[ht].succs {
            down(nodes, &mut num, &is_host, s, current, &mut list);
        }
        if list.len() > before {
            for &h in list.iter() {
                let hp = num[h];
                if hp == -1 {
                    break;
                }
                let merged = num[ht] - 1;
                for x in num.iter_mut() {
                    if *x == merged {
                        *x = hp - 1;
                    }
                }
            }
        }
    }
    let part = numbered(&num);
    // Partitions run one after another, so every edge must go forward (or stay inside).
    // The annotation leaves nodes related to no host task in the first group, even a
    // successor of a node it places later: then partition by levels instead.
    if let Some((a, b)) = backward_edge(nodes, &part) {
        tracing::debug!(
            target: "kiln::graph",
            "host-task partitioning put {} before {}, which it depends on: partitioning by levels",
            nodes[b].label, nodes[a].label
        );
        let part = numbered(&levels(nodes));
        if let Some((a, b)) = backward_edge(nodes, &part) {
            return Err(GraphError::Unsupported {
                node: nodes[b].label.clone(),
                why: format!(
                    "it would run in a partition before {}, which it depends on",
                    nodes[a].label
                ),
            });
        }
        return Ok(part);
    }
    Ok(part)
}

/// The groups numbered 0, 1, ... in order (empty ones dropped).
fn numbered(num: &[i64]) -> Vec<usize> {
    let mut groups: Vec<i64> = num.to_vec();
    groups.sort_unstable();
    groups.dedup();
    num.iter().map(|g| groups.binary_search(g).unwrap_or(0)).collect()
}

fn backward_edge(nodes: &[FlatNode], part: &[usize]) -> Option<(usize, usize)> {
    nodes
        .iter()
        .enumerate()
        .find_map(|(a, n)| n.succs.iter().find(|&&b| part[b] < part[a]).map(|&b| (a, b)))
}

/// Levels in topological order: device work at even levels, host tasks at odd ones; a node
/// goes to the lowest level of its kind after all of its predecessors.
fn levels(nodes: &[FlatNode]) -> Vec<i64> {
    let is_host = |i: usize| matches!(nodes[i].kind, NodeKind::Host(_));
    let mut indeg: Vec<usize> = nodes.iter().map(|n| n.preds.len()).collect();
    let mut queue: VecDeque<usize> = (0..nodes.len()).filter(|&i| indeg[i] == 0).collect();
    let mut level = vec![0i64; nodes.len()];
    while let Some(n) = queue.pop_front() {
        let after = nodes[n].preds.iter().map(|&p| level[p]).max().unwrap_or(0);
        // Even for device work, odd for host tasks, never below a predecessor's level.
        level[n] = if is_host(n) { after | 1 } else { after + (after & 1) };
        for &s in &nodes[n].succs {
            indeg[s] -= 1;
            if indeg[s] == 0 {
                queue.push_back(s);
            }
        }
    }
    level
}

/// Per partition, its members in reverse-DFS order (DPC++'s `sortTopological`): a DFS from
/// each root (no predecessor in the partition), each node placed before everything after
/// it. Roots and successors are taken so that, ties aside, insertion order is kept.
pub(crate) fn schedule(
    succs: &[Vec<usize>],
    preds: &[Vec<usize>],
    part: &[usize],
) -> Vec<Vec<usize>> {
    let nparts = part.iter().max().map_or(0, |m| m + 1);
    let mut out = Vec::with_capacity(nparts);
    let mut done = vec![false; succs.len()];
    for p in 0..nparts {
        let mut order: VecDeque<usize> = VecDeque::new();
        let roots: Vec<usize> = (0..succs.len())
            .filter(|&i| part[i] == p && preds[i].iter().all(|&q| part[q] != p))
            .collect();
        for &r in roots.iter().rev() {
            // Iterative DFS: (node, next successor to look at, from the last).
            let mut stack: Vec<(usize, usize)> = Vec::new();
            if !done[r] {
                stack.push((r, succs[r].len()));
            }
            while let Some((n, k)) = stack.pop() {
                if k == 0 {
                    if !done[n] {
                        done[n] = true;
                        order.push_front(n);
                    }
                    continue;
                }
                stack.push((n, k - 1));
                let s = succs[n][k - 1];
                if part[s] == p && !done[s] {
                    stack.push((s, succs[s].len()));
                }
            }
        }
        out.push(order.into_iter().collect());
    }
    out
}

/// The aliasing pattern of the graph's buffers: which buffer references are the same
/// buffer, with each one's element type, length, access and range. Edges and fusion were
/// derived from it, so an update must keep it.
type Pattern = Vec<(usize, Scalar, usize, Option<AccessMode>, Option<(usize, usize)>)>;

/// See [`Pattern`].
fn pattern(nodes: &[FlatNode]) -> Pattern {
    let mut ids: Vec<u64> = Vec::new();
    let mut out = Vec::new();
    let mut push = |a: &Accessor, mode: Option<AccessMode>| {
        let i = ids.iter().position(|&x| x == a.buffer.id).unwrap_or_else(|| {
            ids.push(a.buffer.id);
            ids.len() - 1
        });
        out.push((i, a.buffer.elem, a.buffer.len, mode, a.range));
    };
    for n in nodes {
        for a in &n.accessors {
            push(a, Some(a.mode));
        }
        if let NodeKind::Kernel { args, .. } = &n.kind {
            for a in args {
                if let Some(acc) = a.buffer() {
                    push(acc, None);
                }
            }
        }
    }
    out
}

impl ExecState {
    fn plan(&self, dev: &dyn Device) -> Result<Plan, GraphError> {
        let mut parts = Vec::with_capacity(self.order.len());
        for units in &self.order {
            let mut steps = Vec::new();
            let mut accessors = Vec::new();
            for &u in units {
                match u {
                    Unit::Fused(j) => {
                        let f = &self.fused[j];
                        let (launch, acc) = f.launch(&self.nodes).map_err(|why| {
                            GraphError::Update { node: f.label(&self.nodes), why }
                        })?;
                        accessors.extend(acc);
                        steps.push(Step {
                            label: f.label(&self.nodes),
                            kind: StepKind::Launch(launch),
                        });
                    }
                    Unit::Node(i) => {
                        let n = &self.nodes[i];
                        accessors.extend(n.accessors.iter().cloned());
                        let kind = match &n.kind {
                            NodeKind::Kernel { range, args, .. } => {
                                let k = self.kernels[i].clone().ok_or_else(|| {
                                    GraphError::Unsupported {
                                        node: n.label.clone(),
                                        why: "its kernel was not resolved".into(),
                                    }
                                })?;
                                let launch = PreparedLaunch::new(k, *range, args, &n.accessors)
                                    .map_err(|source| GraphError::Argument {
                                        node: n.label.clone(),
                                        source,
                                    })?;
                                StepKind::Launch(launch)
                            }
                            NodeKind::Copy { src, dst } => StepKind::Copy(src.clone(), dst.clone()),
                            NodeKind::Fill { dst, value } => StepKind::Fill(dst.clone(), *value),
                            NodeKind::Host(f) => StepKind::Host(f.clone()),
                            NodeKind::Empty | NodeKind::Sub(_) | NodeKind::OnceHost => {
                                StepKind::Nothing
                            }
                        };
                        steps.push(Step { label: n.label.clone(), kind });
                    }
                }
            }
            let labelled: Vec<(&str, &StepKind)> =
                steps.iter().map(|s| (&*s.label, &s.kind)).collect();
            let recorded = recorded::record(&labelled, dev)?;
            let host = steps.iter().any(|st| matches!(st.kind, StepKind::Host(_)));
            parts.push(PlanPart { accessors: merge_accessors(accessors), steps, recorded, host });
        }
        Ok(Plan { parts })
    }
}

fn run_part(plan: &Plan, i: usize, graph: &str, device: &dyn Device) -> Result<(), RuntimeError> {
    let part = &plan.parts[i];
    let mut recorded = part.recorded.iter().peekable();
    let mut s = 0;
    while s < part.steps.len() {
        if let Some(r) = recorded.next_if(|r| r.start == s) {
            // The labels only for an error: a replay does no work per node on the host.
            let labels = || {
                let l: Vec<&str> = part.steps[r.start..r.end].iter().map(|st| &*st.label).collect();
                l.join(", ")
            };
            r.replay(device).map_err(|(node, source)| RuntimeError::Kernel {
                command: match node {
                    Some(label) => format!("{graph} {label}"),
                    None => format!("{graph} [{}]", labels()),
                },
                source,
            })?;
            s = r.end;
            continue;
        }
        let st = &part.steps[s];
        s += 1;
        let command = || format!("{graph} {}", st.label);
        match &st.kind {
            StepKind::Launch(l) => l
                .run(device)
                .map_err(|source| RuntimeError::Kernel { command: command(), source })?,
            StepKind::Copy(s, d) => copy(s, d)
                .map_err(|message| RuntimeError::Invalid { command: command(), message })?,
            StepKind::Fill(d, v) => fill(d, *v)
                .map_err(|message| RuntimeError::Invalid { command: command(), message })?,
            StepKind::Host(f) => f(&mut HostTaskContext { _private: () })
                .map_err(|message| RuntimeError::HostTask { command: command(), message })?,
            StepKind::Nothing => {}
        }
    }
    Ok(())
}

impl ExecGraph {
    pub(crate) fn build(
        ctx: &Context,
        props: GraphProperties,
        graph: &[NodeData],
    ) -> Result<ExecGraph, GraphError> {
        let mut nodes = Vec::new();
        let top = flatten(graph, "", &mut nodes).into_iter().map(|[_, _, all]| all).collect();
        if let Some(cycle) = find_cycle(&nodes) {
            return Err(GraphError::Cycle { what: "finalize".into(), cycle });
        }
        let identity = ctx.device().identity();
        let mut kernels = Vec::with_capacity(nodes.len());
        for n in &nodes {
            kernels.push(match &n.kind {
                NodeKind::Kernel { kernel: KernelRef::Handle(k), .. } => {
                    if *k.program.key.device != *identity {
                        return Err(GraphError::Unsupported {
                            node: n.label.clone(),
                            why: format!(
                                "kernel `{}` was built for the device `{}`, the graph's is `{identity}`",
                                k.name, k.program.key.device
                            ),
                        });
                    }
                    Some(k.clone())
                }
                NodeKind::Kernel { kernel: KernelRef::Of(m, name), .. } => Some(
                    ctx.kernel_of(m, name)
                        .map_err(|source| GraphError::Kernel { node: n.label.clone(), source })?,
                ),
                NodeKind::OnceHost => {
                    return Err(GraphError::Unsupported {
                        node: n.label.clone(),
                        why: "a host task submitted with `host_task` runs once; a graph \
                              replays its nodes: submit it with `host_task_fn`"
                            .into(),
                    })
                }
                _ => None,
            });
        }
        let part = partitions(&nodes)?;
        let succs: Vec<Vec<usize>> = nodes.iter().map(|n| n.succs.clone()).collect();
        let preds: Vec<Vec<usize>> = nodes.iter().map(|n| n.preds.clone()).collect();
        let flat_order: Vec<usize> = schedule(&succs, &preds, &part).concat();
        let name = format!("graph #{}", next_command_id());
        let (fused, refused) = if props.fuse_chains {
            fuse::fuse_chains(ctx, &nodes, &kernels, &part, &flat_order, props.internalize)
        } else {
            (Vec::new(), Vec::new())
        };
        for r in &refused {
            crate::fusion::warn(ctx, &format!("{name}: {r}"));
        }
        let (fused, order) = match units_in_order(&nodes, &part, &fused) {
            Some(order) => (fused, order),
            None => {
                // The fused chains, contracted, left some unit unschedulable (a cycle through
                // a chain): run every node as it is rather than skip any. The chain search
                // contracts only chains that keep the graph acyclic, so this is a bug, which
                // the tests (graph_prop) must see.
                debug_assert!(false, "{name}: contracting the fused chains made a cycle");
                let why = "contracting the fused chains made the graph cyclic; no chain is fused";
                crate::fusion::warn(ctx, &format!("{name}: {why}"));
                let order = units_in_order(&nodes, &part, &[]).ok_or_else(|| {
                    GraphError::Unsupported { node: name.clone(), why: why.into() }
                })?;
                (Vec::new(), order)
            }
        };
        let state = ExecState { nodes, kernels, fused, order, top };
        let plan = state.plan(&**ctx.device())?;
        Ok(ExecGraph {
            ctx: ctx.clone(),
            name,
            refused,
            internalize: props.internalize,
            state: RankedMutex::new(ranks::EXEC_STATE, state),
            plan: RankedMutex::new(ranks::EXEC_PLAN, Arc::new(plan)),
            last_run: RankedMutex::new(ranks::EXEC_LAST, None),
        })
    }

    /// The partitions, each with the labels of its steps in execution order (`node 3`,
    /// `node 3 `name``, `node 2 > node 0` inside a sub-graph, `fused chain [...]`).
    pub fn schedule(&self) -> Vec<Vec<String>> {
        let p = self.plan.lock().clone();
        p.parts.iter().map(|p| p.steps.iter().map(|s| s.label.clone()).collect()).collect()
    }

    /// The number of command lists recorded on the device ([`crate::Device::record`]: Vulkan
    /// command buffers, CUDA graphs), which replay a partition's kernel launches, copies and
    /// fills as one submission: one per device partition whose steps are not split by host
    /// tasks (or copies and fills that cannot succeed, which stay host steps); 0 on a device
    /// that records none (the interpreter, the cpu device), whose partitions replay as
    /// prepared step lists.
    pub fn device_recordings(&self) -> usize {
        self.plan.lock().parts.iter().map(|p| p.recorded.len()).sum()
    }

    /// The number of chains fused at finalize.
    pub fn fused_chains(&self) -> usize {
        self.state.lock().fused.len()
    }

    /// The chains fused at finalize, each as its nodes' labels in order.
    pub fn fused_chain_nodes(&self) -> Vec<Vec<String>> {
        let st = self.state.lock();
        st.fused
            .iter()
            .map(|f| f.members.iter().map(|&m| st.nodes[m].label.clone()).collect())
            .collect()
    }

    /// The chains of kernels finalize considered and did not fuse as one kernel, each with
    /// why (the reason a fusion-aware queue would give). A chain's longest prefix that can
    /// be fused is fused, so a refused chain's first nodes may be in
    /// [`fused_chain_nodes`](Self::fused_chain_nodes). Each is also a runtime warning at
    /// `KILN_RT_WARNING_LEVEL=1` or more.
    pub fn refused_chains(&self) -> &[RefusedChain] {
        &self.refused
    }

    /// Every chain finalize considered, fused or not, in the order of their first nodes,
    /// each with the verdict on every buffer one of its kernels writes and another uses
    /// (per access: its guard, whether its index is analysable and in bounds; per buffer:
    /// may it stay in global memory per work-item, is a promotion done), in the words of
    /// `kiln fuse --explain`. `kiln graph --explain` prints it.
    pub fn explain(&self) -> Vec<ChainReport> {
        let st = self.state.lock();
        let mut chains: Vec<(&[usize], Option<&str>)> =
            st.fused.iter().map(|f| (&f.members[..], None)).collect();
        chains.extend(self.refused.iter().map(|r| (&r.members[..], Some(&*r.reason))));
        chains.sort_by_key(|(m, refused)| (m.first().copied(), refused.is_some()));
        chains
            .into_iter()
            .map(|(m, refused)| {
                fuse::explain(&self.ctx, &st.nodes, &st.kernels, m, refused, self.internalize)
            })
            .collect()
    }

    /// Replaces the arguments of the kernel node `node` (a node of the graph it was
    /// finalized from, not inside a sub-graph) for the runs submitted from now on. The
    /// arguments must match the old ones in kind and type, and keep which nodes share a
    /// buffer (and each buffer's length and access): the edges, partitions and fused chains
    /// were derived from them. Otherwise nothing changes and the error says why.
    pub fn update_node(&self, node: NodeId, args: Vec<Arg>) -> Result<(), GraphError> {
        let mut st = self.state.lock().clone();
        let i = match st.top.get(node.0).map(Vec::as_slice) {
            Some([i]) => *i,
            _ => return Err(GraphError::NoSuchNode(format!("node {} (a kernel node)", node.0))),
        };
        let n = &mut st.nodes[i];
        let NodeKind::Kernel { args: old, .. } = &mut n.kind else {
            return Err(GraphError::Update {
                node: n.label.clone(),
                why: "not a kernel node".into(),
            });
        };
        if old.len() != args.len() {
            return Err(GraphError::Update {
                node: n.label.clone(),
                why: format!("{} arguments given, the kernel takes {}", args.len(), old.len()),
            });
        }
        for (k, (o, a)) in old.iter().zip(&args).enumerate() {
            let same_kind = match (o, a) {
                (Arg::Scalar(x), Arg::Scalar(y)) => x.scalar() == y.scalar(),
                (Arg::Buffer(_), Arg::Buffer(_)) => true,
                (
                    Arg::Range { offset: o1, len: l1, .. },
                    Arg::Range { offset: o2, len: l2, .. },
                ) => (o1, l1) == (o2, l2),
                _ => false,
            };
            if !same_kind {
                return Err(GraphError::Update {
                    node: n.label.clone(),
                    why: format!(
                        "argument {k}: {a:?} does not match the old {o:?} in kind or type"
                    ),
                });
            }
        }
        for acc in &mut n.accessors {
            let pos = old.iter().position(
                |o| matches!(o.buffer(), Some(b) if std::sync::Arc::ptr_eq(&b.buffer, &acc.buffer)),
            );
            if let Some(b) = pos.and_then(|p| args[p].buffer()) {
                acc.buffer = b.buffer.clone();
            }
        }
        *old = args;
        self.commit(st)
    }

    /// Takes the arguments, buffers, fill values and host tasks of `graph`, which must have
    /// the topology of the graph this one was finalized from (same nodes, kinds, kernels,
    /// nd-ranges and edges), for the runs submitted from now on, without finalizing again.
    /// The same rules as [`update_node`](Self::update_node) apply to the buffers.
    pub fn update(&self, graph: &super::Graph) -> Result<(), GraphError> {
        let mut st = self.state.lock().clone();
        let mut nodes = Vec::new();
        flatten(&graph.data.lock().nodes.clone(), "", &mut nodes);
        let mismatch =
            |node: &str, why: &str| GraphError::Update { node: node.into(), why: why.into() };
        if nodes.len() != st.nodes.len() {
            return Err(mismatch("the graph", "it has another number of nodes"));
        }
        for (i, (new, old)) in nodes.into_iter().zip(st.nodes.iter_mut()).enumerate() {
            let mut np = new.preds.clone();
            let mut op = old.preds.clone();
            np.sort_unstable();
            op.sort_unstable();
            if np != op {
                return Err(mismatch(&old.label, "its edges differ"));
            }
            let same = match (&new.kind, &old.kind) {
                (NodeKind::Kernel { kernel, range, .. }, NodeKind::Kernel { range: r2, .. }) => {
                    let k = st.kernels[i].as_ref();
                    let same_kernel = match kernel {
                        KernelRef::Handle(h) => {
                            k.is_some_and(|k| k.name == h.name && k.program.key == h.program.key)
                        }
                        KernelRef::Of(m, name) => {
                            k.is_some_and(|k| *k.name == **name && k.program.key == *m.key())
                        }
                    };
                    same_kernel && range == r2
                }
                (a, b) => std::mem::discriminant(a) == std::mem::discriminant(b),
            };
            if !same {
                return Err(mismatch(&old.label, "its kind, kernel or nd-range differs"));
            }
            old.kind = new.kind;
            old.accessors = new.accessors;
        }
        self.commit(st)
    }

    /// Installs an updated state if it keeps the aliasing pattern and its plan builds.
    fn commit(&self, st: ExecState) -> Result<(), GraphError> {
        let mut cur = self.state.lock();
        if pattern(&st.nodes) != pattern(&cur.nodes) {
            return Err(GraphError::Update {
                node: "the graph".into(),
                why: "it changes which nodes share a buffer, or a buffer's element type, length \
                      or access, from which edges and fusion were derived: finalize a new graph"
                    .into(),
            });
        }
        let plan = st.plan(&**self.ctx.device())?;
        *cur = st;
        *self.plan.lock() = Arc::new(plan);
        Ok(())
    }
}

/// Submits a run of `exec` to `q` ([`super::QueueGraph::submit_graph`]).
pub(crate) fn submit(q: &Queue, exec: &ExecGraph) -> Event {
    let bad = |message: &str| {
        Event::failed(
            exec.name.clone(),
            RuntimeError::Invalid { command: exec.name.clone(), message: message.into() },
        )
    };
    if !exec.ctx.same_context(q.context()) {
        return bad("the executable graph belongs to another context than the queue");
    }
    if q.recorder().is_some() {
        return bad("submitting an executable graph to a recording queue is not supported");
    }
    let plan = exec.plan.lock().clone();
    let mut last = exec.last_run.lock();
    let mut prev = last.clone();
    if plan.parts.is_empty() {
        let desc = CommandDesc {
            name: exec.name.clone(),
            accessors: Vec::new(),
            deps: prev.into_iter().collect(),
            action: Action::Nothing,
        };
        let e = q.submit_desc(desc);
        *last = Some(e.clone());
        return e;
    }
    for (i, p) in plan.parts.iter().enumerate() {
        let (plan2, name) = (plan.clone(), exec.name.clone());
        let desc = CommandDesc {
            name: format!("{} partition {i}", exec.name),
            accessors: p.accessors.clone(),
            deps: prev.take().into_iter().collect(),
            action: Action::Exec(Box::new(move |dev| run_part(&plan2, i, &name, dev))),
        };
        prev = Some(q.submit_desc_inline(desc, !p.host));
    }
    *last = prev.clone();
    prev.unwrap_or_else(|| bad("nothing was submitted"))
}

/// The units (nodes, and fused chains as one unit each) per partition in execution order;
/// `None` when some unit cannot be placed (the contracted graph has a cycle).
fn units_in_order(
    nodes: &[FlatNode],
    part: &[usize],
    fused: &[fuse::FusedUnit],
) -> Option<Vec<Vec<Unit>>> {
    // The units and their edges.
    let mut unit_of: Vec<Unit> = (0..nodes.len()).map(Unit::Node).collect();
    for (j, f) in fused.iter().enumerate() {
        for &m in &f.members {
            unit_of[m] = Unit::Fused(j);
        }
    }
    // Units in first-member order, and each node's unit index (linear, for big graphs).
    let mut units: Vec<Unit> = Vec::new();
    let mut fused_index: Vec<Option<usize>> = vec![None; fused.len()];
    let unit_index: Vec<usize> = unit_of
        .iter()
        .map(|&u| match u {
            Unit::Fused(j) => *fused_index[j].get_or_insert_with(|| {
                units.push(u);
                units.len() - 1
            }),
            Unit::Node(_) => {
                units.push(u);
                units.len() - 1
            }
        })
        .collect();
    let index = |u: usize| unit_index[u];
    let mut usuccs = vec![Vec::new(); units.len()];
    let mut upreds = vec![Vec::new(); units.len()];
    for (a, n) in nodes.iter().enumerate() {
        for &b in &n.succs {
            let (ua, ub) = (index(a), index(b));
            if ua != ub && !usuccs[ua].contains(&ub) {
                usuccs[ua].push(ub);
                upreds[ub].push(ua);
            }
        }
    }
    let upart: Vec<usize> = units
        .iter()
        .map(|u| match *u {
            Unit::Node(i) => part[i],
            Unit::Fused(j) => part[fused[j].members[0]],
        })
        .collect();
    let order: Vec<Vec<Unit>> = schedule(&usuccs, &upreds, &upart)
        .into_iter()
        .map(|p| p.into_iter().map(|i| units[i]).collect())
        .collect();
    let placed: usize = order.iter().map(Vec::len).sum();
    (placed == units.len()).then_some(order)
}
