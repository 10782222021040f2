//! The scheduler: commands with requirements and explicit event dependencies become a
//! dependency graph, which runs on the context's worker threads.
//!
//! * `crate::deps` is the dependency model (read-after-write, write-after-read,
//!   write-after-write per buffer, plus explicit edges), shared by queues, command graphs
//!   (their recorder derives node edges with it) and the fusion-aware queue.
//! * `command` says what a command does (kernel launches, host tasks, copies, fills,
//!   prepared lists) and how a kernel launch binds its buffers.
//! * `Scheduler::submit` takes a `CommandDesc`, derives its dependencies from the
//!   buffers' tracks and its event list, and runs it on a worker once all have finished,
//!   so independent commands run concurrently. If a dependency failed, the command does
//!   not run and fails with [`RuntimeError::DependencyFailed`]. A launch (or a graph
//!   partition of device work) that is ready when submitted to a device whose launches
//!   return once submitted is handed back to the submitter to run (`SubmitOpts::inline`):
//!   it costs the driver's submission, not a worker's wake-up and the hand-off back. For
//!   the same reason, a barrier or such a launch released by a dependency that finished runs
//!   on the thread that finished it.
//!
//! Events know their waiting commands only as `Waiter`s (crate::event), so that the event,
//! buffer and queue modules do not depend on one another through the scheduler.

pub(crate) mod command;

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar};
use std::thread::JoinHandle;

pub use command::HostTaskContext;
pub(crate) use command::{Action, PreparedLaunch, SharedHostFn};

use crate::buffer::Accessor;
use crate::device::Device;
use crate::error::{panic_message, RuntimeError};
use crate::event::{Event, EventStatus, FusionHook, Waiter};
use crate::sync::{ranks, RankedMutex};

/// One command as its producer describes it.
pub(crate) struct CommandDesc {
    /// The name its event and errors carry.
    pub name: String,
    /// Its buffer requirements, one per buffer (`buffer::merge_accessors`).
    pub accessors: Vec<Accessor>,
    /// Explicit dependencies.
    pub deps: Vec<Event>,
    /// What it does.
    pub action: Action,
}

/// How [`Scheduler::submit`] submits a command; the default is a live command of a queue.
#[derive(Default)]
pub(crate) struct SubmitOpts {
    /// The event to finish (one made earlier: a fusion command's); `None` makes one.
    pub event: Option<Event>,
    /// Do not derive dependencies from the requirements, nor record the command in the
    /// buffers' tracks (a fused kernel: the held kernels it replaces stay there for it).
    pub untracked: bool,
    /// Hold the command back until [`Held::release`] (a kernel in a fusion list).
    pub hold: bool,
    /// The fusion the command belongs to: dependencies on that fusion's events do not end
    /// it early.
    pub fusion: Option<u64>,
    /// Let the submitter run the command itself ([`Submitted::inline`]) when it is ready at
    /// once and only submits work to a device that returns once it is submitted.
    pub inline: bool,
}

/// What [`Scheduler::submit`] did.
pub(crate) struct Submitted {
    /// The command's event.
    pub event: Event,
    /// Every command it waits for (explicit, chained and derived from its requirements).
    pub deps: Vec<Event>,
    /// The fusions it depends on (other than its own): the caller ends them early once it
    /// holds no lock (their held kernels must run before this command can).
    pub aborts: Vec<Arc<dyn FusionHook>>,
    /// With [`SubmitOpts::hold`]: the handle that lets it run.
    pub held: Option<Held>,
    /// With [`SubmitOpts::inline`]: the command, ready, for the submitter to run once it
    /// holds no lock ([`Inline::run`]).
    pub inline: Option<Inline>,
}

/// A ready command its submitter runs on its own thread: an eager launch on a device that
/// returns once the work is submitted costs the driver's submission, not a hand-off to a
/// worker and back. Dropped without running, it goes to a worker.
pub(crate) struct Inline(Option<Arc<Command>>);

impl Inline {
    /// Runs the command here.
    pub fn run(mut self) {
        if let Some(c) = self.0.take() {
            let s = c.scheduler.clone();
            s.execute(c);
        }
    }
}

impl Drop for Inline {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            let s = c.scheduler.clone();
            s.enqueue(c);
        }
    }
}

/// A command held back in a fusion list: wired into the dependency graph (others can
/// depend on it) but not run until released.
pub(crate) struct Held(Arc<Command>);

impl Held {
    /// Lets the command run once its dependencies have finished.
    pub fn release(self) {
        let s = self.0.scheduler.clone();
        s.release(self.0);
    }

    /// Lets the command run as an empty command after `e` (the fused kernel that does its
    /// work): commands depending on it then wait for the fused kernel.
    pub fn replace_by(self, e: &Event) {
        *self.0.action.lock() = Some(Action::Nothing);
        *self.0.pending.lock() += 1;
        let waiter: Arc<dyn Waiter> = self.0.clone();
        if let Err(status) = e.add_waiter(waiter) {
            *self.0.pending.lock() -= 1;
            if status == EventStatus::Failed {
                self.0.failed_dep.lock().get_or_insert_with(|| e.name().to_string());
            }
        }
        self.release();
    }
}

