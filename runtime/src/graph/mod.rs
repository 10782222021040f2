//! Command graphs: record a sequence of commands once, replay it many times.
//!
//! A [`Graph`] is *modifiable*: nodes (kernel launches, buffer copies and fills, host tasks,
//! sub-graphs) are added explicitly with [`Graph::add`] or recorded from a queue
//! ([`QueueGraph::begin_recording`]: while recording, the queue's submissions become nodes
//! instead of running). Edges come from buffer accesses, with the
//! scheduler's model ([`crate::scheduler`]: read-after-write, write-after-read,
//! write-after-write, in insertion order), from explicit dependencies (node lists, recorded
//! events, an in-order queue's previous command) and from [`Graph::make_edge`].
//!
//! [`Graph::finalize`] makes an [`ExecGraph`]: nodes ordered by reverse depth-first search,
//! split into partitions at host tasks (with the backward-dependency merging of DPC++'s
//! design), each device partition a prepared launch list whose kernels were resolved once,
//! through the context's caches, which a device with command lists of its own records once
//! ([`crate::Device::record`]: a Vulkan command buffer, a CUDA graph). With [`GraphProperties::fuse_chains`], chains of kernels
//! are fused at finalize (see [`fuse`]). [`QueueGraph::submit_graph`] runs it; runs of one
//! executable graph are ordered, and [`ExecGraph::update`] / [`ExecGraph::update_node`]
//! change buffers and scalar arguments without finalizing again.
//!
//! ```
//! use kiln_ir::parse_module;
//! use kiln_runtime::graph::{Graph, GraphProperties};
//! use kiln_runtime::{
//!     interp_device, Arg, Buffer, Context, NdRange, Queue, QueueGraph, QueueOrder,
//! };
//!
//! let ctx = Context::new(interp_device());
//! let m = parse_module("kernel inc(x: ptr<global, u32>) { let i: u32 = global_id(0); x[i] = x[i] + 1u32; }").unwrap();
//! let inc = ctx.get_kernel(&m, "inc").unwrap();
//! let q = Queue::new(&ctx, QueueOrder::InOrder);
//! let b = Buffer::from_slice(&[0u32; 4]);
//! let g = Graph::new(&ctx, GraphProperties::default());
//! q.begin_recording(&g).unwrap();
//! for _ in 0..3 {
//!     q.submit(|h| {
//!         let x = h.read_write(&b);
//!         h.parallel_for(&inc, NdRange::new(&[4]), vec![Arg::from(x)]);
//!     });
//! }
//! q.end_recording().unwrap();
//! let exec = g.finalize().unwrap();
//! q.submit_graph(&exec);
//! q.submit_graph(&exec).wait().unwrap();
//! assert_eq!(b.read().unwrap(), vec![6; 4]);
//! ```
//!
//! [`QueueGraph::begin_recording`]: crate::QueueGraph::begin_recording
//! [`QueueGraph::submit_graph`]: crate::QueueGraph::submit_graph

mod dot;
mod exec;
pub mod fuse;
mod record;
mod recorded;

use std::sync::Arc;

use hashbrown::HashMap;
use kiln_ir::launch::NdRange;
use kiln_ir::Imm;
use thiserror::Error;

use crate::buffer::merge_accessors;
use crate::buffer::Arg;
use crate::buffer::{AccessMode, Accessor, AnyBuffer};
use crate::context::{Context, KernelHandle, PreparedModule};
use crate::deps::AccessTrack;
use crate::error::DeviceError;
use crate::event::Event;
use crate::scheduler::{HostTaskContext, SharedHostFn};
use crate::sync::{ranks, RankedMutex};

pub use exec::ExecGraph;
pub use fuse::{ChainReport, RefusedChain};
pub use record::QueueGraph;

/// A node of a [`Graph`], as [`Graph::add`] returns it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub(crate) usize);

impl NodeId {
    /// The node's index in its graph (insertion order).
    pub fn index(self) -> usize {
        self.0
    }
}

/// Properties of a graph, fixed at [`Graph::new`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphProperties {
    /// Skip the cycle check of [`Graph::make_edge`] (SYCL's `no_cycle_check`): for graphs
    /// built by code that knows they are acyclic. [`Graph::finalize`] still refuses a cycle.
    pub no_cycle_check: bool,
    /// Fuse chains of kernel nodes at finalize ([`fuse`]). Off by default.
    pub fuse_chains: bool,
    /// With `fuse_chains`: keep intermediate buffers that only the chain touches in private
    /// memory instead of writing them back. Their contents after a run are then
    /// unspecified (the graph does not write them); off by default.
    pub internalize: bool,
}

