//! A persistent pool of worker threads that a launch's work-groups are spread over
//! ([`CpuRun::run_on`](super::CpuRun::run_on)): spawning threads per launch cost
//! tens of microseconds, more than a small kernel runs, so the threads are started once (by
//! the device that owns the pool) and parked between launches.
//!
//! One job runs at a time: a launch submitted while another is running waits for it (the
//! submitting thread takes part in its own job, so a job always makes progress even when the
//! workers are busy elsewhere in the process). A worker waits for the next job spinning for
//! a short while (launches of a graph or a queue follow each other closely) and then sleeps.
//! A task that panics does not take its worker down: the panic is carried back to the
//! submitting thread once the job's other tasks have run.

use std::any::Any;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a worker (or the submitter, waiting for the last task) keeps looking for news
/// before sleeping: longer than the gap between a queue's or a graph's launches, shorter
/// than anything a person would notice as a busy core.
const SPIN: Duration = Duration::from_micros(100);

/// Spins until `ready()` or until [`SPIN`] has passed; returns `ready()`'s last answer.
/// After the first quarter (where a closely following launch is picked up fastest) the
/// thread yields its core between rounds of checks, so that on a machine with more runnable
/// threads than cores the spinning does not hold up the thread it waits for.
fn spin_until(ready: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    loop {
        for _ in 0..64 {
            if ready() {
                return true;
            }
            std::hint::spin_loop();
        }
        let spun = start.elapsed();
        if spun >= SPIN {
            return ready();
        }
        if spun >= SPIN / 4 {
            std::thread::yield_now();
        }
    }
}

/// Threads, started once and parked between jobs, that run the tasks of one job at a time
/// together with the thread that submitted it. Dropping the pool stops and joins them.
pub struct WorkerPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Held by the thread whose job is running: jobs run one at a time.
    submit: Mutex<()>,
}

impl std::fmt::Debug for WorkerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerPool").field("threads", &self.threads()).finish()
    }
}

/// What the workers and the submitter share.
struct Shared {
    /// The job being run and the shutdown flag.
    state: Mutex<State>,
    /// Wakes sleeping workers for a new job or for shutdown.
    wake: Condvar,
    /// `State::epoch`, readable without the lock (what spinning workers watch).
    epoch: AtomicU64,
    /// Workers asleep on `wake` (a job is announced with a wake-up call only if some are).
    sleepers: AtomicUsize,
}

struct State {
    epoch: u64,
    job: Option<Arc<Job>>,
    shutdown: bool,
}

/// One job: tasks `0..n`, each claimed by exactly one thread.
struct Job {
    /// The task body. It borrows the submitter's stack: it is only called for a claimed
    /// task (`next` below `n`), and the submitter returns only once every task has run.
    task: *const (dyn Fn(usize) + Sync),
    n: usize,
    next: AtomicUsize,
    done: AtomicUsize,
    /// The first panic of a task, re-raised on the submitting thread.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    /// Signalled (under its lock) when the last task has run, for a sleeping submitter.
    finished: Mutex<bool>,
    finished_cv: Condvar,
}

