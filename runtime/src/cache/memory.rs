//! The in-memory build cache: thread-safe `get_or_build` with one builder per key.
//!
//! This follows DPC++'s SYCL runtime (its `KernelProgramCache`): the map holds a *build
//! result* per key, not the value itself. A build result is in one of three states: in progress, done
//! or failed. [`BuildCache::get_or_build`] locks the map only to look up or insert an
//! entry, never while building:
//!
//! * **A** (first requester): inserts an in-progress entry, releases the map lock, builds,
//!   publishes the value (or the error), and wakes the waiters through the entry's condition
//!   variable.
//! * **B** (someone else is building): waits on the entry's condition variable (no spinning).
//!   If the build failed with an error, every waiter gets a clone of that error. If the build
//!   failed *without* an error value (the builder panicked), the waiters retry: one of them
//!   becomes the new builder.
//! * **C** (done): the value is read from a [`OnceLock`] with no further locking.
//!
//! A failed entry is removed from the map, so a later request (after the waiters of that
//! build have their error) builds again: build errors may be spurious.
//!
//! Least-recently-used entries are evicted when the total size (as reported by the weigher
//! given at construction) passes the limit (`KILN_IN_MEM_CACHE_MAX` bytes for the caches a
//! [`crate::Context`] makes; 0 = unlimited). Values are reference-counted handles, so an
//! evicted value stays valid for whoever holds it.

use std::hash::Hash;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, OnceLock};

use crate::sync::{ranks, RankedGuard, RankedMutex};

use hashbrown::{Equivalent, HashMap};

const IN_PROGRESS: u8 = 0;
const DONE: u8 = 1;
const FAILED: u8 = 2;
const FAILED_NO_ERROR: u8 = 3;

/// One key's build result, shared by the builder and its waiters.
struct Entry<V, E> {
    /// `IN_PROGRESS`, `DONE`, `FAILED` or `FAILED_NO_ERROR`.
    state: AtomicU8,
    /// The value, once built (read lock-free on hits).
    value: OnceLock<V>,
    /// The error of a failed build.
    error: OnceLock<E>,
    /// Guards the condition variable's wait (the state itself is atomic).
    lock: RankedMutex<()>,
    /// Signalled when the state leaves `IN_PROGRESS`.
    built: Condvar,
    /// Threads waiting on `built` (changed under `lock`), so that a build nobody waits for
    /// finishes without the wake-up system call.
    waiters: AtomicUsize,
    /// The tick of the last use, for LRU eviction.
    last_used: AtomicU64,
    /// The value's size in bytes (0 until built).
    size: AtomicUsize,
}

impl<V, E> Entry<V, E> {
    fn new(tick: u64) -> Entry<V, E> {
        Entry {
            state: AtomicU8::new(IN_PROGRESS),
            value: OnceLock::new(),
            error: OnceLock::new(),
            lock: RankedMutex::new(ranks::CACHE_ENTRY, ()),
            built: Condvar::new(),
            waiters: AtomicUsize::new(0),
            last_used: AtomicU64::new(tick),
            size: AtomicUsize::new(0),
        }
    }

    /// Sets the final state and wakes every waiter.
    fn finish(&self, state: u8) {
        let _g = self.lock.lock();
        self.state.store(state, Ordering::Release);
        // A waiter registers under the lock before it sleeps and checks the state first, so
        // with none registered now, none can miss this change.
        if self.waiters.load(Ordering::Relaxed) > 0 {
            self.built.notify_all();
        }
    }

    /// Blocks until the state is not `IN_PROGRESS`; returns it.
    fn wait(&self) -> u8 {
        let mut g = self.lock.lock();
        loop {
            let s = self.state.load(Ordering::Acquire);
            if s != IN_PROGRESS {
                return s;
            }
            self.waiters.fetch_add(1, Ordering::Relaxed);
            g = self.lock.wait(&self.built, g);
            self.waiters.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Counters of a [`BuildCache`]; all cumulative except `bytes` and `entries`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Requests answered by a finished entry.
    pub hits: u64,
    /// Requests that found no finished entry (they built, or waited for a builder).
    pub misses: u64,
    /// Builds started.
    pub builds: u64,
    /// Builds that failed (with or without an error value).
    pub build_failures: u64,
    /// Entries removed by LRU eviction.
    pub evictions: u64,
    /// Current total size of the finished entries, in bytes (as the weigher says).
    pub bytes: u64,
    /// Current number of entries (finished or in progress).
    pub entries: u64,
}

#[derive(Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    builds: AtomicU64,
    build_failures: AtomicU64,
    evictions: AtomicU64,
    bytes: AtomicU64,
}

/// A thread-safe map from keys to built values with one builder per missing key.
///
/// `V` is a cheap-to-clone handle (an `Arc` or a struct of them); `E` is the build error,
/// cloned to every waiter.
///
/// ```
/// use kiln_runtime::cache::BuildCache;
/// let cache: BuildCache<u32, String, String> = BuildCache::new(0, |v: &String| v.len());
/// let v = cache.get_or_build(&7, || Ok("seven".to_string())).unwrap();
/// assert_eq!(v, "seven");
/// // Second request: a hit, the builder is not called.
/// let v = cache.get_or_build(&7, || Err("not called".to_string())).unwrap();
/// assert_eq!(v, "seven");
/// assert_eq!((cache.stats().hits, cache.stats().builds), (1, 1));
/// ```
pub struct BuildCache<K, V, E> {
    map: RankedMutex<HashMap<K, Arc<Entry<V, E>>>>,
    weigh: fn(&V) -> usize,
    max_bytes: u64,
    tick: AtomicU64,
    counters: Counters,
}

impl<K, V, E> std::fmt::Debug for BuildCache<K, V, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuildCache").field("max_bytes", &self.max_bytes).finish_non_exhaustive()
    }
}