/// Why a graph operation was refused. Each variant names the node(s) concerned.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum GraphError {
    /// An edge would make the graph cyclic (or a graph built without cycle checks is).
    #[error("{what} would create the cycle {cycle}")]
    Cycle {
        /// The operation (`make_edge(node 1, node 0)`, `finalize`).
        what: String,
        /// The cycle, as `node a -> node b -> node a`.
        cycle: String,
    },
    /// The graph was finalized: it cannot change any more.
    #[error("{what}: the graph was finalized and can no longer be modified")]
    Finalized {
        /// The refused operation.
        what: String,
    },
    /// A node id that is not in this graph.
    #[error("{0} is not a node of this graph")]
    NoSuchNode(String),
    /// A node that cannot be part of an executable graph.
    #[error("{node}: {why}")]
    Unsupported {
        /// The node.
        node: String,
        /// Why.
        why: String,
    },
    /// A kernel could not be built or found.
    #[error("{node}: {source}")]
    Kernel {
        /// The node.
        node: String,
        /// The device's error.
        source: DeviceError,
    },
    /// A kernel node's arguments do not fit its kernel's parameters.
    #[error("{node}: {source}")]
    Argument {
        /// The node.
        node: String,
        /// Which argument, and what is wrong.
        source: kiln_ir::launch::ArgError,
    },
    /// Recording could not start, stop or record.
    #[error("recording: {0}")]
    Recording(String),
    /// An update that the executable graph cannot take.
    #[error("update of {node}: {why}")]
    Update {
        /// The node (or `the graph`).
        node: String,
        /// Why.
        why: String,
    },
    /// Writing a file failed.
    #[error("cannot write {path}: {message}")]
    Io {
        /// The file.
        path: String,
        /// The system's message.
        message: String,
    },
}

/// What a node does.
#[derive(Clone)]
pub(crate) enum NodeKind {
    /// A kernel launch, resolved at finalize when given as a module and name.
    Kernel { kernel: KernelRef, range: NdRange, args: Vec<Arg> },
    /// Copies `src` into the start of `dst`.
    Copy { src: Accessor, dst: Accessor },
    /// Sets every element of `dst` to `value`.
    Fill { dst: Accessor, value: Imm },
    /// A host task that runs on every replay.
    Host(SharedHostFn),
    /// A host task recorded with [`crate::Handler::host_task`], which can run only once.
    OnceHost,
    /// A graph inside the graph (a copy of it when added).
    Sub(Arc<Vec<NodeData>>),
    /// Only orders.
    Empty,
}

/// A kernel: already resolved, or a prepared module and a name for finalize to resolve.
#[derive(Clone)]
pub(crate) enum KernelRef {
    Handle(KernelHandle),
    Of(PreparedModule, String),
}

impl KernelRef {
    pub fn name(&self) -> &str {
        match self {
            KernelRef::Handle(k) => &k.name,
            KernelRef::Of(_, n) => n,
        }
    }
}

/// A node to add to a graph ([`Graph::add`]).
#[derive(Clone)]
pub struct Node {
    pub(crate) kind: NodeKind,
    pub(crate) name: Option<String>,
    pub(crate) accessors: Vec<Accessor>,
}

impl Node {
    fn of(kind: NodeKind, accessors: Vec<Accessor>) -> Node {
        Node { kind, name: None, accessors: merge_accessors(accessors) }
    }

    fn kernel_accessors(args: &[Arg]) -> Vec<Accessor> {
        args.iter().filter_map(|a| a.buffer().cloned()).collect()
    }

    /// A launch of `kernel` over `range`; its buffer arguments' accessors are its
    /// requirements.
    pub fn kernel(kernel: &KernelHandle, range: NdRange, args: Vec<Arg>) -> Node {
        let acc = Node::kernel_accessors(&args);
        Node::of(NodeKind::Kernel { kernel: KernelRef::Handle(kernel.clone()), range, args }, acc)
    }

    /// A launch of the kernel `name` of a prepared module, resolved through the context's
    /// program and kernel caches once, at finalize.
    pub fn kernel_of(module: &PreparedModule, name: &str, range: NdRange, args: Vec<Arg>) -> Node {
        let acc = Node::kernel_accessors(&args);
        let kernel = KernelRef::Of(module.clone(), name.to_string());
        Node::of(NodeKind::Kernel { kernel, range, args }, acc)
    }