// SAFETY: `task` points to a `Sync` closure that outlives every call through it (see
// `Job::task`); the rest is made of thread-safe parts.
unsafe impl Send for Job {}
// SAFETY: as above.
unsafe impl Sync for Job {}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic never happens while these locks are held (task panics are caught outside
    // them), but a poisoned lock must not make the pool unusable either.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Job {
    /// Claims and runs tasks until none is left.
    fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.n {
                return;
            }
            // SAFETY: task `i` is claimed and not yet counted in `done`, so the submitter
            // is still waiting and the closure is alive.
            let task = unsafe { &*self.task };
            if let Err(p) = panic::catch_unwind(AssertUnwindSafe(|| task(i))) {
                lock(&self.panic).get_or_insert(p);
            }
            if self.done.fetch_add(1, Ordering::AcqRel) + 1 == self.n {
                *lock(&self.finished) = true;
                self.finished_cv.notify_all();
            }
        }
    }

    /// Waits until every task has run.
    fn wait(&self) {
        if spin_until(|| self.done.load(Ordering::Acquire) == self.n) {
            return;
        }
        let mut finished = lock(&self.finished);
        while !*finished {
            finished = self.finished_cv.wait(finished).unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl WorkerPool {
    /// A pool running jobs on `threads` threads in all: the submitting thread and
    /// `threads - 1` workers started now (none for `threads <= 1`: jobs then run on the
    /// submitting thread alone; fewer if the system refuses to start more threads).
    pub fn new(threads: usize) -> WorkerPool {
        let shared = Arc::new(Shared {
            state: Mutex::new(State { epoch: 0, job: None, shutdown: false }),
            wake: Condvar::new(),
            epoch: AtomicU64::new(0),
            sleepers: AtomicUsize::new(0),
        });
        // The pool is ready when its threads are: each has its name and is waiting for work.
        // A thread the system refuses to start leaves the pool smaller, not broken.
        let (ready, started) = std::sync::mpsc::channel::<()>();
        let workers: Vec<JoinHandle<()>> = (1..threads.max(1))
            .map_while(|i| {
                let (shared, ready) = (shared.clone(), ready.clone());
                std::thread::Builder::new()
                    .name(format!("kiln-cpu-{i}"))
                    .spawn(move || {
                        let _ = ready.send(());
                        worker(&shared)
                    })
                    .ok()
            })
            .collect();
        drop(ready);
        for _ in &workers {
            let _ = started.recv();
        }
        WorkerPool { shared, workers, submit: Mutex::new(()) }
    }

    /// How many threads run a job (the workers and the submitting thread).
    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Runs `task(i)` once for every `i` in `0..n`, on the pool's threads and this one (in
    /// no set order, several at once), and returns when all have run. A panic of a task is
    /// raised here once the others have run; the pool stays usable. A task must not submit
    /// to the same pool (it would wait for its own job to end).
    pub fn run(&self, n: usize, task: &(dyn Fn(usize) + Sync)) {
        if n <= 1 || self.workers.is_empty() {
            (0..n).for_each(task);
            return;
        }
        let _turn = lock(&self.submit);
        // SAFETY (lifetime): the job's pointer is only followed for claimed tasks, and this
        // function returns (or unwinds) only after `wait` saw every task done.
        let task: *const (dyn Fn(usize) + Sync + '_) = task;
        let task: *const (dyn Fn(usize) + Sync) = unsafe { std::mem::transmute(task) };
        let job = Arc::new(Job {
            task,
            n,
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            panic: Mutex::new(None),
            finished: Mutex::new(false),
            finished_cv: Condvar::new(),
        });
        {
            let mut st = lock(&self.shared.state);
            st.epoch += 1;
            st.job = Some(job.clone());
            self.shared.epoch.store(st.epoch, Ordering::Release);
        }
        if self.shared.sleepers.load(Ordering::SeqCst) > 0 {
            self.shared.wake.notify_all();
        }
        job.work();
        job.wait();
        // Workers that have not looked yet find no job (and no stale pointer) when they do.
        lock(&self.shared.state).job = None;
        let panicked = lock(&job.panic).take();
        if let Some(p) = panicked {
            panic::resume_unwind(p);
        }
    }
}

/// A worker's life: take part in each new job, until the pool is dropped.
fn worker(shared: &Shared) {
    let mut seen = 0u64;
    loop {
        // Spin a while for the next job (cheap to pick up), then sleep.
        spin_until(|| shared.epoch.load(Ordering::Acquire) != seen);
        let job = {
            let mut st = lock(&shared.state);
            while st.epoch == seen && !st.shutdown {
                shared.sleepers.fetch_add(1, Ordering::SeqCst);
                st = shared.wake.wait(st).unwrap_or_else(|e| e.into_inner());
                shared.sleepers.fetch_sub(1, Ordering::SeqCst);
            }
            if st.shutdown {
                return;
            }
            seen = st.epoch;
            st.job.clone()
        };
        if let Some(job) = job {
            job.work();
        }
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        lock(&self.shared.state).shutdown = true;
        self.shared.wake.notify_all();
        for w in self.workers.drain(..) {
            // A worker never panics (tasks' panics are caught), so this only waits.
            let _ = w.join();
        }
    }
}
