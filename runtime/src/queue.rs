//! Queues: where commands are submitted.
//!
//! [`Queue::submit`] hands a [`Handler`] to a closure that declares the command's buffer
//! requirements ([`Handler::read`], [`Handler::write`], [`Handler::read_write`]), explicit
//! dependencies ([`Handler::depends_on`]) and its action ([`Handler::parallel_for`],
//! [`Handler::host_task`], [`Handler::copy`], [`Handler::fill`]; none makes a barrier-like
//! no-op). The [scheduler](crate::scheduler) derives its dependencies (per buffer and across
//! all queues of the context, plus the previous command of an in-order queue) and runs it
//! on a worker once they have finished. A kernel launch whose dependencies have all
//! finished when it is submitted, on a device whose launches return once submitted (CUDA,
//! Vulkan), is launched by the submitting thread itself: an eager launch then costs the
//! driver's submission, without a hand-off to a worker.
//!
//! The [`Event`] of each command reports errors at [`Event::wait`]; [`Queue::wait`] waits
//! for everything submitted to the queue. While a queue records into a command graph
//! ([`crate::QueueGraph::begin_recording`]), its submissions become the graph's nodes instead.

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use kiln_ir::launch::{Element, NdRange};
use kiln_ir::Imm;

use crate::buffer::AccessProps;
use crate::buffer::Arg;
use crate::buffer::{AccessMode, Accessor, AnyBuffer, Buffer};
use crate::context::{Context, KernelHandle};
use crate::error::RuntimeError;
use crate::event::{Event, EventStatus, FusionHook};
use crate::scheduler::command::HostTaskContext;
use crate::scheduler::{Action, CommandDesc, SubmitOpts};
use crate::sync::{ranks, RankedGuard, RankedMutex};

/// In-order queues run commands one after another in submission order; out-of-order
/// queues order them only by their dependencies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueOrder {
    /// Each command depends on the previous one.
    InOrder,
    /// Only requirements and explicit events order commands.
    OutOfOrder,
}

/// Collects one command's requirements and action inside [`Queue::submit`].
pub struct Handler {
    pub(crate) name: Option<String>,
    pub(crate) accessors: Vec<Accessor>,
    pub(crate) deps: Vec<Event>,
    pub(crate) action: Action,
}

impl Handler {
    fn access<T: Element>(&mut self, b: &Buffer<T>, mode: AccessMode) -> Accessor {
        let a = b.access(mode);
        self.accessors.push(a.clone());
        a
    }

    /// Declares that the command reads `b`.
    pub fn read<T: Element>(&mut self, b: &Buffer<T>) -> Accessor {
        self.access(b, AccessMode::Read)
    }

    /// Declares that the command writes `b`.
    pub fn write<T: Element>(&mut self, b: &Buffer<T>) -> Accessor {
        self.access(b, AccessMode::Write)
    }

    /// Declares that the command reads and writes `b`.
    pub fn read_write<T: Element>(&mut self, b: &Buffer<T>) -> Accessor {
        self.access(b, AccessMode::ReadWrite)
    }

    /// Declares that the command uses `b` as `mode` says, with the fusion properties
    /// `props` (promotion to private or local memory, `no_init`: see
    /// [`crate::QueueFusion::complete_fusion`]).
    pub fn access_with<T: Element>(
        &mut self,
        b: &Buffer<T>,
        mode: AccessMode,
        props: AccessProps,
    ) -> Accessor {
        let a = b.access(mode).with_props(props);
        self.accessors.push(a.clone());
        a
    }