    /// A copy of `src` into the start of `dst` (same element type, `dst` at least as long).
    pub fn copy(src: &AnyBuffer, dst: &AnyBuffer) -> Node {
        let (s, d) = (Accessor::new(src, AccessMode::Read), Accessor::new(dst, AccessMode::Write));
        Node::of(NodeKind::Copy { src: s.clone(), dst: d.clone() }, vec![s, d])
    }

    /// A fill of every element of `dst` with `value` (of its element type).
    pub fn fill(dst: &AnyBuffer, value: Imm) -> Node {
        let d = Accessor::new(dst, AccessMode::Write);
        Node::of(NodeKind::Fill { dst: d.clone(), value }, vec![d])
    }

    /// A host task using the buffers of `accessors`; it runs on every replay.
    pub fn host_task(
        accessors: Vec<Accessor>,
        f: impl Fn(&mut HostTaskContext) -> Result<(), String> + Send + Sync + 'static,
    ) -> Node {
        Node::of(NodeKind::Host(Arc::new(f)), accessors)
    }

    /// The nodes and edges of `graph` as one node (a copy: later changes to `graph` do not
    /// show here). Its requirements are those of its nodes.
    pub fn sub_graph(graph: &Graph) -> Node {
        let nodes = graph.data.lock().nodes.clone();
        let acc = nodes.iter().flat_map(|n| n.accessors.clone()).collect();
        Node::of(NodeKind::Sub(Arc::new(nodes)), acc)
    }

    /// A node that does nothing but order (a barrier).
    pub fn empty() -> Node {
        Node::of(NodeKind::Empty, Vec::new())
    }

    /// The same node with a name (in errors, `print_dot` and [`ExecGraph::schedule`]).
    pub fn named(mut self, name: impl Into<String>) -> Node {
        self.name = Some(name.into());
        self
    }
}

/// A node in a graph: what it does and its edges.
#[derive(Clone)]
pub(crate) struct NodeData {
    pub kind: NodeKind,
    pub name: Option<String>,
    pub accessors: Vec<Accessor>,
    pub preds: Vec<usize>,
    pub succs: Vec<usize>,
}

impl NodeData {
    /// `node 3`, or `node 3 (name)`.
    pub fn label(&self, index: usize) -> String {
        match &self.name {
            Some(n) => format!("node {index} `{n}`"),
            None => format!("node {index}"),
        }
    }
}

pub(crate) struct GraphData {
    pub nodes: Vec<NodeData>,
    /// Per buffer id: the nodes that last touched it (edges for later nodes).
    tracks: HashMap<u64, AccessTrack<usize>>,
    /// Events handed out for recorded commands, and their nodes.
    pub recorded: Vec<(Event, usize)>,
    pub finalized: bool,
    /// Why the graph cannot be finalized (a recording error), naming the node.
    pub poisoned: Option<GraphError>,
}

/// A modifiable command graph on one context. Cheap to clone: clones are the same graph
/// (what a recording queue holds).
#[derive(Clone)]
pub struct Graph {
    pub(crate) ctx: Context,
    pub(crate) props: GraphProperties,
    pub(crate) data: Arc<RankedMutex<GraphData>>,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("nodes", &self.data.lock().nodes.len())
            .field("props", &self.props)
            .finish_non_exhaustive()
    }
}

impl Graph {
    /// An empty graph on `ctx`.
    pub fn new(ctx: &Context, props: GraphProperties) -> Graph {
        Graph {
            ctx: ctx.clone(),
            props,
            data: Arc::new(RankedMutex::new(
                ranks::GRAPH,
                GraphData {
                    nodes: Vec::new(),
                    tracks: HashMap::new(),
                    recorded: Vec::new(),
                    finalized: false,
                    poisoned: None,
                },
            )),
        }
    }

    /// The properties.
    pub fn properties(&self) -> GraphProperties {
        self.props
    }

    /// The number of nodes (a sub-graph counts as one).
    pub fn node_count(&self) -> usize {
        self.data.lock().nodes.len()
    }

    /// The edges, as (from, to) pairs.
    pub fn edges(&self) -> Vec<(NodeId, NodeId)> {
        let d = self.data.lock();
        let mut out = Vec::new();
        for (i, n) in d.nodes.iter().enumerate() {
            out.extend(n.succs.iter().map(|&s| (NodeId(i), NodeId(s))));
        }
        out
    }

    /// Adds `node` after the nodes of `depends_on` and after every earlier node whose
    /// buffer accesses conflict with its own (read-after-write, write-after-read,
    /// write-after-write).
    pub fn add(&self, node: Node, depends_on: &[NodeId]) -> Result<NodeId, GraphError> {
        let mut d = self.data.lock();
        if d.finalized {
            return Err(GraphError::Finalized { what: "add".into() });
        }
        let deps: Vec<usize> = depends_on.iter().map(|n| n.0).collect();
        Ok(NodeId(d.add(node, deps)?))
    }

