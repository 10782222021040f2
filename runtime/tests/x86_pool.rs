//! The x86 executor's persistent worker pool: every task of a job runs exactly once, on
//! threads that outlive the job; a panicking task is reported to the submitter and leaves
//! the pool usable; dropping the pool joins its threads; several submitters share it.

use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use kiln_runtime::device::cpu::WorkerPool;

/// Which thread ran a task, by id.
fn this_thread() -> std::thread::ThreadId {
    std::thread::current().id()
}

#[test]
fn every_task_runs_once_on_threads_that_outlive_the_job() {
    let pool = WorkerPool::new(4);
    assert_eq!(pool.threads(), 4);
    let mut seen_threads = HashSet::new();
    for n in [0usize, 1, 2, 3, 4, 5, 17, 200] {
        for _ in 0..20 {
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            let threads = Mutex::new(HashSet::new());
            pool.run(n, &|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
                threads.lock().unwrap().insert(this_thread());
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "n = {n}");
            seen_threads.extend(threads.into_inner().unwrap());
        }
    }
    // The submitter and at most three workers, whatever the number of jobs: threads are
    // not started per job.
    assert!(seen_threads.len() <= 4, "{} threads ran tasks", seen_threads.len());
}

#[test]
fn a_panicking_task_reaches_the_submitter_and_the_pool_still_works() {
    let pool = WorkerPool::new(3);
    for _ in 0..5 {
        let ran = AtomicUsize::new(0);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.run(12, &|i| {
                ran.fetch_add(1, Ordering::Relaxed);
                if i == 7 {
                    panic!("task seven fails");
                }
            })
        }));
        let payload = r.expect_err("the panic is raised in the submitter");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"task seven fails"));
        // The other tasks ran too: a panic does not abandon the job half-way.
        assert_eq!(ran.load(Ordering::Relaxed), 12);
        let sum = AtomicUsize::new(0);
        pool.run(100, &|i| {
            sum.fetch_add(i, Ordering::Relaxed);
        });
        assert_eq!(sum.load(Ordering::Relaxed), 4950);
    }
}

/// Counts, when a worker thread ends, that it ended (a thread's locals are dropped before
/// joining it returns).
struct Exit(Arc<AtomicUsize>);
impl Drop for Exit {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}
thread_local! {
    static EXIT: RefCell<Option<Exit>> = const { RefCell::new(None) };
}

#[test]
fn dropping_the_pool_joins_its_threads() {
    let exited = Arc::new(AtomicUsize::new(0));
    let workers = Mutex::new(HashSet::new());
    let pool = WorkerPool::new(4);
    let submitter = this_thread();
    // Jobs until every worker has run a task (and registered its exit counter).
    for _ in 0..10_000 {
        pool.run(64, &|_| {
            if this_thread() != submitter && workers.lock().unwrap().insert(this_thread()) {
                EXIT.with(|e| *e.borrow_mut() = Some(Exit(exited.clone())));
            }
            std::thread::yield_now();
        });
        if workers.lock().unwrap().len() == 3 {
            break;
        }
    }
    let n = workers.lock().unwrap().len();
    assert!(n > 0, "no worker ever ran a task");
    assert_eq!(exited.load(Ordering::SeqCst), 0, "workers ended while the pool was alive");
    drop(pool);
    assert_eq!(exited.load(Ordering::SeqCst), n, "drop returned before its threads ended");
}

#[test]
fn several_threads_submit_to_one_pool() {
    let pool = WorkerPool::new(3);
    std::thread::scope(|s| {
        for t in 0..4usize {
            let pool = &pool;
            s.spawn(move || {
                for round in 0..50usize {
                    let out: Vec<AtomicUsize> = (0..33).map(|_| AtomicUsize::new(0)).collect();
                    pool.run(out.len(), &|i| {
                        out[i].store(i * t + round, Ordering::Relaxed);
                    });
                    for (i, v) in out.iter().enumerate() {
                        assert_eq!(v.load(Ordering::Relaxed), i * t + round);
                    }
                }
            });
        }
    });
}
