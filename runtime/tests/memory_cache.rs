//! Concurrency tests of the in-memory build cache.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::thread;
use std::time::Duration;

use kiln_runtime::cache::BuildCache;

type Cache = BuildCache<u64, Arc<String>, String>;

fn cache() -> Cache {
    BuildCache::new(0, |v: &Arc<String>| v.len())
}

#[test]
fn thirty_two_threads_one_build() {
    let cache = cache();
    let builds = AtomicUsize::new(0);
    let start = Barrier::new(32);
    // The builder holds the build open until every other thread has asked for the key.
    let asked = AtomicUsize::new(0);
    let gate = (Mutex::new(()), Condvar::new());
    let results: Vec<Arc<String>> = thread::scope(|s| {
        let hs: Vec<_> = (0..32)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    asked.fetch_add(1, Ordering::SeqCst);
                    {
                        let _g = gate.0.lock().unwrap();
                        gate.1.notify_all();
                    }
                    cache
                        .get_or_build(&42, || {
                            builds.fetch_add(1, Ordering::SeqCst);
                            // Wait (bounded) until all 32 threads have at least asked.
                            let mut g = gate.0.lock().unwrap();
                            while asked.load(Ordering::SeqCst) < 32 {
                                g = gate.1.wait_timeout(g, Duration::from_millis(50)).unwrap().0;
                            }
                            Ok(Arc::new("value".to_string()))
                        })
                        .unwrap()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(builds.load(Ordering::SeqCst), 1);
    assert_eq!(results.len(), 32);
    assert!(results.iter().all(|r| Arc::ptr_eq(r, &results[0])));
    let st = cache.stats();
    assert_eq!(st.builds, 1);
    assert_eq!(st.hits + st.misses, 32);
    assert_eq!(st.entries, 1);
    assert_eq!(st.bytes, 5);
}

#[test]
fn failing_build_reaches_every_waiter() {
    let cache = cache();
    let builds = AtomicUsize::new(0);
    let release = (Mutex::new(false), Condvar::new());
    let n = 8;
    let results: Vec<Result<Arc<String>, String>> = thread::scope(|s| {
        // The builder: the first thread; it fails only after the others are queued on the key.
        let builder = s.spawn(|| {
            cache.get_or_build(&1, || {
                builds.fetch_add(1, Ordering::SeqCst);
                let mut go = release.0.lock().unwrap();
                while !*go {
                    go = release.1.wait(go).unwrap();
                }
                Err("compile error: bad kernel".to_string())
            })
        });
        // Wait for the build to be in progress before starting the waiters.
        while builds.load(Ordering::SeqCst) == 0 {
            thread::sleep(Duration::from_millis(1));
        }
        let waiters: Vec<_> = (0..n)
            .map(|_| {
                s.spawn(|| {
                    cache.get_or_build(&1, || {
                        builds.fetch_add(1, Ordering::SeqCst);
                        Ok(Arc::new("should not be built".into()))
                    })
                })
            })
            .collect();
        // Release the builder only once every waiter has looked the key up (counted as a
        // miss): from then on each holds the in-progress entry and must get its outcome.
        while cache.stats().misses < (n + 1) as u64 {
            thread::sleep(Duration::from_millis(1));
        }
        *release.0.lock().unwrap() = true;
        release.1.notify_all();
        let mut r = vec![builder.join().unwrap()];
        r.extend(waiters.into_iter().map(|h| h.join().unwrap()));
        r
    });
    assert_eq!(builds.load(Ordering::SeqCst), 1);
    assert_eq!(results.iter().filter(|r| r.is_err()).count(), n + 1);
    for r in &results {
        if let Err(e) = r {
            assert_eq!(e, "compile error: bad kernel");
        }
    }
    assert!(cache.stats().build_failures >= 1);
    // A failed entry is not kept: the next request builds again.
    let v = cache.get_or_build(&1, || Ok(Arc::new("fixed".into()))).unwrap();
    assert_eq!(*v, "fixed");
}

#[test]
fn panicking_builder_lets_a_waiter_retry() {
    let cache = Arc::new(cache());
    let started = Arc::new((Mutex::new(false), Condvar::new()));
    let c = cache.clone();
    let st = started.clone();
    let builder = thread::spawn(move || {
        c.get_or_build(&5, || -> Result<Arc<String>, String> {
            *st.0.lock().unwrap() = true;
            st.1.notify_all();
            thread::sleep(Duration::from_millis(50));
            panic!("builder crashed without an error value");
        })
    });
    {
        let mut s = started.0.lock().unwrap();
        while !*s {
            s = started.1.wait(s).unwrap();
        }
    }
    // This waiter either waits on the panicking build and then retries, or arrives after it
    // and builds: either way it gets a value, not an error.
    let v = cache.get_or_build(&5, || Ok(Arc::new("retried".into()))).unwrap();
    assert_eq!(*v, "retried");
    assert!(builder.join().is_err());
    assert_eq!(cache.stats().builds, 2);
}

#[test]
fn different_keys_build_in_parallel() {
    // Build 1 blocks until build 2 has started, and vice versa: this finishes only if the
    // two builds overlap (a global lock held during builds would deadlock; the bounded
    // waits turn that into a failure instead of a hang).
    let cache = cache();
    let started = (Mutex::new([false; 2]), Condvar::new());
    let build = |me: usize| {
        let mut s = started.0.lock().unwrap();
        s[me] = true;
        started.1.notify_all();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !s[1 - me] {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(format!("build {me} never saw the other build start"));
            }
            s = started.1.wait_timeout(s, left).unwrap().0;
        }
        Ok(Arc::new(format!("v{me}")))
    };
    let (a, b) = thread::scope(|s| {
        let a = s.spawn(|| cache.get_or_build(&100, || build(0)));
        let b = s.spawn(|| cache.get_or_build(&200, || build(1)));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert_eq!(*a.unwrap(), "v0");
    assert_eq!(*b.unwrap(), "v1");
}

#[test]
fn lru_eviction_by_size() {
    let cache: Cache = BuildCache::new(10, |v: &Arc<String>| v.len());
    let get = |k: u64, v: &str| cache.get_or_build(&k, || Ok(Arc::new(v.to_string()))).unwrap();
    get(1, "aaaa");
    get(2, "bbbb");
    get(1, "xxxx"); // 1 is now more recent than 2
    get(3, "cccc"); // 12 bytes > 10: evict the LRU entry, 2
    let st = cache.stats();
    assert_eq!(st.evictions, 1);
    assert_eq!(st.bytes, 8);
    assert!(cache.get(&2).is_none());
    assert_eq!(cache.get(&1).as_deref().map(String::as_str), Some("aaaa"));
    assert_eq!(cache.get(&3).as_deref().map(String::as_str), Some("cccc"));
}
