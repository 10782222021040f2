//! proptest strategies for random well-typed IR, shared by every crate and fuzz target
//! (feature `testing`).
//!
//! * [`arb_kernel`] / [`arb_kernel_with`]: whole kernels with an nd-range, arguments and
//!   buffers ([`TestCase`]) that run on the interpreter without error, deterministically,
//!   and without data races, so any correct pass or backend must reproduce the
//!   interpreter's buffers exactly (up to NaN payloads: compare with [`results_match`]).
//! * [`arb_expr`]: well-typed expressions of a given type over given variables and
//!   buffers, which evaluate without error (indices in bounds, divisors never zero).
//! * [`arb_imm`], [`arb_buffer`], [`arb_arith_type`]: values, buffers and types.
//!
//! Every strategy draws a `Vec<u32>` of choices and builds its value from it
//! deterministically ([`Choices`]); choice 0 is always the simplest option, so proptest's
//! shrinking (shorter vectors, smaller numbers) shrinks kernels toward a few constants.
//! Fuzz targets use the same generators on raw bytes with [`case_from_bytes`].
//!
//! ```
//! use kiln_ir::testing::{arb_kernel, results_match};
//! use proptest::prelude::*;
//! use proptest::test_runner::TestRunner;
//!
//! let mut runner = TestRunner::deterministic();
//! runner
//!     .run(&arb_kernel(), |case| {
//!         let first = case.run().unwrap();
//!         let second = case.run().unwrap();
//!         prop_assert!(results_match(&first, &second).is_ok());
//!         Ok(())
//!     })
//!     .unwrap();
//! ```
//!
//! What the generated kernels contain, and the rules that keep them valid and race-free, are
//! described on [`GenConfig`] and in the generator's source (`testing/gen.rs`).

mod bits;
mod gen;
mod values;

use proptest::collection::vec;
use proptest::prelude::*;

use crate::expr::{Expr, Imm, Var};
use crate::interp::{run_with, RunOptions};
use crate::kernel::Kernel;
use crate::launch::LaunchError;
use crate::launch::{Arg, Buffer, NdRange};
use crate::types::Scalar;

pub use bits::{bits_match, nan_copy_case};
pub use values::{choices_from_bytes, gen_buffer, gen_imm, Choices};

/// The step limit [`TestCase::run`] uses: generated kernels stay far below it.
pub const STEP_LIMIT: u64 = 10_000_000;

/// The text of `examples/NAME.kir` (`name` without `.kir`, may name a subfolder:
/// `fusion/chain`), from the directory `KILN_EXAMPLES_DIR` names when set (test binaries run
/// on another machine, e.g. the GPU one), else the workspace's `examples/`.
pub fn example_source(name: &str) -> String {
    let dir = std::env::var("KILN_EXAMPLES_DIR")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../examples").to_string());
    let path = format!("{dir}/{name}.kir");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read `{path}`: {e}"))
}

/// The first kernel of `examples/NAME.kir` ([`example_source`]).
pub fn example_kernel(name: &str) -> Kernel {
    let src = example_source(name);
    crate::parse_module(&src).unwrap_or_else(|e| panic!("{name}.kir: {e}")).kernels.remove(0)
}

/// The one rule for what a test needs from outside this process (an external tool, a
/// device): `found` is what looking for it gave. `Ok` is used; an error skips the test with
/// its message ([`skip`]), unless the variable `require` is set (`KILN_REQUIRE_TOOLS`, which
/// `cargo xtask test` sets, or `KILN_REQUIRE_CUDA` for GPUs CI does not have), when the test
/// fails with it instead.
pub fn require<T, E: std::fmt::Display>(require: &str, found: Result<T, E>) -> Option<T> {
    match found {
        Ok(t) => Some(t),
        Err(e) if std::env::var_os(require).is_some_and(|v| !v.is_empty()) => {
            panic!("{require} is set, but: {e}")
        }
        Err(e) => {
            skip(&e.to_string());
            None
        }
    }
}

