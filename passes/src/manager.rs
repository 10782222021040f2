//! The pass manager: named passes run in order, the verifier checks the kernel after each
//! (always in debug builds and tests; on request in release builds) or, in release builds,
//! once after the last (a failure then runs the passes again, verified, to name the pass at
//! fault: a pass's bug is an error, never a kernel that computes something else), and with
//! `KILN_VERBOSE=debuginfo` the IR after each pass is printed (through `tracing` at debug
//! level, and to stderr).

use std::fmt;
use std::time::{Duration, Instant};

use kiln_ir::depth::bound_kernel;
use kiln_ir::{verify_kernel, Kernel, Module};

/// Whether every pass manager prints the IR after each pass to stderr.
static TRACE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Turns printing the IR after every pass to stderr on or off, process-wide (kiln's
/// `KILN_VERBOSE=debuginfo` setting, which `kiln_runtime::Config::install` applies).
pub fn set_trace(on: bool) {
    TRACE.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// A kernel-to-kernel transformation.
pub trait Pass: Send + Sync {
    /// The pass's name, as used in pipelines.
    fn name(&self) -> &'static str;
    /// Transforms a kernel. Returns the same kernel (pointer-equal body) if nothing changed.
    fn run(&self, k: &Kernel) -> Kernel;
}

/// A pass given by a function.
pub struct FnPass {
    /// The pass's name.
    pub name: &'static str,
    /// The transformation.
    pub f: fn(&Kernel) -> Kernel,
}

impl Pass for FnPass {
    fn name(&self) -> &'static str {
        self.name
    }
    fn run(&self, k: &Kernel) -> Kernel {
        (self.f)(k)
    }
}

/// A built-in pass: its name, its function and a one-line description.
pub type PassEntry = (&'static str, fn(&Kernel) -> Kernel, &'static str);

/// Every built-in pass.
pub const PASSES: &[PassEntry] = &[
    ("simplify", crate::simplify::simplify_kernel, "egg expression simplifier"),
    ("let-opt", crate::let_opt::let_opt, "remove unused lets, inline single-use/trivial"),
    ("cse", crate::cse::cse, "common subexpression elimination"),
    ("licm", crate::licm::licm, "loop-invariant let hoisting"),
    ("strength", crate::strength::strength, "strength reduction"),
    ("dce", crate::dce::dce, "dead stores to unread arrays and vars"),
    ("constprop", crate::constprop::constprop, "constant propagation and folding"),
    ("peephole", crate::peephole::peephole, "integer mad/add3 fusion; fma under fast-math"),
    ("scalarize", crate::scalarize::scalarize, "constant-indexed private arrays to vars"),
    ("var-to-let", crate::var_to_let::var_to_let, "single-assignment vars to lets"),
    ("unroll", crate::unroll::unroll, "full unrolling of small constant-trip loops"),
    (
        "scalarize-vectors",
        crate::vectors::scalarize_vectors,
        "vector values and accesses to one scalar per lane",
    ),
    (
        "slm-buffer",
        crate::slm_buffering::slm_double_buffer,
        "single to double local-memory buffering",
    ),
    (
        "slm-buffer3",
        crate::slm_buffering::slm_triple_buffer,
        "single to triple local-memory buffering (two tiles in flight)",
    ),
];

/// The pass named `name`, if there is one.
pub fn pass_by_name(name: &str) -> Option<Box<dyn Pass>> {
    PASSES
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|&(name, f, _)| Box::new(FnPass { name, f }) as Box<dyn Pass>)
}

/// Why a pipeline could not be built or run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PassError {
    /// A pass name that is not in [`PASSES`].
    UnknownPass(String),
    /// A pass produced a kernel the verifier rejects (a bug in the pass).
    Verify {
        /// The pass.
        pass: String,
        /// The verifier's messages.
        errors: Vec<String>,
    },
}

impl fmt::Display for PassError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PassError::UnknownPass(n) => {
                let names: Vec<&str> = PASSES.iter().map(|p| p.0).collect();
                write!(f, "unknown pass `{n}` (passes: {})", names.join(", "))
            }
            PassError::Verify { pass, errors } => {
                write!(f, "pass `{pass}` produced invalid IR: {}", errors.join("; "))
            }
        }
    }
}

impl std::error::Error for PassError {}

/// Runs a list of passes, verifying after each (debug builds, [`with_verify`](Self::with_verify))
/// or once after the last (otherwise): a pass's invalid output is always an error.
pub struct PassManager {
    passes: Vec<Box<dyn Pass>>,
    verify: bool,
}

impl Default for PassManager {
    fn default() -> PassManager {
        PassManager::new()
    }
}

impl PassManager {
    /// An empty pass manager (verification on in debug builds).
    pub fn new() -> PassManager {
        PassManager { passes: Vec::new(), verify: cfg!(debug_assertions) }
    }