    /// Declares that the command uses elements `offset..offset + len` of `b` as `mode` says,
    /// with the fusion properties `props` (`AccessProps::default()` for none): a ranged
    /// accessor ([`Accessor::with_range`]). A kernel argument bound to it sees a buffer of
    /// `len` elements whose index 0 is element `offset` of `b`. A range past the end of `b`
    /// is refused (and nothing is declared), naming the buffer, the offset, the length and
    /// the buffer's size.
    ///
    /// ```
    /// use kiln_runtime::{interp_device, AccessMode, AccessProps, Buffer, Context};
    /// use kiln_runtime::{NdRange, Queue, QueueOrder};
    /// let ctx = Context::new(interp_device());
    /// let m = kiln_ir::parse_module(
    ///     "kernel inc(x: ptr<global, u32>) { let i: u32 = global_id(0); x[i] = x[i] + 1u32; }",
    /// )
    /// .unwrap();
    /// let k = ctx.get_kernel(&m, "inc").unwrap();
    /// let q = Queue::new(&ctx, QueueOrder::InOrder);
    /// let b = Buffer::from_slice(&[0u32; 8]);
    /// q.submit(|h| {
    ///     let a = h.access_range(&b, AccessMode::ReadWrite, 2, 4, AccessProps::default()).unwrap();
    ///     h.parallel_for(&k, NdRange::new(&[4]), vec![a.into()]);
    /// })
    /// .wait()
    /// .unwrap();
    /// assert_eq!(b.read().unwrap(), [0, 0, 1, 1, 1, 1, 0, 0]);
    /// ```
    pub fn access_range<T: Element>(
        &mut self,
        b: &Buffer<T>,
        mode: AccessMode,
        offset: usize,
        len: usize,
        props: AccessProps,
    ) -> Result<Accessor, RuntimeError> {
        let a = b.access(mode).with_props(props).with_range(offset, len)?;
        self.accessors.push(a.clone());
        Ok(a)
    }

    /// Declares that the command uses the untyped buffer `b` as `mode` says.
    pub fn access_any(&mut self, b: &AnyBuffer, mode: AccessMode) -> Accessor {
        let a = Accessor::new(b, mode);
        self.accessors.push(a.clone());
        a
    }

    /// Runs the command only after `e` has finished.
    pub fn depends_on(&mut self, e: &Event) {
        self.deps.push(e.clone());
    }

    /// Names the command (in errors and events).
    pub fn name(&mut self, name: impl Into<String>) {
        self.name = Some(name.into());
    }

    /// Makes the command a launch of `kernel` over `range`. Each buffer argument's accessor
    /// is one of the command's requirements (as if declared with [`Handler::access_any`]),
    /// so `(&buffer).into()`, which reads and writes it, needs no declaration of its own.
    /// The arguments are checked against the kernel's parameters before it runs: a mismatch
    /// is a [`RuntimeError::Argument`] at [`Event::wait`] naming the argument.
    pub fn parallel_for(&mut self, kernel: &KernelHandle, range: NdRange, args: Vec<Arg>) {
        self.accessors.extend(args.iter().filter_map(|a| a.buffer().cloned()));
        self.action = Action::Kernel { kernel: kernel.clone(), range, args };
    }

    /// Makes the command a host task: `f` runs on a worker thread once the dependencies
    /// are met and may touch the buffers of the command's accessors. A queue recording
    /// into a graph refuses it (a graph replays its nodes): use
    /// [`host_task_fn`](Self::host_task_fn) there.
    pub fn host_task(
        &mut self,
        f: impl FnOnce(&mut HostTaskContext) -> Result<(), String> + Send + 'static,
    ) {
        self.action = Action::Host(Box::new(f));
    }

    /// Like [`host_task`](Self::host_task), with a closure that can run again: what a
    /// command graph records and replays.
    pub fn host_task_fn(
        &mut self,
        f: impl Fn(&mut HostTaskContext) -> Result<(), String> + Send + Sync + 'static,
    ) {
        self.action = Action::SharedHost(std::sync::Arc::new(f));
    }

    /// Makes the command a copy of `src` into the start of `dst` (same element type, `dst`
    /// at least as long; otherwise the command fails naming both). Declares the accesses.
    pub fn copy(&mut self, src: &AnyBuffer, dst: &AnyBuffer) {
        let src = self.access_any(src, AccessMode::Read);
        let dst = self.access_any(dst, AccessMode::Write);
        self.action = Action::Copy { src, dst };
    }

    /// Makes the command a fill of every element of `dst` with `value` (of the buffer's
    /// element type; otherwise the command fails naming both). Declares the access.
    pub fn fill(&mut self, dst: &AnyBuffer, value: Imm) {
        let dst = self.access_any(dst, AccessMode::Write);
        self.action = Action::Fill { dst, value };
    }
}

static NEXT_COMMAND: AtomicU64 = AtomicU64::new(0);
static NEXT_QUEUE: AtomicU64 = AtomicU64::new(0);

/// A fresh command number, for command names.
pub(crate) fn next_command_id() -> u64 {
    NEXT_COMMAND.fetch_add(1, Ordering::Relaxed)
}