/// [`require`] for one device of several a test runs on: when it is missing (and `require`
/// is not set) the test goes on with the others, so it says so on stderr without recording
/// the test as skipped.
pub fn optional<T, E: std::fmt::Display>(require: &str, found: Result<T, E>) -> Option<T> {
    match found {
        Ok(t) => Some(t),
        Err(e) if std::env::var_os(require).is_some_and(|v| !v.is_empty()) => {
            panic!("{require} is set, but: {e}")
        }
        Err(e) => {
            eprintln!("not on this device: {e}");
            None
        }
    }
}

/// The external tool whose path the variable `var` holds (`KILN_SPIRV_VAL`, `KILN_PTXAS`,
/// `KILN_LLVM_MC`: `cargo xtask test` finds or installs each and sets it), under
/// [`require`]'s rule with `KILN_REQUIRE_TOOLS`.
pub fn tool(var: &str) -> Option<std::path::PathBuf> {
    let found = std::env::var_os(var)
        .filter(|p| !p.is_empty())
        .map(std::path::PathBuf::from)
        .ok_or_else(|| format!("{var} is not set (run `cargo xtask test`, which sets it)"));
    require("KILN_REQUIRE_TOOLS", found)
}

/// Reports that the calling test is skipping its work (no device, no tool): prints
/// `skipping BINARY::TEST: REASON` to stderr and, when `KILN_SKIP_LOG` names a file, appends
/// `BINARY::TEST<tab>REASON` to it, so that `cargo xtask test` can say which tests printed `ok`
/// without having run. The test's name is its thread's (the test harness names each thread
/// after its test). The caller returns right after.
pub fn skip(reason: &str) {
    use std::io::Write;
    let thread = std::thread::current();
    // The test binary (`cuda_diff-0123abcd` without the hash) and the test, so that a
    // summary over every binary says which one.
    let binary = std::env::current_exe()
        .ok()
        .and_then(|p| Some(p.file_stem()?.to_string_lossy().into_owned()))
        .map(|stem| stem.rsplit_once('-').map_or(stem.clone(), |(name, _)| name.to_string()))
        .unwrap_or_default();
    let test = format!("{binary}::{}", thread.name().unwrap_or("?"));
    let reason = reason.replace(['\n', '\t'], " ");
    eprintln!("skipping {test}: {reason}");
    if let Some(path) = std::env::var_os("KILN_SKIP_LOG").filter(|p| !p.is_empty()) {
        // One write of one line with O_APPEND: lines of concurrent tests do not interleave.
        let line = format!("{test}\t{reason}\n");
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            // The log is how a skip gets counted: losing it would hide the skip again.
            panic!("cannot record the skip in KILN_SKIP_LOG={}: {e}", path.to_string_lossy());
        }
    }
}

/// Knobs for the kernel generator. [`GenConfig::default`] turns every feature on with small
/// sizes (a case runs in well under a millisecond in a debug build).
///
/// Generated kernels use: 1-3 dimensions with offsets and explicit local sizes (sometimes
/// also `#reqd_work_group_size`); input buffers (global, constant or generic; sometimes two
/// parameters bound to the same buffer), output buffers (global or generic), an atomic
/// counter buffer and scalar parameters; `let`, `var` and assignments, stores, `if`/`else`
/// (conditions often depending on ids, so divergent), `for` loops (uniform or divergent
/// bounds, nested, counters of every integer type, near the type's maximum), bounded
/// `while` loops, private arrays anywhere, local arrays with barriers in uniform control
/// flow, atomics (results used and unused), fences; expressions with every operator, casts
/// between all scalar types (f16 and bool included), `select`, intrinsics and built-ins.
/// Names are sometimes re-bound after their scope ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenConfig {
    /// Most dimensions of the nd-range (1..=3).
    pub max_dims: usize,
    /// Most work-items in the whole nd-range.
    pub max_work_items: u32,
    /// Most statements in the kernel's top-level block (besides the fixed prologue and
    /// epilogue); the whole kernel has at most four times as many.
    pub max_stmts: usize,
    /// Most statements in a nested block.
    pub max_block_stmts: usize,
    /// Deepest nesting of `if`/`for`/`while`.
    pub max_nesting: usize,
    /// Deepest expression tree.
    pub max_expr_depth: u32,
    /// Generate `for` and `while` loops.
    pub loops: bool,
    /// Generate barriers.
    pub barriers: bool,
    /// Generate atomics.
    pub atomics: bool,
    /// Generate private arrays.
    pub private_arrays: bool,
    /// Generate local arrays.
    pub local_arrays: bool,
    /// Use f16 buffers and casts.
    pub f16: bool,
    /// Use `exp`, `log`, `sin` and `cos`, whose results backends only approximate.
    pub approx_intrinsics: bool,
    /// Sometimes re-bind a name whose previous binding's scope has ended.
    pub reuse_names: bool,
    /// Sometimes use again, whole, a subexpression generated earlier in the same statement
    /// (loads included), so that statements repeat subexpressions, also across the arms and
    /// the condition of a `select`: the shapes common subexpression elimination binds.
    /// Off by default (it changes what a given seed generates).
    pub repeat_subexprs: bool,
}

