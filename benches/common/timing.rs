//! Timing helpers shared by the in-process JIT benches (`jit_compile`, `jit_tc`), which print
//! their own per-step medians beside criterion's.

use std::time::{Duration, Instant};

/// The median of 21 timed runs of `f`.
pub fn median21(mut f: impl FnMut()) -> Duration {
    let mut t: Vec<Duration> = (0..21)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed()
        })
        .collect();
    t.sort();
    t[10]
}

/// `d` in milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
