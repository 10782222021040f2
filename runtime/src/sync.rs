//! Locks with a rank: the runtime's written lock order ([`crate`]'s "Lock order"), checked
//! in debug builds.
//!
//! Every mutex of the runtime is a [`RankedMutex`] with a [`Rank`] from the table below. A
//! thread may take a lock only while every lock it holds has a lower rank, so no two
//! threads can each hold a lock the other waits for. In debug builds each thread keeps the
//! ranks it holds and the lock that breaks the order panics, naming both locks; release
//! builds compile the check out. Locks of one rank that a thread may hold several of at
//! once (buffers' contents, lent for a launch) are taken in address order, which the check
//! enforces too.

use std::ops::{Deref, DerefMut};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// A lock's place in the lock order: a lock may be taken only while every lock held has a
/// lower `level`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rank {
    /// The place in the order (smaller: taken first).
    pub level: u16,
    /// The lock's name, in violation messages.
    pub name: &'static str,
    /// Whether a thread may hold several locks of this rank, taken in address order.
    pub many: bool,
}

impl Rank {
    const fn new(level: u16, name: &'static str) -> Rank {
        Rank { level, name, many: false }
    }
}

/// The lock order, outermost first (see the crate docs' "Lock order" for why each is where
/// it is).
pub(crate) mod ranks {
    use super::Rank;

    /// An executable graph's arguments (`ExecGraph` state).
    pub const EXEC_STATE: Rank = Rank::new(20, "exec graph state");
    /// An executable graph's prepared plan.
    pub const EXEC_PLAN: Rank = Rank::new(22, "exec graph plan");
    /// An executable graph's last run.
    pub const EXEC_LAST: Rank = Rank::new(24, "exec graph last run");
    /// A queue's recording slot.
    pub const QUEUE_RECORDING: Rank = Rank::new(28, "queue recording");
    /// A recording queue's last recorded node (held while one submission is recorded).
    pub const RECORDING: Rank = Rank::new(30, "recording order");
    /// A command graph's nodes (`Graph`): `begin_recording` checks them under the
    /// queue's recording slot.
    pub const GRAPH: Rank = Rank::new(31, "graph nodes");
    /// A queue's fusion slot.
    pub const QUEUE_FUSION: Rank = Rank::new(32, "queue fusion slot");
    /// A fusion list.
    pub const FUSION: Rank = Rank::new(34, "fusion list");
    /// A queue's last command (its submission order).
    pub const QUEUE_LAST: Rank = Rank::new(40, "queue last command");
    /// A queue's events to wait for (remembering one reads the others' status).
    pub const QUEUE_EVENTS: Rank = Rank::new(42, "queue events");
    /// A buffer's dependency track.
    pub const BUFFER_TRACK: Rank = Rank::new(50, "buffer track");
    /// A command's action.
    pub const COMMAND_ACTION: Rank = Rank::new(60, "command action");
    /// A command's failed dependency.
    pub const COMMAND_FAILED: Rank = Rank::new(62, "command failed dependency");
    /// An event's state.
    pub const EVENT: Rank = Rank::new(70, "event state");
    /// A command's unfinished dependency count.
    pub const COMMAND_PENDING: Rank = Rank::new(72, "command pending count");
    /// The scheduler's ready list.
    pub const SCHEDULER: Rank = Rank::new(80, "scheduler ready list");
    /// The scheduler's worker handles.
    pub const WORKERS: Rank = Rank::new(82, "scheduler workers");
    /// A cache's map (program, kernel, fusion caches).
    pub const CACHE_MAP: Rank = Rank::new(90, "cache map");
    /// A cache entry being built.
    pub const CACHE_ENTRY: Rank = Rank::new(92, "cache entry");
    /// A buffer's contents (held several at once for a launch, in address order).
    pub const BUFFER_DATA: Rank = Rank { level: 100, name: "buffer contents", many: true };
    /// The persistent cache's MAC key.
    pub const DISK_KEY: Rank = Rank::new(110, "disk cache key");
    /// The persistent cache's warnings.
    pub const DISK_WARNINGS: Rank = Rank::new(112, "disk cache warnings");
    /// The persistent cache's warned-about set.
    pub const DISK_WARNED: Rank = Rank::new(114, "disk cache warned set");
    /// A Vulkan kernel's pipelines (held while one is made).
    pub const VULKAN_PIPELINES: Rank = Rank::new(120, "vulkan kernel pipelines");
    /// A Vulkan device's launch slots (held while a launch is recorded and submitted, and
    /// while the host waits for the device).
    pub const VULKAN_SLOTS: Rank = Rank::new(122, "vulkan launch slots");
    /// A Vulkan device's queue (`vkQueueSubmit` and `vkQueueWaitIdle` need it to themselves).
    pub const VULKAN_QUEUE: Rank = Rank::new(124, "vulkan queue");
    /// A CUDA kernel's device copies of its encoded tensor maps (held while one is made).
    pub const CUDA_TENSOR_MAPS: Rank = Rank::new(130, "cuda tensor maps");
}

