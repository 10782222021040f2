//! Timing helpers shared by the in-process JIT benches (`jit_compile`, `jit_tc`), which print
//! their own per-step medians beside criterion's.

use std::time::{Duration, Instant};

use kiln::backends::ptx;
use kiln::backends::target::Target;
use kiln::ir::{Kernel, Module, Verified};
use kiln::passes::manager::Step;
use kiln::passes::pipeline::default_pipeline;

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

/// Every step of the `-O` pipeline on `k`, in pipeline order, with the median of 21 runs of
/// each and its share of their sum (`PassManager::run_timed`, as `kiln opt --time-passes`
/// reports one run), one step per line.
pub fn pass_table(k: &Kernel) -> String {
    let pm = default_pipeline();
    let runs: Vec<_> = (0..21).map(|_| pm.run_timed(k).expect("pipeline runs").1).collect();
    let med: Vec<(String, Duration)> = (0..runs[0].entries.len())
        .map(|i| {
            let mut t: Vec<Duration> = runs.iter().map(|r| r.entries[i].time).collect();
            t.sort();
            let name = match runs[0].entries[i].step {
                Step::Pass(p) => format!("#{} {p}", i + 1),
                Step::Verify(p) => format!("#{} verify {p}", i + 1),
            };
            (name, t[10])
        })
        .collect();
    let total: Duration = med.iter().map(|m| m.1).sum();
    let mut out = String::new();
    for (s, t) in &med {
        let share = 100.0 * t.as_secs_f64() / total.as_secs_f64();
        out += &format!("  {s:<18} {:>7.3} ms {share:>5.1}%\n", ms(*t));
    }
    out + &format!("  {:<18} {:>7.3} ms (sum of the medians)", "total", ms(total))
}

/// PTX for `k`, the `-O` pipeline's output of a generated kernel. The generator verified
/// its kernel and the passes keep it valid, so it goes to the backend as verified
/// (`Verified::from_pass_output`, as the build driver does) and is checked once per build,
/// not a second time here (`ptx::emit_kernel` verifies the bare kernel it is given).
pub fn emit(k: Kernel, opts: &ptx::Options) -> String {
    ptx::Ptx(*opts).emit(&Verified::from_pass_output(Module::new(vec![k]))).expect("emits")
}
