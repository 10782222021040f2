//! Events: the completion of one command.
//!
//! A kernel launch (or a command graph's partition) on a device that returns once the work
//! is submitted (Vulkan, CUDA: see [`crate::Device::finish`]) completes its event then, so
//! that the commands depending on it are submitted at once, ordered after it on the device.
//! A wait on such an event ([`Event::wait`], [`Event::wait_timeout`], [`crate::Queue::wait`])
//! also waits for the device to finish; reading a buffer waits for the launches writing it.

use std::sync::{Arc, Condvar};
use std::time::{Duration, Instant};

use crate::device::Device;
use crate::error::RuntimeError;
use crate::sync::{ranks, RankedGuard, RankedMutex};

/// Where a command is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventStatus {
    /// Submitted, waiting for its dependencies or a worker.
    Submitted,
    /// Running.
    Running,
    /// Finished successfully.
    Complete,
    /// Finished with an error (see [`Event::wait`]).
    Failed,
}

/// A command waiting for events: told once per event it waits for, when that event has
/// finished (with the event's name if it failed). The scheduler's commands implement it;
/// events know nothing else about them.
pub(crate) trait Waiter: Send + Sync {
    /// One awaited event finished; `failed` names it if it failed.
    fn dependency_finished(self: Arc<Self>, failed: Option<&str>);
}

/// What the event of a kernel held back in a queue's fusion list (or of the fusion command
/// itself) does before anything outside that fusion waits for it or depends on it: end the
/// fusion early, so that the kernels run (SYCL kernel fusion's early cancellation).
pub(crate) trait FusionHook: Send + Sync {
    /// The fusion the event belongs to.
    fn fusion_id(&self) -> u64;
    /// The queue of that fusion.
    fn queue_id(&self) -> u64;
    /// Cancels the fusion if it is still collecting kernels; `why` names what needs them.
    fn abort(&self, why: &str);
}

pub(crate) struct EventState {
    pub status: EventStatus,
    pub error: Option<RuntimeError>,
    /// Commands waiting for this one.
    pub successors: Vec<Arc<dyn Waiter>>,
    /// The device the command's work was submitted to, when it may still run there after
    /// the event completed: a host wait waits for it ([`Device::finish`]).
    pub device: Option<Arc<dyn Device>>,
    /// Threads blocked on `done`: finishing wakes them only if there are any (a wake is a
    /// system call, on every command otherwise).
    pub sleepers: usize,
}

pub(crate) struct EventInner {
    pub name: String,
    pub state: RankedMutex<EventState>,
    pub done: Condvar,
    /// Set on the events of a queue's fusion (see [`FusionHook`]).
    pub hook: Option<Arc<dyn FusionHook>>,
}

/// The completion of a command: wait for it, ask its status, or make other commands depend
/// on it (also on other queues). Cheap to clone.
#[derive(Clone)]
pub struct Event(pub(crate) Arc<EventInner>);

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Event({}, {:?})", self.0.name, self.status())
    }
}

impl Event {
    pub(crate) fn new(name: String) -> Event {
        Event::with_hook(name, None)
    }

    /// A new event that belongs to a queue's fusion ([`FusionHook`]).
    pub(crate) fn with_hook(name: String, hook: Option<Arc<dyn FusionHook>>) -> Event {
        Event(Arc::new(EventInner {
            name,
            state: RankedMutex::new(
                ranks::EVENT,
                EventState {
                    status: EventStatus::Submitted,
                    error: None,
                    successors: Vec::new(),
                    device: None,
                    sleepers: 0,
                },
            ),
            done: Condvar::new(),
            hook,
        }))
    }

    /// The fusion the event belongs to, if any.
    pub(crate) fn hook(&self) -> Option<&Arc<dyn FusionHook>> {
        self.0.hook.as_ref()
    }

    /// Ends the fusion this event belongs to if it is still collecting kernels: something
    /// (`why`) is about to wait for it.
    pub(crate) fn before_wait(&self, why: impl FnOnce() -> String) {
        if let Some(h) = &self.0.hook {
            h.abort(&why());
        }
    }

    /// [`Event::wait`], where the waiter is `why` (for the fusion warning).
    pub(crate) fn wait_because(&self, why: impl FnOnce() -> String) -> Result<(), RuntimeError> {
        self.before_wait(why);
        self.wait_finished()
    }

