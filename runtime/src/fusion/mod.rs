//! Fusion mode on a queue: SYCL's user-driven kernel fusion
//! (`sycl_ext_codeplay_kernel_fusion`), built into the scheduler the way DPC++'s SYCL
//! runtime builds it in, as a fusion command that owns the held kernels.
//!
//! [`QueueFusion::start_fusion`] puts a queue into fusion mode: from then on each kernel it is
//! given enters the dependency graph as usual (its requirements and events make edges, and
//! other commands can depend on it) but is *held back* in the queue's fusion list, and the
//! submission returns the event of the *fusion command*, which finishes after everything
//! the fusion runs. Non-kernel commands (host tasks, copies, fills, graphs) run unfused.
//!
//! * [`QueueFusion::cancel_fusion`] lets the held kernels run as they are.
//! * [`QueueFusion::complete_fusion`] fuses them through the fusion front end that command graphs
//!   use too (its cache, keyed by the fusion key, makes an identical sequence a hit) into
//!   one kernel whose dependencies are the union of theirs, less those between them; the
//!   held kernels then do nothing and finish after it, so that whatever was ordered after
//!   them is ordered after it. If the JIT refuses, the fusion is cancelled with a warning.
//! * Anything outside the fusion list that needs a held kernel ends the fusion early (it is
//!   cancelled, with a warning naming the cause): a wait on the fusion's event, on the
//!   queue or on a buffer the kernels write (host access), and any command on this or
//!   another queue that depends on a held kernel through a requirement or an event (a
//!   host task, copy or fill, a kernel on another queue, a kernel held in another queue's
//!   fusion list, which also keeps two fusions from waiting on one another).
//!
//! The fusion's event stays valid after cancel, complete or an early end, until the next
//! `start_fusion` on the queue; `complete_fusion` after an early end returns it. Warnings
//! print to stderr when the context's warning level (`KILN_RT_WARNING_LEVEL`) is 1 or more;
//! [`QueueFusion::fusion_status`] reports the same.
//!
//! ```
//! use kiln_ir::parse_module;
//! use kiln_runtime::fusion::{FusionProps, FusionStatus, QueueFusion};
//! use kiln_runtime::{interp_device, Arg, Buffer, Context, NdRange, Queue, QueueOrder};
//!
//! let ctx = Context::new(interp_device());
//! let m = parse_module(
//!     "kernel inc(x: ptr<global, u32>) { let i: u32 = global_id(0); x[i] = x[i] + 1u32; }
//!      kernel scale(x: ptr<global, u32>, s: u32) { let i: u32 = global_id(0); x[i] = x[i] * s; }",
//! )
//! .unwrap();
//! let (inc, scale) = (ctx.get_kernel(&m, "inc").unwrap(), ctx.get_kernel(&m, "scale").unwrap());
//! let q = Queue::new(&ctx, QueueOrder::InOrder);
//! let b = Buffer::from_slice(&[1u32, 2, 3, 4]);
//! q.start_fusion().unwrap();
//! q.submit(|h| {
//!     let x = h.read_write(&b);
//!     h.parallel_for(&inc, NdRange::new(&[4]), vec![x.into()]);
//! });
//! q.submit(|h| {
//!     let x = h.read_write(&b);
//!     h.parallel_for(&scale, NdRange::new(&[4]), vec![x.into(), Arg::scalar(10u32)]);
//! });
//! q.complete_fusion(FusionProps::default()).wait().unwrap();
//! assert_eq!(b.read().unwrap(), vec![20, 30, 40, 50]);
//! assert!(matches!(q.fusion_status(), Some(FusionStatus::Completed { kernels: 2, .. })));
//! ```

pub(crate) mod front;
mod rule;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use kiln_ir::launch::NdRange;

use crate::buffer::Accessor;
use crate::buffer::Arg;
use crate::context::{Context, KernelHandle};
use crate::error::RuntimeError;
use crate::event::{Event, FusionHook};
use crate::queue::{next_command_id, Holder, Queue};
use crate::scheduler::{Action, CommandDesc, Held, Inline, SubmitOpts};
use crate::sync::{ranks, RankedMutex};