    /// A pass manager for a comma-separated list of pass names (`"simplify,cse,licm"`).
    pub fn from_names(list: &str) -> Result<PassManager, PassError> {
        let mut pm = PassManager::new();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            pm.add(pass_by_name(name).ok_or_else(|| PassError::UnknownPass(name.into()))?);
        }
        Ok(pm)
    }

    /// Appends a pass.
    pub fn add(&mut self, pass: Box<dyn Pass>) -> &mut PassManager {
        self.passes.push(pass);
        self
    }

    /// Turns verification after each pass on or off (it is always on in debug builds); when
    /// off, the pipeline's result is still verified, and a failure names the pass at fault.
    pub fn with_verify(mut self, verify: bool) -> PassManager {
        self.verify = verify || cfg!(debug_assertions);
        self
    }

    /// The names of the passes, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.passes.iter().map(|p| p.name()).collect()
    }

    /// Runs every pass on `k` in order.
    pub fn run(&self, k: &Kernel) -> Result<Kernel, PassError> {
        self.run_inner(k, None, self.verify)
    }

    /// Runs every pass on `k` in order, as [`run`](Self::run) does, and says how long each
    /// pass and each verification took (`kiln opt --time-passes`).
    pub fn run_timed(&self, k: &Kernel) -> Result<(Kernel, TimeReport), PassError> {
        let mut report = TimeReport { kernel: k.name().to_string(), entries: Vec::new() };
        let out = self.run_inner(k, Some(&mut report), self.verify)?;
        Ok((out, report))
    }

    fn run_inner(
        &self,
        k: &Kernel,
        mut report: Option<&mut TimeReport>,
        each: bool,
    ) -> Result<Kernel, PassError> {
        let verbose = TRACE.load(std::sync::atomic::Ordering::Relaxed);
        let mut record = |step: Step, start: Instant| {
            if let Some(r) = report.as_deref_mut() {
                r.entries.push(PassTime { step, time: start.elapsed() });
            }
        };
        // Passes and the verifier recurse over expressions: keep them within
        // MAX_EXPR_DEPTH before the first pass and after each (a pass that inlines can
        // deepen). A no-op, pointer-equal, when nothing is too deep.
        let input = k;
        let mut k = bound_kernel(k);
        for p in &self.passes {
            let start = Instant::now();
            k = bound_kernel(&p.run(&k));
            record(Step::Pass(p.name()), start);
            tracing::debug!(target: "kiln::passes", pass = p.name(), "after {}:\n{}", p.name(), k);
            if verbose {
                eprintln!("// IR after pass `{}`:\n{}", p.name(), k);
            }
            if each {
                let start = Instant::now();
                let verified = verify_kernel(&k);
                record(Step::Verify(p.name()), start);
                verified.map_err(|errs| PassError::Verify {
                    pass: p.name().to_string(),
                    errors: errs.iter().map(|e| e.to_string()).collect(),
                })?;
            }
        }
        if !each && !self.passes.is_empty() {
            // Without verification after each pass, the result is still verified once: a
            // pass's bug must fail the build, never run as a kernel that computes something
            // else. Only then are the passes run again, verified, to name the one at fault.
            let start = Instant::now();
            let verified = verify_kernel(&k);
            record(Step::Verify("pipeline"), start);
            if verified.is_err() {
                return self.run_inner(input, None, true);
            }
        }
        Ok(k)
    }

    /// Runs the passes on every kernel of a module.
    pub fn run_module(&self, m: &Module) -> Result<Module, PassError> {
        let kernels = m.kernels.iter().map(|k| self.run(k)).collect::<Result<Vec<_>, _>>()?;
        Ok(Module::new(kernels))
    }

    /// Runs the passes on every kernel of a module, with one [`TimeReport`] per kernel.
    pub fn run_module_timed(&self, m: &Module) -> Result<(Module, Vec<TimeReport>), PassError> {
        let (kernels, reports) =
            m.kernels.iter().map(|k| self.run_timed(k)).collect::<Result<(Vec<_>, Vec<_>), _>>()?;
        Ok((Module::new(kernels), reports))
    }
}

/// One step a pass manager took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Running the named pass (with the expression-depth bound applied to its output).
    Pass(&'static str),
    /// Verifying the output of the named pass.
    Verify(&'static str),
}

/// How long one step took.
#[derive(Clone, Debug)]
pub struct PassTime {
    /// The step.
    pub step: Step,
    /// Its wall-clock time.
    pub time: Duration,
}

/// The time each step of one pipeline run took on one kernel, in the order the steps ran (a
/// pass that appears twice in the pipeline has two entries), as compilers' `-ftime-report`
/// gives. Its `Display` is the table `kiln opt --time-passes` prints.
#[derive(Clone, Debug)]
pub struct TimeReport {
    /// The kernel's name.
    pub kernel: String,
    /// Every step, in order.
    pub entries: Vec<PassTime>,
}

impl TimeReport {
    /// The sum of every step's time.
    pub fn total(&self) -> Duration {
        self.entries.iter().map(|e| e.time).sum()
    }
}

impl fmt::Display for TimeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let total = self.total();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let share = |d: Duration| {
            if total.is_zero() {
                0.0
            } else {
                100.0 * d.as_secs_f64() / total.as_secs_f64()
            }
        };
        writeln!(f, "pass timing for kernel `{}`:", self.kernel)?;
        writeln!(f, "  {:<4} {:<20} {:>10} {:>7}", "#", "step", "ms", "share")?;
        for (i, e) in self.entries.iter().enumerate() {
            let name = match e.step {
                Step::Pass(p) => p.to_string(),
                Step::Verify(p) => format!("(verify {p})"),
            };
            writeln!(f, "  {:<4} {name:<20} {:>10.3} {:>6.1}%", i + 1, ms(e.time), share(e.time))?;
        }
        write!(f, "  {:<4} {:<20} {:>10.3} {:>6.1}%", "", "total", ms(total), 100.0)
    }
}
