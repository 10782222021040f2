//! Record and replay: a queue's submissions become graph nodes.

use super::{Graph, GraphError, KernelRef, Node, NodeKind};
use crate::error::RuntimeError;
use crate::event::Event;
use crate::queue::{next_command_id, Handler, Queue, QueueOrder};
use crate::scheduler::deps::merge_accessors;
use crate::scheduler::{lock, Action};

/// A queue's recording: the graph and the queue's last recorded node (an in-order queue's
/// next node depends on it).
pub(crate) struct Recording {
    pub graph: Graph,
    pub last: Option<usize>,
}

impl Queue {
    /// Starts recording into `graph`: until [`end_recording`](Self::end_recording), every
    /// [`submit`](Self::submit) adds a node to `graph` instead of running, with edges from
    /// its buffer accesses, its event dependencies (events of commands recorded into the
    /// same graph; others are waited for now, as DPC++ does) and, on an in-order queue, the
    /// previous recorded command. The events returned then are not waitable (waiting is an
    /// error saying so), nor is the queue ([`wait`](Self::wait)). Several queues may
    /// record into one graph.
    pub fn begin_recording(&self, graph: &Graph) -> Result<(), GraphError> {
        let mut r = lock(&self.recording);
        if r.is_some() {
            return Err(GraphError::Recording("the queue is already recording".into()));
        }
        if self.is_in_fusion_mode() {
            return Err(GraphError::Recording(
                "the queue is in fusion mode (complete or cancel the fusion first)".into(),
            ));
        }
        if lock(&graph.data).finalized {
            return Err(GraphError::Finalized { what: "begin_recording".into() });
        }
        if !self.ctx.same_context(&graph.ctx) {
            return Err(GraphError::Recording(
                "the graph belongs to another context than the queue".into(),
            ));
        }
        *r = Some(Recording { graph: graph.clone(), last: None });
        Ok(())
    }

    /// Stops recording; submissions run again.
    pub fn end_recording(&self) -> Result<(), GraphError> {
        match lock(&self.recording).take() {
            Some(_) => Ok(()),
            None => {
                Err(GraphError::Recording("end_recording on a queue that is not recording".into()))
            }
        }
    }

    /// Whether the queue is recording into a graph.
    pub fn is_recording(&self) -> bool {
        lock(&self.recording).is_some()
    }
}

/// Records one submission of `q` (which is recording) as a node; the event returned fails
/// at `wait` saying that the command runs only with the graph.
pub(crate) fn record(q: &Queue, rec: &mut Recording, h: Handler) -> Event {
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
        let data = lock(&rec.graph.data);
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
    let mut data = lock(&rec.graph.data);
    if q.order() == QueueOrder::InOrder {
        deps.extend(rec.last);
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
    rec.last = Some(index);
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