pub use front::{FusedEntry, FusionCacheKey, FusionOutcome};
pub use rule::{fuse_spec, settled_spec};

/// The fused kernels `ctx`'s fusion cache holds (queue fusion and command graphs share it),
/// in no particular order: what the fusion JIT made of each list, to inspect.
pub fn fused_kernels(ctx: &Context) -> Vec<kiln_ir::Kernel> {
    front::of(ctx).kernels()
}

/// Properties of [`QueueFusion::complete_fusion`]; part of the fusion cache's key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FusionProps {
    /// Put no work-group barrier between the fused kernels (the original's `no_barriers`):
    /// for kernels whose work-items use only what they wrote themselves. (Where kiln proves
    /// that, it leaves the barrier out by itself; a list that needs the barrier is not fused
    /// with `no_barriers`.)
    pub no_barriers: bool,
}

/// Where a queue's last fusion is ([`QueueFusion::fusion_status`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FusionStatus {
    /// Collecting kernels (the queue is in fusion mode).
    Active,
    /// Cancelled by [`QueueFusion::cancel_fusion`]: the kernels ran unfused.
    Cancelled,
    /// Ended early because something outside the fusion list needed a held kernel; the
    /// kernels ran unfused.
    Aborted {
        /// What needed them.
        reason: String,
    },
    /// The fusion JIT refused the list; it was cancelled (the kernels ran unfused).
    Failed {
        /// Why.
        reason: String,
    },
    /// Fused into one kernel (none when the list was empty).
    Completed {
        /// How many kernels were fused.
        kernels: usize,
        /// Whether the fused kernel came from the fusion cache.
        cache_hit: bool,
        /// Promotions asked for and not done, and why.
        warnings: Vec<String>,
    },
}

impl FusionStatus {
    /// A phrase saying how the fusion ended, for warnings.
    fn describe(&self) -> String {
        match self {
            FusionStatus::Active => "still collecting kernels".into(),
            FusionStatus::Cancelled => "it was cancelled".into(),
            FusionStatus::Aborted { reason } => format!("it was cancelled early: {reason}"),
            FusionStatus::Failed { reason } => format!("the fusion JIT refused it: {reason}"),
            FusionStatus::Completed { .. } => "it was completed".into(),
        }
    }
}

static NEXT_FUSION: AtomicU64 = AtomicU64::new(0);

/// A kernel held back in a fusion list.
struct HeldKernel {
    held: Held,
    event: Event,
    kernel: KernelHandle,
    range: NdRange,
    args: Vec<Arg>,
    accessors: Vec<Accessor>,
    /// Every command it waits for.
    deps: Vec<Event>,
}

struct State {
    status: FusionStatus,
    held: Vec<HeldKernel>,
}

/// One fusion of a queue (DPC++ calls it a `KernelFusionCommand`): its list and its event.
pub(crate) struct Fusion {
    id: u64,
    queue: u64,
    ctx: Context,
    event: Event,
    /// The hook on its event and on the events of its held kernels.
    hook: Arc<dyn FusionHook>,
    state: RankedMutex<State>,
}

/// The hook on the fusion's events: ends it early when something outside needs them.
struct Hook {
    fusion: Weak<Fusion>,
    id: u64,
    queue: u64,
}

impl FusionHook for Hook {
    fn fusion_id(&self) -> u64 {
        self.id
    }

    fn queue_id(&self) -> u64 {
        self.queue
    }

    fn abort(&self, why: &str) {
        if let Some(f) = self.fusion.upgrade() {
            f.abort(why);
        }
    }
}

/// Prints `msg` as a runtime warning at warning level 1 or more.
pub(crate) fn warn(ctx: &Context, msg: &str) {
    if ctx.warning_level() >= 1 {
        eprintln!("kiln: warning: {msg}");
    }
}