    /// Adds the edge `from -> to`: `to` runs after `from`. Refused if it would create a
    /// cycle (the error names it), unless the graph has
    /// [`no_cycle_check`](GraphProperties::no_cycle_check).
    pub fn make_edge(&self, from: NodeId, to: NodeId) -> Result<(), GraphError> {
        let mut d = self.data.lock();
        let what = format!("make_edge({}, {})", d.label(from.0)?, d.label(to.0)?);
        if d.finalized {
            return Err(GraphError::Finalized { what });
        }
        if d.nodes[from.0].succs.contains(&to.0) {
            return Ok(());
        }
        if !self.props.no_cycle_check {
            // A path back from `to` to `from` closes a cycle.
            if let Some(path) = d.path(to.0, from.0) {
                let mut names: Vec<String> = vec![d.nodes[from.0].label(from.0)];
                names.extend(path.iter().map(|&i| d.nodes[i].label(i)));
                return Err(GraphError::Cycle { what, cycle: names.join(" -> ") });
            }
        }
        d.edge(from.0, to.0);
        Ok(())
    }

    /// Writes the graph in Graphviz's dot format to `path`: a node per command (with its
    /// kind and kernel), an edge per dependency; `verbose` adds nd-ranges, arguments and
    /// buffer accesses.
    pub fn print_dot(
        &self,
        path: impl AsRef<std::path::Path>,
        verbose: bool,
    ) -> Result<(), GraphError> {
        let text = self.to_dot(verbose);
        std::fs::write(path.as_ref(), text).map_err(|e| GraphError::Io {
            path: path.as_ref().display().to_string(),
            message: e.to_string(),
        })
    }

    /// The text [`print_dot`](Self::print_dot) writes.
    pub fn to_dot(&self, verbose: bool) -> String {
        dot::to_dot(&self.data.lock().nodes, verbose)
    }

    /// Makes the executable graph: see [`ExecGraph`]. The graph can no longer be modified
    /// afterwards (adding is an error): its nodes are what the executable graph runs.
    pub fn finalize(&self) -> Result<ExecGraph, GraphError> {
        let nodes = {
            let d = self.data.lock();
            if let Some(e) = &d.poisoned {
                return Err(e.clone());
            }
            d.nodes.clone()
        };
        let exec = ExecGraph::build(&self.ctx, self.props, &nodes)?;
        self.data.lock().finalized = true;
        Ok(exec)
    }
}

impl GraphData {
    fn label(&self, i: usize) -> Result<String, GraphError> {
        match self.nodes.get(i) {
            Some(n) => Ok(n.label(i)),
            None => Err(GraphError::NoSuchNode(format!("node {i}"))),
        }
    }

    fn edge(&mut self, from: usize, to: usize) {
        if from != to && !self.nodes[from].succs.contains(&to) {
            self.nodes[from].succs.push(to);
            self.nodes[to].preds.push(from);
        }
    }

    /// Adds a node after `deps` and the nodes its accesses conflict with.
    pub(crate) fn add(&mut self, node: Node, mut deps: Vec<usize>) -> Result<usize, GraphError> {
        for &p in &deps {
            self.label(p)?;
        }
        let id = self.nodes.len();
        for a in &node.accessors {
            self.tracks.entry(a.buffer.id).or_default().access(id, a.mode.writes(), &mut deps);
        }
        self.nodes.push(NodeData {
            kind: node.kind,
            name: node.name,
            accessors: node.accessors,
            preds: Vec::new(),
            succs: Vec::new(),
        });
        deps.sort_unstable();
        deps.dedup();
        for p in deps {
            self.edge(p, id);
        }
        Ok(id)
    }

    /// A path `from -> ... -> to` along successors (both ends included), if any.
    fn path(&self, from: usize, to: usize) -> Option<Vec<usize>> {
        let mut parent: Vec<Option<usize>> = vec![None; self.nodes.len()];
        let mut seen = vec![false; self.nodes.len()];
        let mut stack = vec![from];
        seen[from] = true;
        while let Some(n) = stack.pop() {
            if n == to {
                let mut path = vec![n];
                let mut c = n;
                while let Some(p) = parent[c] {
                    path.push(p);
                    c = p;
                }
                path.reverse();
                return Some(path);
            }
            for &s in &self.nodes[n].succs {
                if !seen[s] {
                    seen[s] = true;
                    parent[s] = Some(n);
                    stack.push(s);
                }
            }
        }
        None
    }
}