/// Marks an entry failed-without-error if the builder unwinds, so that waiters retry.
struct BuildGuard<'a, K: Hash + Eq + Clone, Q: Hash + Equivalent<K> + ?Sized, V: Clone, E: Clone> {
    cache: &'a BuildCache<K, V, E>,
    key: &'a Q,
    entry: &'a Arc<Entry<V, E>>,
    armed: bool,
}

impl<K: Hash + Eq + Clone, Q: Hash + Equivalent<K> + ?Sized, V: Clone, E: Clone> Drop
    for BuildGuard<'_, K, Q, V, E>
{
    fn drop(&mut self) {
        if self.armed {
            self.cache.counters.build_failures.fetch_add(1, Ordering::Relaxed);
            self.cache.remove_entry(self.key, self.entry);
            self.entry.finish(FAILED_NO_ERROR);
        }
    }
}

impl<K: Hash + Eq + Clone, V: Clone, E: Clone> BuildCache<K, V, E> {
    /// An empty cache evicting least-recently-used entries when the total of `weigh` over
    /// the finished entries passes `max_bytes` (0: never evict).
    pub fn new(max_bytes: u64, weigh: fn(&V) -> usize) -> BuildCache<K, V, E> {
        BuildCache {
            map: RankedMutex::new(ranks::CACHE_MAP, HashMap::new()),
            weigh,
            max_bytes,
            tick: AtomicU64::new(0),
            counters: Counters::default(),
        }
    }