impl Fusion {
    fn new(q: &Queue) -> Arc<Fusion> {
        let id = NEXT_FUSION.fetch_add(1, Ordering::Relaxed);
        Arc::new_cyclic(|w| {
            let hook: Arc<dyn FusionHook> = Arc::new(Hook { fusion: w.clone(), id, queue: q.id() });
            Fusion {
                id,
                queue: q.id(),
                ctx: q.context().clone(),
                event: Event::with_hook(
                    format!("fusion #{id} of queue #{}", q.id()),
                    Some(hook.clone()),
                ),
                hook,
                state: RankedMutex::new(
                    ranks::FUSION,
                    State { status: FusionStatus::Active, held: Vec::new() },
                ),
            }
        })
    }

    /// Ends the fusion early if it is still collecting: `why` needs its kernels.
    fn abort(&self, why: &str) {
        let mut st = self.state.lock();
        if st.status == FusionStatus::Active {
            warn(
                &self.ctx,
                &format!(
                    "fusion on queue #{} cancelled early, its {} kernel(s) run unfused: {why}",
                    self.queue,
                    st.held.len()
                ),
            );
            self.cancel_locked(&mut st, FusionStatus::Aborted { reason: why.into() });
        }
    }

    /// Lets the held kernels run unfused and finishes the fusion command after them.
    fn cancel_locked(&self, st: &mut State, status: FusionStatus) {
        let held = std::mem::take(&mut st.held);
        let events: Vec<Event> = held.iter().map(|h| h.event.clone()).collect();
        for h in held {
            h.held.release();
        }
        self.finish(events);
        st.status = status;
    }

    /// Submits the fusion command: it finishes after `deps`.
    fn finish(&self, deps: Vec<Event>) {
        let desc = CommandDesc {
            name: self.event.name().into(),
            accessors: Vec::new(),
            deps,
            action: Action::Nothing,
        };
        let opts = SubmitOpts {
            event: Some(self.event.clone()),
            untracked: true,
            fusion: Some(self.id),
            ..SubmitOpts::default()
        };
        self.ctx.scheduler().submit(self.ctx.device(), desc, None, opts);
    }

    /// Fuses the held kernels; `Err` (the JIT's refusal) leaves them held. The fused launch,
    /// when it can run at once on this thread, is returned to be run once no lock is held.
    fn complete_locked(
        &self,
        st: &mut State,
        props: FusionProps,
    ) -> Result<Option<Inline>, String> {
        let members: Vec<front::Member> = st
            .held
            .iter()
            .map(|h| front::Member {
                kernel: &h.kernel,
                range: &h.range,
                args: &h.args,
                accessors: &h.accessors,
            })
            .collect();
        let req =
            front::Request { barriers: !props.no_barriers, promote: front::Promote::Requested };
        let fused = front::of(&self.ctx).fuse(&self.ctx, &members, &req)?;
        let held = std::mem::take(&mut st.held);
        // The union of the members' dependencies, less those on one another.
        let mut deps: Vec<Event> = Vec::new();
        for d in held.iter().flat_map(|h| &h.deps) {
            let internal = held.iter().any(|h| h.event.same_event(d));
            if !internal && !deps.iter().any(|x| x.same_event(d)) {
                deps.push(d.clone());
            }
        }
        let desc = CommandDesc {
            name: format!("fused kernel `{}` #{}", fused.entry.kernel().name, next_command_id()),
            accessors: fused.accessors,
            deps,
            action: Action::Kernel {
                kernel: fused.entry.kernel().clone(),
                range: *fused.entry.range(),
                args: fused.args,
            },
        };
        let opts = SubmitOpts {
            untracked: true,
            fusion: Some(self.id),
            inline: true,
            ..SubmitOpts::default()
        };
        let mut run = self.ctx.scheduler().submit(self.ctx.device(), desc, None, opts);
        let events: Vec<Event> = held.iter().map(|h| h.event.clone()).collect();
        let kernels = held.len();
        for h in held {
            h.held.replace_by(&run.event);
        }
        self.finish(events);
        for w in &fused.warnings {
            warn(&self.ctx, &format!("fusion on queue #{}: {w}", self.queue));
        }
        st.status = FusionStatus::Completed {
            kernels,
            cache_hit: fused.cache_hit,
            warnings: fused.warnings,
        };
        Ok(run.inline.take())
    }
}

