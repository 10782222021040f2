//! Queues, command submission and the scheduler.
//!
//! [`Queue::submit`] hands a [`Handler`] to a closure that declares the command's buffer
//! requirements ([`Handler::read`], [`Handler::write`], [`Handler::read_write`]), explicit
//! dependencies ([`Handler::depends_on`]) and its action ([`Handler::parallel_for`] or
//! [`Handler::host_task`]; none makes a barrier-like no-op). The scheduler then:
//!
//! * derives dependencies from the requirements, per buffer and across all queues of the
//!   context: a read depends on the buffer's last writer (read-after-write); a write
//!   depends on the last writer (write-after-write) and on every read since
//!   (write-after-read);
//! * adds the previous command of an in-order queue;
//! * runs a command on a worker thread once all its dependencies have finished, so
//!   independent commands run concurrently.
//!
//! If a dependency failed, the command does not run and fails with
//! [`RuntimeError::DependencyFailed`]. The [`Event`] of each command reports errors at
//! [`Event::wait`]; [`Queue::wait`] waits for everything submitted to the queue.
//!
//! The graph built here (commands with explicit predecessor edges) is what a command
//! graph records and replays.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use kiln_ir::launch::{self, Arg, Element, NdRange};
use kiln_ir::Imm;

use crate::buffer::{AccessMode, Accessor, AnyBuffer, Buffer, BufferInner};
use crate::context::{Context, KernelHandle};
use crate::error::{panic_message, RuntimeError};
use crate::event::{Event, EventStatus};

/// In-order queues run commands one after another in submission order; out-of-order
/// queues order them only by their dependencies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueOrder {
    /// Each command depends on the previous one.
    InOrder,
    /// Only requirements and explicit events order commands.
    OutOfOrder,
}

/// A kernel argument: a scalar, or a buffer through an accessor.
#[derive(Clone, Debug)]
pub enum KernelArg {
    /// A scalar parameter's value.
    Scalar(Imm),
    /// A pointer parameter bound to the accessor's buffer.
    Buffer(Accessor),
}

impl KernelArg {
    /// A scalar argument from a Rust value.
    pub fn scalar<T: Element>(v: T) -> KernelArg {
        KernelArg::Scalar(v.to_imm())
    }
}

impl From<&Accessor> for KernelArg {
    fn from(a: &Accessor) -> KernelArg {
        KernelArg::Buffer(a.clone())
    }
}

impl From<Accessor> for KernelArg {
    fn from(a: Accessor) -> KernelArg {
        KernelArg::Buffer(a)
    }
}

type HostFn = Box<dyn FnOnce(&mut HostTaskContext) -> Result<(), String> + Send>;

enum Action {
    Kernel { kernel: KernelHandle, range: NdRange, args: Vec<KernelArg> },
    Host(HostFn),
    Nothing,
}

/// What a host task can touch: the buffers of its accessors.
pub struct HostTaskContext {
    _private: (),
}

impl HostTaskContext {
    /// The contents of the accessor's buffer (`None` if `T` is not its element type).
    pub fn read<T: Element>(&self, a: &Accessor) -> Option<Vec<T>> {
        a.buffer.data().to_vec::<T>()
    }