/// A submitted command in the scheduler.
struct Command {
    event: Event,
    action: RankedMutex<Option<Action>>,
    accessors: Vec<Accessor>,
    /// Unfinished dependencies, plus one while the command is being wired up.
    pending: RankedMutex<usize>,
    /// The name of a failed dependency.
    failed_dep: RankedMutex<Option<String>>,
    device: Arc<dyn Device>,
    scheduler: Arc<Scheduler>,
}

impl Waiter for Command {
    fn dependency_finished(self: Arc<Self>, failed: Option<&str>) {
        if let Some(dep) = failed {
            self.failed_dep.lock().get_or_insert_with(|| dep.to_string());
        }
        let s = self.scheduler.clone();
        if let Some(c) = s.done_wiring(self) {
            run_or_enqueue(c);
        }
    }
}

thread_local! {
    /// The commands this thread is to run next, while it runs released ones (see
    /// [`run_or_enqueue`]); `None` when it runs none.
    static RELEASED: std::cell::RefCell<Option<VecDeque<Arc<Command>>>> =
        const { std::cell::RefCell::new(None) };
}

/// A command whose last dependency finished on this thread: a barrier (nothing to run) or a
/// launch that returns once submitted ([`Scheduler::runs_inline`]) runs here, at once; any
/// other goes to a worker. Commands released while this thread runs one are queued here
/// and run in turn (a long chain of barriers does not recurse).
fn run_or_enqueue(c: Arc<Command>) {
    let here = matches!(*c.action.lock(), Some(Action::Nothing)) || Scheduler::runs_inline(&c);
    if !here {
        let s = c.scheduler.clone();
        return s.enqueue(c);
    }
    let queued = RELEASED.with_borrow_mut(|r| match r {
        Some(q) => {
            q.push_back(c.clone());
            true
        }
        None => {
            *r = Some(VecDeque::new());
            false
        }
    });
    if queued {
        return;
    }
    let mut next = Some(c);
    while let Some(c) = next {
        let s = c.scheduler.clone();
        s.execute(c);
        next = RELEASED.with_borrow_mut(|r| {
            let q = r.as_mut().expect("this thread's list of released commands");
            let n = q.pop_front();
            if n.is_none() {
                *r = None;
            }
            n
        });
    }
}

struct SchedState {
    ready: VecDeque<Arc<Command>>,
    /// Commands submitted and not yet finished (workers outlive a shutdown until 0).
    inflight: usize,
    shutdown: bool,
    /// Workers blocked waiting for work: a new ready command wakes one only if there is one.
    idle: usize,
}

/// The worker threads of a context and their ready list.
pub(crate) struct Scheduler {
    state: RankedMutex<SchedState>,
    work: Condvar,
    workers: RankedMutex<Vec<JoinHandle<()>>>,
}