/// An event that has finished: what fusion calls return when there is nothing to wait for.
fn finished_event(name: String) -> Event {
    let e = Event::new(name);
    e.finish(None);
    e
}

impl Holder for Fusion {
    /// Holds the kernel command `desc` back in the fusion list while the fusion collects.
    fn hold(&self, q: &Queue, desc: &mut CommandDesc) -> Option<(Event, Vec<Arc<dyn FusionHook>>)> {
        let mut st = self.state.lock();
        if st.status != FusionStatus::Active {
            return None;
        }
        let Action::Kernel { kernel, range, args } = &desc.action else { return None };
        let (kernel, range, args) = (kernel.clone(), *range, args.clone());
        let nothing = CommandDesc {
            name: String::new(),
            accessors: Vec::new(),
            deps: Vec::new(),
            action: Action::Nothing,
        };
        let mut desc = std::mem::replace(desc, nothing);
        // A kernel of the list depending on the fusion's own event waits for the kernels
        // held so far (the fusion command waits for it: it cannot wait for that).
        if desc.deps.iter().any(|d| d.same_event(&self.event)) {
            desc.deps.retain(|d| !d.same_event(&self.event));
            desc.deps.extend(st.held.iter().map(|h| h.event.clone()));
        }
        let name = desc.name.clone();
        let accessors = desc.accessors.clone();
        // The held kernel's event carries the fusion's hook: whatever waits for it or
        // depends on it from outside the list ends the fusion early.
        let opts = SubmitOpts {
            event: Some(Event::with_hook(name, Some(self.hook.clone()))),
            hold: true,
            fusion: Some(self.id),
            ..SubmitOpts::default()
        };
        let sub = q.submit_opts(desc, opts);
        st.held.push(HeldKernel {
            held: sub.held.expect("a held submission has a handle"),
            event: sub.event,
            kernel,
            range,
            args,
            accessors,
            deps: sub.deps,
        });
        Some((self.event.clone(), sub.aborts))
    }

    fn active(&self) -> bool {
        self.state.lock().status == FusionStatus::Active
    }

    fn queue_dropped(&self, q: &Queue) {
        self.abort(&format!("queue #{} was dropped in fusion mode", q.id()));
    }

    fn as_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}

/// The fusion `q` last started, if any.
fn fusion_of(slot: &Option<Arc<dyn Holder>>) -> Option<Arc<Fusion>> {
    slot.clone().and_then(|h| h.as_any().downcast::<Fusion>().ok())
}

/// Fusion mode on a [`Queue`] (the queue's own methods are in [`crate::queue`]; fusion sits
/// above the queue and reaches it through its interface only).
pub trait QueueFusion {
    /// Puts the queue into fusion mode: kernels submitted from now on are held back in its
    /// fusion list until [`complete_fusion`](Self::complete_fusion) fuses them or
    /// [`cancel_fusion`](Self::cancel_fusion) (or an early cancellation, see
    /// [`crate::fusion`]) lets them run unfused. An error if the queue is already in fusion
    /// mode or records into a command graph.
    fn start_fusion(&self) -> Result<(), RuntimeError>;

    /// Whether the queue is in fusion mode: started and not yet completed or cancelled
    /// (explicitly or early).
    fn is_in_fusion_mode(&self) -> bool;

    /// Where the queue's last fusion is: `None` if no fusion was ever started.
    fn fusion_status(&self) -> Option<FusionStatus>;

    /// Leaves fusion mode letting the held kernels run unfused; returns the fusion's event.
    /// Not in fusion mode: a warning (level 1) and the last fusion's event, if any.
    fn cancel_fusion(&self) -> Event;