    /// An event that has already failed with `error`: what a command that never runs
    /// (a command recorded into a graph) hands back.
    pub(crate) fn failed(name: String, error: RuntimeError) -> Event {
        let e = Event::new(name);
        e.finish(Some(error));
        e
    }

    /// Makes `w` wait for this event; `Err` with the final status if it has finished.
    pub(crate) fn add_waiter(&self, w: Arc<dyn Waiter>) -> Result<(), EventStatus> {
        let mut s = self.state();
        match s.status {
            EventStatus::Complete | EventStatus::Failed => Err(s.status),
            _ => {
                s.successors.push(w);
                Ok(())
            }
        }
    }

    /// Whether `self` and `other` are the same event (clones of one another).
    pub fn same_event(&self, other: &Event) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    pub(crate) fn state(&self) -> RankedGuard<'_, EventState> {
        self.0.state.lock()
    }

    /// The command's name (`kernel `saxpy` #3`, `host task #4`, or the name given).
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The current status.
    pub fn status(&self) -> EventStatus {
        self.state().status
    }

    /// Blocks until the command has finished; its error, naming the command, if it failed.
    /// Waiting for the event of a queue in fusion mode ends the fusion early (its kernels
    /// then run unfused).
    pub fn wait(&self) -> Result<(), RuntimeError> {
        self.wait_because(|| format!("a wait on the event of {}", self.name()))
    }

    fn wait_finished(&self) -> Result<(), RuntimeError> {
        let mut s = self.state();
        while matches!(s.status, EventStatus::Submitted | EventStatus::Running) {
            s.sleepers += 1;
            s = self.0.state.wait(&self.0.done, s);
            s.sleepers -= 1;
        }
        if let Some(e) = &s.error {
            return Err(e.clone());
        }
        let device = s.device.clone();
        drop(s);
        self.device_finished(device, None).map(drop)
    }

    /// Waits for `device` (the event's, if any) to finish the work submitted to it, at most
    /// `timeout`: `false` if it had not by then.
    fn device_finished(
        &self,
        device: Option<Arc<dyn Device>>,
        timeout: Option<Duration>,
    ) -> Result<bool, RuntimeError> {
        match device {
            Some(d) => d
                .finish(timeout)
                .map_err(|source| RuntimeError::Kernel { command: self.name().into(), source }),
            None => Ok(true),
        }
    }

    /// Like [`Event::wait`], but gives up after `timeout`: `None` if the command is still
    /// submitted or running then. Giving up does not stop the command (a GPU kernel cannot
    /// be interrupted from the host); it goes on running on its worker thread.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<Result<(), RuntimeError>> {
        self.before_wait(|| format!("a wait on the event of {}", self.name()));
        let deadline = Instant::now().checked_add(timeout);
        let mut s = self.state();
        while matches!(s.status, EventStatus::Submitted | EventStatus::Running) {
            let left = match deadline {
                Some(d) => d.checked_duration_since(Instant::now()).filter(|l| !l.is_zero())?,
                // Beyond the clock's range: as good as forever.
                None => Duration::from_secs(u32::MAX.into()),
            };
            s.sleepers += 1;
            s = self.0.state.wait_timeout(&self.0.done, s, left);
            s.sleepers -= 1;
        }
        if let Some(e) = &s.error {
            return Some(Err(e.clone()));
        }
        let device = s.device.clone();
        drop(s);
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        match self.device_finished(device, left) {
            Ok(true) => Some(Ok(())),
            Ok(false) => None,
            Err(e) => Some(Err(e)),
        }
    }

    /// Marks the event finished and returns the commands that were waiting on it.
    pub(crate) fn finish(&self, error: Option<RuntimeError>) -> Vec<Arc<dyn Waiter>> {
        self.finish_on(error, None)
    }

    /// [`Event::finish`] for work submitted to `device` that may still run there: a host
    /// wait on the event also waits for the device.
    pub(crate) fn finish_on(
        &self,
        error: Option<RuntimeError>,
        device: Option<Arc<dyn Device>>,
    ) -> Vec<Arc<dyn Waiter>> {
        let mut s = self.state();
        s.device = device;
        s.status = if error.is_some() { EventStatus::Failed } else { EventStatus::Complete };
        s.error = error;
        if s.sleepers > 0 {
            self.0.done.notify_all();
        }
        std::mem::take(&mut s.successors)
    }
}