impl Default for GenConfig {
    fn default() -> GenConfig {
        GenConfig {
            max_dims: 3,
            max_work_items: 48,
            max_stmts: 8,
            max_block_stmts: 3,
            max_nesting: 3,
            max_expr_depth: 3,
            loops: true,
            barriers: true,
            atomics: true,
            private_arrays: true,
            local_arrays: true,
            f16: true,
            approx_intrinsics: false,
            reuse_names: true,
            repeat_subexprs: false,
        }
    }
}

/// A kernel with everything needed to run it: the nd-range, one argument per parameter, and
/// the buffers pointer arguments index (their initial contents).
#[derive(Clone, Debug)]
pub struct TestCase {
    /// The kernel.
    pub kernel: Kernel,
    /// The launch configuration.
    pub range: NdRange,
    /// One argument per kernel parameter.
    pub args: Vec<Arg>,
    /// The initial buffers.
    pub buffers: Vec<Buffer>,
}

impl TestCase {
    /// Runs the case on the interpreter (with [`STEP_LIMIT`]) on a copy of its buffers, and
    /// returns the final buffers.
    pub fn run(&self) -> Result<Vec<Buffer>, LaunchError> {
        self.run_kernel(&self.kernel)
    }

    /// Runs another kernel (e.g. a transformed version of this one) with this case's range,
    /// arguments and a copy of its buffers.
    pub fn run_kernel(&self, kernel: &Kernel) -> Result<Vec<Buffer>, LaunchError> {
        let mut bufs = self.buffers.clone();
        run_with(
            kernel,
            &self.range,
            &self.args,
            &mut bufs,
            &RunOptions::with_max_steps(STEP_LIMIT),
        )?;
        Ok(bufs)
    }
}

/// Random cases from a fixed seed, each from 3000 choices of a xorshift stream: the same
/// kernels on every run and machine, for tests that must not depend on proptest's runner
/// (for example, ones that run each case on an external tool or device).
pub fn seeded_cases(seed: u64, cfg: &GenConfig) -> impl Iterator<Item = TestCase> + '_ {
    // xorshift64 has no fixed point besides zero.
    let mut rng = seed.max(1);
    std::iter::repeat_with(move || {
        let choices: Vec<u32> = (0..3000)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                (rng >> 32) as u32
            })
            .collect();
        case_from_choices(&choices, cfg)
    })
}

/// Builds a test case from a choice stream (any numbers give a valid case).
pub fn case_from_choices(choices: &[u32], cfg: &GenConfig) -> TestCase {
    let mut c = Choices::new(choices);
    gen::Gen::new(&mut c, cfg).kernel_case()
}

/// Builds a test case from raw bytes, for fuzz targets.
pub fn case_from_bytes(bytes: &[u8], cfg: &GenConfig) -> TestCase {
    case_from_choices(&choices_from_bytes(bytes), cfg)
}