    /// Leaves fusion mode fusing the held kernels into one (see [`crate::fusion`]), with
    /// `props`; returns the fusion's event, which finishes after the fused kernel.
    ///
    /// The fused kernel's arguments: buffers passed to several kernels are passed once;
    /// scalar arguments become constants of the fused kernel; a buffer is promoted to
    /// private or local memory (never read nor written by the fused kernel) as the
    /// properties of its accessors ([`crate::buffer::AccessProps`]) or of the buffer
    /// ([`crate::Buffer::set_promote`]) ask, where the JIT proves it exact (a request it
    /// refuses leaves the buffer in global memory, with a warning). If the JIT refuses the
    /// list, or cannot prove that fusing keeps the result, the fusion is cancelled with a
    /// warning ([`FusionStatus::Failed`]). Not in fusion mode (never started, or cancelled
    /// early): a warning and the last fusion's event.
    fn complete_fusion(&self, props: FusionProps) -> Event;
}

impl QueueFusion for Queue {
    fn start_fusion(&self) -> Result<(), RuntimeError> {
        let invalid = |message: &str| RuntimeError::Invalid {
            command: "start_fusion".into(),
            message: message.into(),
        };
        if self.recorder().is_some() {
            return Err(invalid("the queue is recording into a command graph"));
        }
        let mut slot = self.holder();
        if slot.as_ref().is_some_and(|f| f.active()) {
            return Err(invalid(
                "the queue is already in fusion mode (complete or cancel that fusion first)",
            ));
        }
        // The previous fusion's event is released here, not when it finished, so that it
        // stays valid until the next start (DPC++ marks such a fusion command deleted).
        *slot = Some(Fusion::new(self));
        Ok(())
    }

    fn is_in_fusion_mode(&self) -> bool {
        self.holding()
    }

    fn fusion_status(&self) -> Option<FusionStatus> {
        fusion_of(&self.holder()).map(|f| f.state.lock().status.clone())
    }

    fn cancel_fusion(&self) -> Event {
        let slot = self.holder();
        let Some(f) = fusion_of(&slot) else {
            warn(
                self.context(),
                &format!("cancel_fusion on queue #{}, which never started a fusion", self.id()),
            );
            return finished_event(format!("no fusion of queue #{}", self.id()));
        };
        let mut st = f.state.lock();
        if st.status == FusionStatus::Active {
            f.cancel_locked(&mut st, FusionStatus::Cancelled);
        } else {
            warn(
                self.context(),
                &format!(
                    "cancel_fusion on queue #{}, which is not in fusion mode ({})",
                    self.id(),
                    st.status.describe()
                ),
            );
        }
        f.event.clone()
    }

    fn complete_fusion(&self, props: FusionProps) -> Event {
        let slot = self.holder();
        let Some(f) = fusion_of(&slot) else {
            warn(
                self.context(),
                &format!("complete_fusion on queue #{}, which never started a fusion", self.id()),
            );
            return finished_event(format!("no fusion of queue #{}", self.id()));
        };
        let mut st = f.state.lock();
        if st.status != FusionStatus::Active {
            warn(
                self.context(),
                &format!(
                    "complete_fusion on queue #{}, which is not in fusion mode any more ({}): \
                     nothing fused",
                    self.id(),
                    st.status.describe()
                ),
            );
            return f.event.clone();
        }
        if st.held.is_empty() {
            f.finish(Vec::new());
            st.status = FusionStatus::Completed { kernels: 0, cache_hit: false, warnings: vec![] };
        } else {
            match f.complete_locked(&mut st, props) {
                Ok(run) => {
                    let event = f.event.clone();
                    drop(st);
                    drop(slot);
                    if let Some(run) = run {
                        run.run();
                    }
                    return event;
                }
                Err(reason) => {
                    warn(
                        self.context(),
                        &format!(
                    "fusion on queue #{} cancelled, its {} kernel(s) run unfused: the fusion \
                     JIT refused it: {reason}",
                    self.id(),
                    st.held.len()
                ),
                    );
                    f.cancel_locked(&mut st, FusionStatus::Failed { reason });
                }
            }
        }
        f.event.clone()
    }
}