#[cfg(debug_assertions)]
mod held {
    use std::cell::RefCell;

    use super::Rank;

    thread_local! {
        /// The ranks this thread holds, with each lock's address, in the order taken.
        static HELD: RefCell<Vec<(Rank, usize)>> = const { RefCell::new(Vec::new()) };
    }

    /// Checks that `rank` (the lock at `addr`) may be taken now, and records it.
    pub fn take(rank: Rank, addr: usize) {
        HELD.with(|h| {
            let mut h = h.borrow_mut();
            if let Some(&(top, top_addr)) = h.iter().max_by_key(|(r, a)| (r.level, *a)) {
                let ok = top.level < rank.level
                    || (top.level == rank.level && rank.many && top_addr < addr);
                if !ok {
                    let held: Vec<&str> = h.iter().map(|(r, _)| r.name).collect();
                    drop(h);
                    panic!(
                        "lock order violated: taking `{}` (rank {}) while holding `{}` (rank \
                         {}); held: {}",
                        rank.name,
                        rank.level,
                        top.name,
                        top.level,
                        held.join(", ")
                    );
                }
            }
            h.push((rank, addr));
        });
    }

    /// Forgets the lock at `addr` (released).
    pub fn release(addr: usize) {
        // A thread that panicked mid-check may already have dropped its record.
        let _ = HELD.try_with(|h| {
            let mut h = h.borrow_mut();
            if let Some(i) = h.iter().rposition(|(_, a)| *a == addr) {
                h.remove(i);
            }
        });
    }
}

/// A mutex with a place in the lock order. Poisoning is ignored, as everywhere in the
/// runtime: a panicking command is reported through its event, and the data it guarded
/// stays consistent at every await point.
pub(crate) struct RankedMutex<T> {
    inner: Mutex<T>,
    rank: Rank,
}

impl<T> RankedMutex<T> {
    /// A mutex of rank `rank` holding `value`.
    pub const fn new(rank: Rank, value: T) -> RankedMutex<T> {
        RankedMutex { inner: Mutex::new(value), rank }
    }

    /// The value, through the only reference there is (no lock taken).
    pub fn get_mut(&mut self) -> &mut T {
        self.inner.get_mut().unwrap_or_else(PoisonError::into_inner)
    }

    fn addr(&self) -> usize {
        &self.inner as *const Mutex<T> as usize
    }

    /// Takes the lock (in debug builds, checking the order first).
    pub fn lock(&self) -> RankedGuard<'_, T> {
        #[cfg(debug_assertions)]
        held::take(self.rank, self.addr());
        let guard = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        RankedGuard { guard: Some(guard), addr: self.addr() }
    }

    /// Waits on `cv` with the lock released meanwhile (it stays in the thread's record: the
    /// thread takes nothing else while it waits).
    pub fn wait<'a>(&'a self, cv: &Condvar, mut g: RankedGuard<'a, T>) -> RankedGuard<'a, T> {
        let inner = g.guard.take().expect("a guard holds its lock");
        g.guard = Some(cv.wait(inner).unwrap_or_else(PoisonError::into_inner));
        g
    }

    /// As [`wait`](Self::wait), for at most `timeout`.
    pub fn wait_timeout<'a>(
        &'a self,
        cv: &Condvar,
        mut g: RankedGuard<'a, T>,
        timeout: Duration,
    ) -> RankedGuard<'a, T> {
        let inner = g.guard.take().expect("a guard holds its lock");
        let (inner, _) = cv.wait_timeout(inner, timeout).unwrap_or_else(PoisonError::into_inner);
        g.guard = Some(inner);
        g
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for RankedMutex<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RankedMutex").field("rank", &self.rank.name).finish_non_exhaustive()
    }
}

/// A held [`RankedMutex`]; dropping it releases the lock.
pub(crate) struct RankedGuard<'a, T> {
    /// `None` only inside a condition-variable wait.
    guard: Option<MutexGuard<'a, T>>,
    #[cfg_attr(not(debug_assertions), allow(dead_code))]
    addr: usize,
}

impl<T> Deref for RankedGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.guard.as_deref().expect("a guard holds its lock")
    }
}

impl<T> DerefMut for RankedGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.guard.as_deref_mut().expect("a guard holds its lock")
    }
}

impl<T> Drop for RankedGuard<'_, T> {
    fn drop(&mut self) {
        // The lock is released first, then forgotten: another lock of this thread cannot
        // come between.
        self.guard = None;
        #[cfg(debug_assertions)]
        held::release(self.addr);
    }
}