    /// Overwrites the start of the accessor's buffer with `values`; an error if the
    /// accessor does not write, or `T` is not the element type.
    pub fn write<T: Element>(&mut self, a: &Accessor, values: &[T]) -> Result<(), String> {
        if !a.mode.writes() {
            return Err("host task writes through a read-only accessor".into());
        }
        let mut d = a.buffer.data();
        for (i, v) in values.iter().enumerate().take(a.buffer.len) {
            d.set(i, v.to_imm()).map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

/// Collects one command's requirements and action inside [`Queue::submit`].
pub struct Handler {
    name: Option<String>,
    accessors: Vec<Accessor>,
    deps: Vec<Event>,
    action: Action,
}

impl Handler {
    fn access<T: Element>(&mut self, b: &Buffer<T>, mode: AccessMode) -> Accessor {
        let a = Accessor { buffer: b.inner.clone(), mode };
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

    /// Declares that the command uses the untyped buffer `b` as `mode` says.
    pub fn access_any(&mut self, b: &AnyBuffer, mode: AccessMode) -> Accessor {
        let a = Accessor { buffer: b.inner.clone(), mode };
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

    /// Makes the command a launch of `kernel` over `range`.
    pub fn parallel_for(&mut self, kernel: &KernelHandle, range: NdRange, args: Vec<KernelArg>) {
        self.action = Action::Kernel { kernel: kernel.clone(), range, args };
    }

    /// Makes the command a host task: `f` runs on a worker thread once the dependencies
    /// are met and may touch the buffers of the command's accessors.
    pub fn host_task(
        &mut self,
        f: impl FnOnce(&mut HostTaskContext) -> Result<(), String> + Send + 'static,
    ) {
        self.action = Action::Host(Box::new(f));
    }
}

/// A submitted command in the scheduler.
pub(crate) struct Command {
    event: Event,
    action: Mutex<Option<Action>>,
    accessors: Vec<Accessor>,
    /// Unfinished dependencies, plus one while the command is being wired up.
    pending: Mutex<usize>,
    /// The name of a failed dependency.
    failed_dep: Mutex<Option<String>>,
    device: Arc<dyn crate::Device>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

struct SchedState {
    ready: VecDeque<Arc<Command>>,
    /// Commands submitted and not yet finished (workers outlive a shutdown until 0).
    inflight: usize,
    shutdown: bool,
}

/// The worker threads of a context and their ready list.
pub(crate) struct Scheduler {
    state: Mutex<SchedState>,
    work: Condvar,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

impl Scheduler {
    pub fn start(n: usize) -> Arc<Scheduler> {
        let s = Arc::new(Scheduler {
            state: Mutex::new(SchedState { ready: VecDeque::new(), inflight: 0, shutdown: false }),
            work: Condvar::new(),
            workers: Mutex::new(Vec::new()),
        });
        let handles = (0..n)
            .map(|i| {
                let s = s.clone();
                std::thread::Builder::new()
                    .name(format!("kiln-worker-{i}"))
                    .spawn(move || s.worker())
                    .expect("spawning a worker thread")
            })
            .collect();
        *lock(&s.workers) = handles;
        s
    }

    /// Counts a newly submitted command.
    fn admit(&self) {
        lock(&self.state).inflight += 1;
    }

    /// Stops the workers once every submitted command has finished.
    pub fn shutdown(&self) {
        lock(&self.state).shutdown = true;
        self.work.notify_all();
        let hs = std::mem::take(&mut *lock(&self.workers));
        let me = std::thread::current().id();
        for h in hs {
            if h.thread().id() != me {
                let _ = h.join();
            }
        }
    }

    fn enqueue(&self, c: Arc<Command>) {
        lock(&self.state).ready.push_back(c);
        self.work.notify_one();
    }

    fn worker(self: Arc<Self>) {
        loop {
            let cmd = {
                let mut s = lock(&self.state);
                loop {
                    if let Some(c) = s.ready.pop_front() {
                        break c;
                    }
                    if s.shutdown && s.inflight == 0 {
                        return;
                    }
                    s = self.work.wait(s).unwrap_or_else(PoisonError::into_inner);
                }
            };
            self.execute(cmd);
        }
    }

    fn execute(&self, cmd: Arc<Command>) {
        let name = cmd.event.name().to_string();
        let error = if let Some(dep) = lock(&cmd.failed_dep).take() {
            Some(RuntimeError::DependencyFailed { command: name, dependency: dep })
        } else {
            cmd.event.state().status = EventStatus::Running;
            let action = lock(&cmd.action).take().unwrap_or(Action::Nothing);
            match catch_unwind(AssertUnwindSafe(|| run_action(&cmd, action))) {
                Ok(r) => r.err(),
                Err(p) => Some(RuntimeError::Panicked {
                    command: name,
                    message: panic_message(&*p).unwrap_or_default(),
                }),
            }
        };
        let failed = error.is_some();
        for succ in cmd.event.finish(error) {
            if failed {
                lock(&succ.failed_dep).get_or_insert_with(|| cmd.event.name().to_string());
            }
            self.release(succ);
        }
        let mut s = lock(&self.state);
        s.inflight -= 1;
        if s.inflight == 0 && s.shutdown {
            self.work.notify_all();
        }
    }

    /// One dependency of `c` finished; enqueue it when none is left.
    fn release(&self, c: Arc<Command>) {
        let ready = {
            let mut p = lock(&c.pending);
            *p -= 1;
            *p == 0
        };
        if ready {
            self.enqueue(c);
        }
    }
}

fn run_action(cmd: &Command, action: Action) -> Result<(), RuntimeError> {
    let name = cmd.event.name();
    match action {
        Action::Nothing => Ok(()),
        Action::Host(f) => f(&mut HostTaskContext { _private: () })
            .map_err(|message| RuntimeError::HostTask { command: name.into(), message }),
        Action::Kernel { kernel, range, args } => {
            // Gather the distinct buffers; written ones are moved out for the launch (the
            // scheduler guarantees no one else uses them meanwhile), read-only ones copied.
            let mut bufs: Vec<(Arc<BufferInner>, bool)> = Vec::new();
            let mut iargs = Vec::with_capacity(args.len());
            for a in &args {
                match a {
                    KernelArg::Scalar(v) => iargs.push(Arg::Scalar(*v)),
                    KernelArg::Buffer(acc) => {
                        let writes = cmd
                            .accessors
                            .iter()
                            .filter(|x| Arc::ptr_eq(&x.buffer, &acc.buffer))
                            .any(|x| x.mode.writes());
                        let i = match bufs.iter().position(|(b, _)| Arc::ptr_eq(b, &acc.buffer)) {
                            Some(i) => i,
                            None => {
                                bufs.push((acc.buffer.clone(), writes));
                                bufs.len() - 1
                            }
                        };
                        iargs.push(Arg::Buffer(i));
                    }
                }
            }
            let mut data: Vec<launch::Buffer> = bufs
                .iter()
                .map(|(b, w)| {
                    let mut d = b.data();
                    if *w {
                        std::mem::replace(&mut *d, launch::Buffer::zeroed(b.elem, 0))
                    } else {
                        d.clone()
                    }
                })
                .collect();
            let r = match &kernel.sanitized {
                None => cmd.device.run(&kernel.handle, &range, &iargs, &mut data),
                Some(s) => crate::sanitize::run_checked(
                    &*cmd.device,
                    s,
                    &kernel.handle,
                    &range,
                    &iargs,
                    &mut data,
                ),
            };
            for ((b, w), d) in bufs.iter().zip(data) {
                if *w {
                    *b.data() = d;
                }
            }
            r.map_err(|source| RuntimeError::Kernel { command: name.into(), source })
        }
    }
}

static NEXT_COMMAND: AtomicU64 = AtomicU64::new(0);

/// A queue of commands for one context.
pub struct Queue {
    ctx: Context,
    order: QueueOrder,
    last: Mutex<Option<Event>>,
    events: Mutex<Vec<Event>>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").field("order", &self.order).finish_non_exhaustive()
    }
}

impl Queue {
    /// A queue on `ctx`.
    pub fn new(ctx: &Context, order: QueueOrder) -> Queue {
        Queue { ctx: ctx.clone(), order, last: Mutex::new(None), events: Mutex::new(Vec::new()) }
    }

    /// The context.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Submits one command, described by `f`; returns its event at once.
    pub fn submit(&self, f: impl FnOnce(&mut Handler)) -> Event {
        let mut h = Handler {
            name: None,
            accessors: Vec::new(),
            deps: Vec::new(),
            action: Action::Nothing,
        };
        f(&mut h);
        let id = NEXT_COMMAND.fetch_add(1, Ordering::Relaxed);
        let name = match (&h.name, &h.action) {
            (Some(n), _) => format!("`{n}` #{id}"),
            (None, Action::Kernel { kernel, .. }) => format!("kernel `{}` #{id}", kernel.name),
            (None, Action::Host(_)) => format!("host task #{id}"),
            (None, Action::Nothing) => format!("barrier #{id}"),
        };
        // One accessor per buffer, with the strongest mode asked for.
        let mut accessors: Vec<Accessor> = Vec::new();
        for a in h.accessors {
            match accessors.iter_mut().find(|x| Arc::ptr_eq(&x.buffer, &a.buffer)) {
                Some(x) => x.mode = x.mode.join(a.mode),
                None => accessors.push(a),
            }
        }
        let event = Event::new(name);
        let cmd = Arc::new(Command {
            event: event.clone(),
            action: Mutex::new(Some(h.action)),
            accessors: accessors.clone(),
            pending: Mutex::new(1),
            failed_dep: Mutex::new(None),
            device: self.ctx.device().clone(),
        });
        self.ctx.scheduler().admit();
        let mut deps = h.deps;
        {
            // The in-order chain and the buffers' bookkeeping are updated under the
            // queue's lock so that submission order is dependency order.
            let mut last = lock(&self.last);
            if self.order == QueueOrder::InOrder {
                deps.extend(last.clone());
            }
            for a in &accessors {
                let mut t = a.buffer.track();
                deps.extend(t.last_write.clone());
                if a.mode.writes() {
                    deps.append(&mut t.reads);
                    t.last_write = Some(event.clone());
                } else {
                    t.reads.retain(|e| {
                        !matches!(e.status(), EventStatus::Complete | EventStatus::Failed)
                    });
                    t.reads.push(event.clone());
                }
            }
            *last = Some(event.clone());
        }
        for d in &deps {
            let mut s = d.state();
            match s.status {
                EventStatus::Complete => {}
                EventStatus::Failed => {
                    lock(&cmd.failed_dep).get_or_insert_with(|| d.name().to_string());
                }
                _ => {
                    *lock(&cmd.pending) += 1;
                    s.successors.push(cmd.clone());
                }
            }
        }
        {
            let mut evs = lock(&self.events);
            evs.retain(|e| e.status() != EventStatus::Complete);
            evs.push(event.clone());
        }
        self.ctx.scheduler().release(cmd);
        event
    }

    /// Waits for every command submitted so far; the first error (in submission order).
    pub fn wait(&self) -> Result<(), RuntimeError> {
        let evs = std::mem::take(&mut *lock(&self.events));
        let mut first = None;
        for e in evs {
            if let Err(err) = e.wait() {
                first.get_or_insert(err);
            }
        }
        first.map_or(Ok(()), Err)
    }
}