impl Scheduler {
    /// A scheduler with `n` worker threads.
    pub fn start(n: usize) -> Arc<Scheduler> {
        let s = Arc::new(Scheduler {
            state: RankedMutex::new(
                ranks::SCHEDULER,
                SchedState { ready: VecDeque::new(), inflight: 0, shutdown: false, idle: 0 },
            ),
            work: Condvar::new(),
            workers: RankedMutex::new(ranks::WORKERS, Vec::new()),
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
        *s.workers.lock() = handles;
        s
    }

    /// Submits `desc` to run on `device`: its dependencies are its explicit events, the
    /// command in `chain` (an in-order queue's last command; `chain` then becomes this
    /// one) and, unless `opts.untracked`, those derived from its requirements, across every
    /// producer of the context. Returns its event at once, with the dependencies and the
    /// fusions to end early (see [`Submitted`]).
    ///
    /// The caller holds whatever lock makes its submission order the dependency order
    /// (a queue's lock on `chain`).
    pub fn submit(
        self: &Arc<Self>,
        device: &Arc<dyn Device>,
        desc: CommandDesc,
        chain: Option<&mut Option<Event>>,
        opts: SubmitOpts,
    ) -> Submitted {
        let event = opts.event.unwrap_or_else(|| Event::new(desc.name));
        let cmd = Arc::new(Command {
            event: event.clone(),
            action: RankedMutex::new(ranks::COMMAND_ACTION, Some(desc.action)),
            accessors: desc.accessors,
            // One for the wiring below, one more while the command is held back.
            pending: RankedMutex::new(ranks::COMMAND_PENDING, 1 + usize::from(opts.hold)),
            failed_dep: RankedMutex::new(ranks::COMMAND_FAILED, None),
            device: device.clone(),
            scheduler: self.clone(),
        });
        self.state.lock().inflight += 1;
        let mut deps = desc.deps;
        if let Some(last) = chain {
            deps.extend(last.replace(event.clone()));
        }
        if !opts.untracked {
            for a in &cmd.accessors {
                let mut t = a.buffer.track();
                if !a.mode.writes() {
                    // Finished reads no longer order anything; keep the list short.
                    t.reads.retain(|e| {
                        !matches!(e.status(), EventStatus::Complete | EventStatus::Failed)
                    });
                }
                t.access(event.clone(), a.mode.writes(), &mut deps);
            }
        }
        let mut aborts: Vec<Arc<dyn FusionHook>> = Vec::new();
        for d in &deps {
            if let Some(h) = d.hook() {
                if Some(h.fusion_id()) != opts.fusion
                    && !aborts.iter().any(|a| a.fusion_id() == h.fusion_id())
                {
                    aborts.push(h.clone());
                }
            }
            // Counted before the event can see the waiter: a dependency that finishes right
            // after `add_waiter` releases the command, which must not reach zero (and run)
            // before it is wired up.
            *cmd.pending.lock() += 1;
            let waiter: Arc<dyn Waiter> = cmd.clone();
            if let Err(status) = d.add_waiter(waiter) {
                *cmd.pending.lock() -= 1;
                if status == EventStatus::Failed {
                    cmd.failed_dep.lock().get_or_insert_with(|| d.name().to_string());
                }
            }
        }
        let held = opts.hold.then(|| Held(cmd.clone()));
        let inline = opts.inline && Self::runs_inline(&cmd);
        let ready = self.done_wiring(cmd);
        let inline = match ready {
            Some(c) if inline => Some(Inline(Some(c))),
            Some(c) => {
                self.enqueue(c);
                None
            }
            None => None,
        };
        Submitted { event, deps, aborts, held, inline }
    }

    /// Stops the workers once every submitted command has finished.
    pub fn shutdown(&self) {
        self.state.lock().shutdown = true;
        self.work.notify_all();
        let hs = std::mem::take(&mut *self.workers.lock());
        let me = std::thread::current().id();
        for h in hs {
            if h.thread().id() != me {
                let _ = h.join();
            }
        }
    }

    fn enqueue(&self, c: Arc<Command>) {
        let mut s = self.state.lock();
        s.ready.push_back(c);
        let wake = s.idle > 0;
        drop(s);
        if wake {
            self.work.notify_one();
        }
    }

    fn worker(self: Arc<Self>) {
        loop {
            let cmd = {
                let mut s = self.state.lock();
                loop {
                    if let Some(c) = s.ready.pop_front() {
                        break c;
                    }
                    if s.shutdown && s.inflight == 0 {
                        return;
                    }
                    s.idle += 1;
                    s = self.state.wait(&self.work, s);
                    s.idle -= 1;
                }
            };
            self.execute(cmd);
        }
    }

    fn execute(&self, cmd: Arc<Command>) {
        let name = cmd.event.name();
        let mut device = None;
        let failed_dep = cmd.failed_dep.lock().take();
        let error = if let Some(dep) = failed_dep {
            Some(RuntimeError::DependencyFailed { command: name.into(), dependency: dep })
        } else {
            cmd.event.state().status = EventStatus::Running;
            let action = cmd.action.lock().take().unwrap_or(Action::Nothing);
            // Work on a device with memory of its own may still run there when the action
            // returns (see `Device::finish`): a host wait on the event waits for it.
            if matches!(action, Action::Kernel { .. } | Action::Exec(_))
                && cmd.device.memory_space().is_some()
            {
                device = Some(cmd.device.clone());
            }
            match catch_unwind(AssertUnwindSafe(|| {
                command::run_action(name, &*cmd.device, &cmd.accessors, action)
            })) {
                Ok(r) => r.err(),
                Err(p) => Some(RuntimeError::Panicked {
                    command: name.into(),
                    message: panic_message(&*p).unwrap_or_default(),
                }),
            }
        };
        let failed = error.is_some();
        for succ in cmd.event.finish_on(error, device) {
            succ.dependency_finished(failed.then(|| cmd.event.name()));
        }
        let mut s = self.state.lock();
        s.inflight -= 1;
        if s.inflight == 0 && s.shutdown {
            self.work.notify_all();
        }
    }

    /// One dependency of `c` finished; enqueue it when none is left.
    fn release(&self, c: Arc<Command>) {
        if let Some(c) = self.done_wiring(c) {
            self.enqueue(c);
        }
    }

    /// Counts one dependency of `c` (or its wiring) as finished: `c` when none is left.
    fn done_wiring(&self, c: Arc<Command>) -> Option<Arc<Command>> {
        let mut p = c.pending.lock();
        *p -= 1;
        let ready = *p == 0;
        drop(p);
        ready.then_some(c)
    }

    /// Whether the submitter may run `c` itself: a launch (or a graph partition) on a device
    /// whose launches return once submitted (one with memory of its own), not sanitized
    /// (a sanitized launch runs on host buffers and waits).
    fn runs_inline(c: &Command) -> bool {
        c.device.memory_space().is_some()
            && match &*c.action.lock() {
                Some(Action::Kernel { kernel, .. }) => kernel.sanitized.is_none(),
                Some(Action::Exec(_)) => true,
                _ => false,
            }
    }
}