    fn map(&self) -> RankedGuard<'_, HashMap<K, Arc<Entry<V, E>>>> {
        self.map.lock()
    }

    fn next_tick(&self) -> u64 {
        self.tick.fetch_add(1, Ordering::Relaxed)
    }

    /// Removes `key` from the map if it still maps to `entry`.
    fn remove_entry<Q: Hash + Equivalent<K> + ?Sized>(&self, key: &Q, entry: &Arc<Entry<V, E>>) {
        let mut map = self.map();
        if map.get(key).is_some_and(|e| Arc::ptr_eq(e, entry)) {
            map.remove(key);
        }
    }

    /// The value for `key`, building it with `build` if no finished entry exists.
    ///
    /// Exactly one caller builds a missing key; concurrent callers for the same key wait for
    /// that build and receive its value or a clone of its error. The map lock is held only
    /// to look up or insert, never during `build`. If the builder panics, the entry is
    /// dropped and the waiters retry (one of them builds).
    pub fn get_or_build(&self, key: &K, build: impl FnOnce() -> Result<V, E>) -> Result<V, E> {
        self.get_or_build_by(key, K::clone, build)
    }

    /// [`get_or_build`](Self::get_or_build) looked up by a borrowed form `query` of the key
    /// (hashing and comparing like the key it stands for; see [`Equivalent`]): a hit builds
    /// no owned key, so it allocates nothing. `to_key` makes the owned key on a miss.
    pub fn get_or_build_by<Q: Hash + Equivalent<K> + ?Sized>(
        &self,
        query: &Q,
        to_key: impl Fn(&Q) -> K,
        build: impl FnOnce() -> Result<V, E>,
    ) -> Result<V, E> {
        let key = query;
        let mut build = Some(build);
        loop {
            let (entry, inserted) = {
                let mut map = self.map();
                match map.get(key) {
                    Some(e) => {
                        // C: a finished entry; the value is cloned while the lookup's lock
                        // is held, which saves taking a reference to the entry itself.
                        if e.state.load(Ordering::Acquire) == DONE {
                            if let Some(v) = e.value.get() {
                                e.last_used.store(self.next_tick(), Ordering::Relaxed);
                                self.counters.hits.fetch_add(1, Ordering::Relaxed);
                                return Ok(v.clone());
                            }
                        }
                        (e.clone(), false)
                    }
                    None => {
                        let e = Arc::new(Entry::new(self.next_tick()));
                        let owned = to_key(key);
                        map.insert(owned, e.clone());
                        (e, true)
                    }
                }
            };
            if !inserted {
                // C: a finished entry, read without locks.
                if entry.state.load(Ordering::Acquire) == DONE {
                    if let Some(v) = entry.value.get() {
                        entry.last_used.store(self.next_tick(), Ordering::Relaxed);
                        self.counters.hits.fetch_add(1, Ordering::Relaxed);
                        return Ok(v.clone());
                    }
                }
                // B: wait for the builder.
                self.counters.misses.fetch_add(1, Ordering::Relaxed);
                match entry.wait() {
                    DONE => {
                        if let Some(v) = entry.value.get() {
                            entry.last_used.store(self.next_tick(), Ordering::Relaxed);
                            return Ok(v.clone());
                        }
                    }
                    FAILED => {
                        if let Some(e) = entry.error.get() {
                            return Err(e.clone());
                        }
                    }
                    _ => {}
                }
                // Failed without an error value: retry (the entry has left the map).
                continue;
            }
            // A: build.
            self.counters.misses.fetch_add(1, Ordering::Relaxed);
            self.counters.builds.fetch_add(1, Ordering::Relaxed);
            let Some(build) = build.take() else {
                // A retrying waiter whose builder was already used cannot happen: a waiter
                // never consumed its builder. Treat defensively as a failed build.
                entry.finish(FAILED_NO_ERROR);
                continue;
            };
            let mut guard = BuildGuard { cache: self, key, entry: &entry, armed: true };
            let result = build();
            guard.armed = false;
            drop(guard);
            return match result {
                Ok(v) => {
                    let size = (self.weigh)(&v);
                    let _ = entry.value.set(v.clone());
                    entry.size.store(size, Ordering::Relaxed);
                    self.counters.bytes.fetch_add(size as u64, Ordering::Relaxed);
                    entry.last_used.store(self.next_tick(), Ordering::Relaxed);
                    entry.finish(DONE);
                    self.evict_if_needed(&entry);
                    Ok(v)
                }
                Err(e) => {
                    self.counters.build_failures.fetch_add(1, Ordering::Relaxed);
                    let _ = entry.error.set(e.clone());
                    self.remove_entry(key, &entry);
                    entry.finish(FAILED);
                    Err(e)
                }
            };
        }
    }

    /// The finished value for `key`, if any (counts as neither hit nor miss).
    pub fn get(&self, key: &K) -> Option<V> {
        let e = self.map().get(key).cloned()?;
        if e.state.load(Ordering::Acquire) == DONE {
            e.value.get().cloned()
        } else {
            None
        }
    }

    /// Every finished value (counts as neither hit nor miss), in no particular order.
    pub fn values(&self) -> Vec<V> {
        self.map()
            .values()
            .filter(|e| e.state.load(Ordering::Acquire) == DONE)
            .filter_map(|e| e.value.get().cloned())
            .collect()
    }

    /// Evicts least-recently-used finished entries (never `keep`) while over the limit.
    fn evict_if_needed(&self, keep: &Arc<Entry<V, E>>) {
        if self.max_bytes == 0 || self.counters.bytes.load(Ordering::Relaxed) <= self.max_bytes {
            return;
        }
        let mut map = self.map();
        let mut done: Vec<(u64, K)> = map
            .iter()
            .filter(|(_, e)| e.state.load(Ordering::Acquire) == DONE && !Arc::ptr_eq(e, keep))
            .map(|(k, e)| (e.last_used.load(Ordering::Relaxed), k.clone()))
            .collect();
        done.sort_by_key(|(t, _)| *t);
        for (_, k) in done {
            if self.counters.bytes.load(Ordering::Relaxed) <= self.max_bytes {
                break;
            }
            if let Some(e) = map.remove(&k) {
                let size = e.size.load(Ordering::Relaxed) as u64;
                self.counters.bytes.fetch_sub(size, Ordering::Relaxed);
                self.counters.evictions.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Removes every finished entry (in-progress builds finish normally).
    pub fn clear(&self) {
        let mut map = self.map();
        map.retain(|_, e| {
            if e.state.load(Ordering::Acquire) == DONE {
                self.counters
                    .bytes
                    .fetch_sub(e.size.load(Ordering::Relaxed) as u64, Ordering::Relaxed);
                false
            } else {
                true
            }
        });
    }

    /// The counters, and the current size and entry count.
    pub fn stats(&self) -> CacheStats {
        let entries = self.map().len() as u64;
        let c = &self.counters;
        CacheStats {
            hits: c.hits.load(Ordering::Relaxed),
            misses: c.misses.load(Ordering::Relaxed),
            builds: c.builds.load(Ordering::Relaxed),
            build_failures: c.build_failures.load(Ordering::Relaxed),
            evictions: c.evictions.load(Ordering::Relaxed),
            bytes: c.bytes.load(Ordering::Relaxed),
            entries,
        }
    }
}