/// A layer above the queue that records its submissions instead of running them (a
/// command graph, [`crate::graph`]): the queue knows it only through this.
pub(crate) trait Recorder: Send + Sync {
    /// Records the command `h`, submitted to `q`; its event.
    fn record(&self, q: &Queue, h: Handler) -> Event;
}

/// A layer above the queue that holds its kernels back (a fusion list, [`crate::fusion`]):
/// the queue knows it only through this.
pub(crate) trait Holder: Send + Sync {
    /// Takes the kernel command `desc` of `q` if it collects kernels (leaving `desc`
    /// empty): the event the submission returns, and the fusions it depends on (the queue
    /// ends them early once it holds no lock).
    fn hold(&self, q: &Queue, desc: &mut CommandDesc) -> Option<(Event, Vec<Arc<dyn FusionHook>>)>;
    /// Whether it still collects kernels.
    fn active(&self) -> bool;
    /// `q` is dropped.
    fn queue_dropped(&self, q: &Queue);
    /// Itself, to be downcast to its type.
    fn as_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

/// A queue of commands for one context.
pub struct Queue {
    ctx: Context,
    order: QueueOrder,
    last: RankedMutex<Option<Event>>,
    events: RankedMutex<Vec<Event>>,
    /// The graph the queue records into, if any.
    recorder: RankedMutex<Option<Arc<dyn Recorder>>>,
    /// A number for the queue, in warnings.
    id: u64,
    /// The queue's last fusion, kept until the next one starts so that its event stays
    /// valid.
    holder: RankedMutex<Option<Arc<dyn Holder>>>,
}

impl Drop for Queue {
    /// A queue dropped in fusion mode cancels the fusion: its kernels run.
    fn drop(&mut self) {
        let holder = self.holder.lock().clone();
        if let Some(h) = holder {
            h.queue_dropped(self);
        }
    }
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").field("order", &self.order).finish_non_exhaustive()
    }
}

impl Queue {
    /// A queue on `ctx`.
    pub fn new(ctx: &Context, order: QueueOrder) -> Queue {
        Queue {
            ctx: ctx.clone(),
            order,
            last: RankedMutex::new(ranks::QUEUE_LAST, None),
            events: RankedMutex::new(ranks::QUEUE_EVENTS, Vec::new()),
            recorder: RankedMutex::new(ranks::QUEUE_RECORDING, None),
            id: NEXT_QUEUE.fetch_add(1, Ordering::Relaxed),
            holder: RankedMutex::new(ranks::QUEUE_FUSION, None),
        }
    }

    /// The context.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Whether the queue is in-order.
    pub fn order(&self) -> QueueOrder {
        self.order
    }

