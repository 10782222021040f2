//! Record and replay: a queue's submissions become graph nodes.

use std::sync::Arc;

use super::exec::ExecGraph;
use super::{Graph, GraphError, KernelRef, Node, NodeKind};
use crate::buffer::merge_accessors;
use crate::error::RuntimeError;
use crate::event::Event;
use crate::queue::{next_command_id, Handler, Queue, QueueOrder, Recorder};
use crate::scheduler::Action;
use crate::sync::{ranks, RankedMutex};

/// A queue's recording: the graph and the queue's last recorded node (an in-order queue's
/// next node depends on it), whose lock also keeps the queue's submissions recorded one at
/// a time, in order.
pub(crate) struct Recording {
    graph: Graph,
    last: RankedMutex<Option<usize>>,
}

impl Recorder for Recording {
    fn record(&self, q: &Queue, h: Handler) -> Event {
        record(q, self, h)
    }
}

/// Command graphs on a [`Queue`]: recording its submissions and submitting executable
/// graphs (the queue's own methods are in [`crate::queue`]; graphs sit above the queue and
/// reach it through its interface only).
pub trait QueueGraph {
    /// Starts recording into `graph`: until [`end_recording`](Self::end_recording), every
    /// [`Queue::submit`] adds a node to `graph` instead of running, with edges from its
    /// buffer accesses, its event dependencies (events of commands recorded into the same
    /// graph; others are waited for now, as DPC++ does) and, on an in-order queue, the
    /// previous recorded command. The events returned then are not waitable (waiting is an
    /// error saying so), nor is the queue ([`Queue::wait`]). Several queues may record into
    /// one graph.
    fn begin_recording(&self, graph: &Graph) -> Result<(), GraphError>;

    /// Stops recording; submissions run again.
    fn end_recording(&self) -> Result<(), GraphError>;

    /// Whether the queue is recording into a graph.
    fn is_recording(&self) -> bool;

    /// Submits a run of `exec`; returns the event of the run's last partition (which
    /// finishes last). Its partitions are ordered after the previous run of `exec` and, by
    /// their buffer requirements, with all other work of the context. An executable graph
    /// of another context, or a submission while the queue records, fails at `wait`.
    fn submit_graph(&self, exec: &ExecGraph) -> Event;
}

impl QueueGraph for Queue {
    fn begin_recording(&self, graph: &Graph) -> Result<(), GraphError> {
        let mut r = self.recorder();
        if r.is_some() {
            return Err(GraphError::Recording("the queue is already recording".into()));
        }
        if self.holding() {
            return Err(GraphError::Recording(
                "the queue is in fusion mode (complete or cancel the fusion first)".into(),
            ));
        }
        if graph.data.lock().finalized {
            return Err(GraphError::Finalized { what: "begin_recording".into() });
        }
        if !self.context().same_context(&graph.ctx) {
            return Err(GraphError::Recording(
                "the graph belongs to another context than the queue".into(),
            ));
        }
        *r = Some(Arc::new(Recording {
            graph: graph.clone(),
            last: RankedMutex::new(ranks::RECORDING, None),
        }));
        Ok(())
    }

    fn end_recording(&self) -> Result<(), GraphError> {
        match self.recorder().take() {
            Some(_) => Ok(()),
            None => {
                Err(GraphError::Recording("end_recording on a queue that is not recording".into()))
            }
        }
    }

    fn is_recording(&self) -> bool {
        self.recorder().is_some()
    }

    fn submit_graph(&self, exec: &ExecGraph) -> Event {
        super::exec::submit(self, exec)
    }
}

/// Records one submission of `q` (which is recording) as a node; the event returned fails
/// at `wait` saying that the command runs only with the graph.
fn record(q: &Queue, rec: &Recording, h: Handler) -> Event {
    // Held to the end: the queue's submissions are recorded one at a time.
    let mut last = rec.last.lock();
    let id = next_command_id();
    let name = match &h.name {
        Some(n) => format!("`{n}` #{id}"),
        None => format!("{} #{id}", h.action.describe()),
    };
    let kind = match h.action {
        Action::Kernel { kernel, range, args } => {
            NodeKind::Kernel { kernel: KernelRef::Handle(kernel), range, args }
        }
        Action::Host(_) => NodeKind::OnceHost,
        Action::SharedHost(f) => NodeKind::Host(f),
        Action::Copy { src, dst } => NodeKind::Copy { src, dst },
        Action::Fill { dst, value } => NodeKind::Fill { dst, value },
        Action::Exec(_) | Action::Nothing => NodeKind::Empty,
    };
    // Commands outside the graph it depends on are waited for now, while recording (the
    // graph has no way to wait for them at replay), before taking the graph's lock.
    let mut deps = Vec::new();
    let mut failed = None;
    let outside: Vec<&Event> = {
        let data = rec.graph.data.lock();
        h.deps
            .iter()
            .filter(|e| match data.recorded.iter().find(|(r, _)| r.same_event(e)) {
                Some((_, n)) => {
                    deps.push(*n);
                    false
                }
                None => true,
            })
            .collect()
    };
    for e in outside {
        if let Err(err) = e.wait() {
            failed.get_or_insert(err);
        }
    }
    let mut data = rec.graph.data.lock();
    if q.order() == QueueOrder::InOrder {
        deps.extend(*last);
    }
    let node = Node { kind, name: h.name.clone(), accessors: merge_accessors(h.accessors) };
    let once = matches!(node.kind, NodeKind::OnceHost);
    let index = match data.add(node, deps) {
        Ok(i) => i,
        Err(e) => {
            data.poisoned.get_or_insert(e.clone());
            return Event::failed(name.clone(), invalid(&name, e.to_string()));
        }
    };
    let label = data.nodes[index].label(index);
    if once {
        data.poisoned.get_or_insert(GraphError::Unsupported {
            node: label.clone(),
            why: "a host task submitted with `host_task` runs once; a graph replays its \
                  nodes: submit it with `host_task_fn`"
                .into(),
        });
    }
    if let Some(err) = failed {
        data.poisoned.get_or_insert(GraphError::Recording(format!(
            "{label} depends on a command outside the graph that failed: {err}"
        )));
    }
    *last = Some(index);
    let event = Event::failed(
        name.clone(),
        invalid(
            &name,
            format!(
                "it was recorded into a command graph as {label}; it runs when the graph is \
                 submitted: wait on the event of submit_graph"
            ),
        ),
    );
    data.recorded.push((event.clone(), index));
    event
}

fn invalid(name: &str, message: String) -> RuntimeError {
    RuntimeError::Invalid { command: name.into(), message }
}