/// How many choices a kernel strategy draws (generation past the end uses zeros).
const KERNEL_CHOICES: usize = 3000;

/// Random kernels with the default [`GenConfig`].
pub fn arb_kernel() -> impl Strategy<Value = TestCase> {
    arb_kernel_with(GenConfig::default())
}

/// Random kernels with the given configuration.
pub fn arb_kernel_with(cfg: GenConfig) -> impl Strategy<Value = TestCase> {
    vec(any::<u32>(), 0..KERNEL_CHOICES).prop_map(move |c| case_from_choices(&c, &cfg))
}

/// What an expression may refer to: scalar variables, and pointer variables with the number
/// of elements of what they point to (loads index them in bounds).
#[derive(Clone, Debug, Default)]
pub struct ExprEnv {
    /// Scalar variables.
    pub vars: Vec<Var>,
    /// Pointer variables and their lengths in elements.
    pub buffers: Vec<(Var, u32)>,
}

/// Random expressions of type `ty` (any scalar type; an f16 expression is an f16 load or a
/// cast to f16) of depth at most
/// `depth` over `env`, using every operator, casts, `select`, intrinsics (not the
/// approximate ones), built-ins and in-bounds loads. They never fail to evaluate: indices
/// are reduced modulo the buffer length and integer divisors are odd.
pub fn arb_expr(ty: Scalar, env: ExprEnv, depth: u32) -> impl Strategy<Value = Expr> {
    let cfg = GenConfig { approx_intrinsics: false, ..GenConfig::default() };
    vec(any::<u32>(), 0..400).prop_map(move |c| {
        let mut choices = Choices::new(&c);
        gen::Gen::new(&mut choices, &cfg).env_expr(&env, ty, depth)
    })
}

/// Random values of type `ty` (finite floats, biased toward edge cases).
pub fn arb_imm(ty: Scalar) -> impl Strategy<Value = Imm> {
    vec(any::<u32>(), 4).prop_map(move |c| gen_imm(&mut Choices::new(&c), ty))
}

/// Random buffers of `len` elements of type `elem`.
pub fn arb_buffer(elem: Scalar, len: usize) -> impl Strategy<Value = Buffer> {
    vec(any::<u32>(), 4 * len).prop_map(move |c| gen_buffer(&mut Choices::new(&c), elem, len))
}

/// A random arithmetic type (i8..u64, f32, f64).
pub fn arb_arith_type() -> impl Strategy<Value = Scalar> {
    proptest::sample::select(
        Scalar::ALL.iter().copied().filter(|s| s.is_arith()).collect::<Vec<_>>(),
    )
}

/// Compares two runs' buffers element by element: bitwise, except that a quiet NaN meets any
/// NaN of the same type (the sign and payload of an arithmetic result are unspecified). An
/// expected signalling NaN must be found bit for bit: arithmetic never gives one, so it was
/// copied, and a copy keeps every bit. The error names the first difference.
pub fn results_match(expected: &[Buffer], actual: &[Buffer]) -> Result<(), String> {
    if expected.len() != actual.len() {
        return Err(format!("{} buffers expected, {} found", expected.len(), actual.len()));
    }
    for (b, (e, a)) in expected.iter().zip(actual).enumerate() {
        if e.elem() != a.elem() || e.len() != a.len() {
            return Err(format!(
                "buffer {b}: expected {} {} elements, found {} {}",
                e.len(),
                e.elem(),
                a.len(),
                a.elem()
            ));
        }
        for i in 0..e.len() {
            let (x, y) = (e.get(i), a.get(i));
            let quiet_nan = |v: Option<Imm>| {
                v.and_then(|v| v.as_f64()).is_some_and(|f| f.is_nan() && f.to_bits() & 1 << 51 != 0)
            };
            let both_nan = quiet_nan(x) && y.and_then(|y| y.as_f64()).is_some_and(f64::is_nan);
            if x != y && !both_nan {
                return Err(format!("buffer {b}, element {i}: expected {x:?}, found {y:?}"));
            }
        }
    }
    Ok(())
}