    /// The queue's number (unique in the process), as warnings and errors name it.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The graph recording the queue's submissions, if any (taken and set by
    /// [`crate::graph`]).
    pub(crate) fn recorder(&self) -> RankedGuard<'_, Option<Arc<dyn Recorder>>> {
        self.recorder.lock()
    }

    /// The queue's fusion, if one was started (taken and set by [`crate::fusion`]).
    pub(crate) fn holder(&self) -> RankedGuard<'_, Option<Arc<dyn Holder>>> {
        self.holder.lock()
    }

    /// Whether a fusion collects the queue's kernels.
    pub(crate) fn holding(&self) -> bool {
        self.holder.lock().as_ref().is_some_and(|h| h.active())
    }

    /// Submits one command, described by `f`; returns its event at once. While the queue
    /// records into a graph, the command becomes a node instead (see
    /// [`crate::QueueGraph::begin_recording`]). In fusion mode ([`crate::QueueFusion::start_fusion`]) a kernel is
    /// held back in the fusion list and the event returned is the fusion's.
    pub fn submit(&self, f: impl FnOnce(&mut Handler)) -> Event {
        let mut h = Handler {
            name: None,
            accessors: Vec::new(),
            deps: Vec::new(),
            action: Action::Nothing,
        };
        f(&mut h);
        let recorder = self.recorder.lock().clone();
        if let Some(r) = recorder {
            return r.record(self, h);
        }
        let id = next_command_id();
        let name = match (&h.name, &h.action) {
            (Some(n), _) => format!("`{n}` #{id}"),
            // One allocation for the common case.
            (None, Action::Kernel { kernel, .. }) => format!("kernel `{}` #{id}", kernel.name),
            (None, action) => format!("{} #{id}", action.describe()),
        };
        let mut desc = CommandDesc {
            name,
            accessors: crate::buffer::merge_accessors(h.accessors),
            deps: h.deps,
            action: h.action,
        };
        if matches!(desc.action, Action::Kernel { .. }) {
            let name = desc.name.clone();
            // Held under the slot's lock, so that no other fusion starts meanwhile.
            let held = self.holder.lock().as_ref().and_then(|f| f.hold(self, &mut desc));
            if let Some((event, aborts)) = held {
                self.remember(&event);
                self.abort_for(&aborts, &name);
                return event;
            }
        }
        self.submit_desc(desc)
    }

    /// Submits a described command in this queue's order.
    pub(crate) fn submit_desc(&self, desc: CommandDesc) -> Event {
        self.submit_desc_inline(desc, true)
    }

    /// [`submit_desc`](Self::submit_desc); `inline`: a ready launch may run on this thread
    /// (see [`SubmitOpts::inline`]), once the queue's locks are released.
    pub(crate) fn submit_desc_inline(&self, desc: CommandDesc, inline: bool) -> Event {
        let sub = self.submit_opts(desc, SubmitOpts { inline, ..SubmitOpts::default() });
        if let Some(run) = sub.inline {
            run.run();
        }
        self.remember(&sub.event);
        if !sub.aborts.is_empty() {
            self.abort_for(&sub.aborts, sub.event.name());
        }
        sub.event
    }

    /// Ends the fusions in `hooks` early: command `name`, submitted to this queue, depends
    /// on kernels they hold.
    fn abort_for(&self, hooks: &[Arc<dyn FusionHook>], name: &str) {
        for h in hooks {
            let why = if h.queue_id() == self.id {
                format!(
                    "{name}, submitted to the same queue, depends on a kernel in the fusion list"
                )
            } else if self.holding() {
                format!(
                    "{name}, held in the fusion list of queue #{}, depends on a kernel in this \
                     fusion list (a dependency between two fusions)",
                    self.id
                )
            } else {
                format!("{name}, on queue #{}, depends on a kernel in the fusion list", self.id)
            };
            h.abort(&why);
        }
    }

    /// Submits a described command in this queue's order, as `opts` say.
    pub(crate) fn submit_opts(
        &self,
        desc: CommandDesc,
        opts: SubmitOpts,
    ) -> crate::scheduler::Submitted {
        // The in-order chain and the buffers' bookkeeping are updated under the queue's
        // lock so that submission order is dependency order.
        let mut last = self.last.lock();
        if self.order == QueueOrder::InOrder {
            self.ctx.scheduler().submit(self.ctx.device(), desc, Some(&mut *last), opts)
        } else {
            let s = self.ctx.scheduler().submit(self.ctx.device(), desc, None, opts);
            *last = Some(s.event.clone());
            s
        }
    }

    /// Adds `event` to the events [`Queue::wait`] waits for.
    pub(crate) fn remember(&self, event: &Event) {
        let mut evs = self.events.lock();
        // Finished events are dropped when the list has doubled since (not on every
        // submission: a long chain of pending launches would make that quadratic).
        if evs.len() >= 8 && evs.len().is_power_of_two() {
            evs.retain(|e| e.status() != EventStatus::Complete);
        }
        // A fusion's event comes back for each of its kernels: listed once.
        if event.hook().is_none() || !evs.iter().any(|e| e.same_event(event)) {
            evs.push(event.clone());
        }
    }

    /// Waits for every command submitted so far; the first error (in submission order).
    /// In fusion mode this ends the fusion early: its kernels run unfused.
    /// A queue recording into a graph cannot be waited on (its commands do not run until
    /// the graph is submitted): that is an error.
    pub fn wait(&self) -> Result<(), RuntimeError> {
        if self.recorder.lock().is_some() {
            return Err(RuntimeError::Invalid {
                command: "queue wait".into(),
                message: "the queue is recording into a command graph; its commands run \
                          when the graph is submitted (call end_recording first)"
                    .into(),
            });
        }
        let evs = std::mem::take(&mut *self.events.lock());
        let mut first = None;
        for e in evs {
            if let Err(err) = e.wait_because(|| format!("a wait on queue #{}", self.id)) {
                first.get_or_insert(err);
            }
        }
        first.map_or(Ok(()), Err)
    }
}
