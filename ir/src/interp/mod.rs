//! The reference interpreter: the semantic definition of kiln.
//!
//! [`run`] executes a kernel over an [`NdRange`] with real work-group semantics, on buffers
//! the caller owns; every pass and backend is tested against it. The crate docs ("Semantics")
//! say what kernels mean; this module adds the details they leave open.
//!
//! ```
//! use kiln_ir::interp::run;
//! use kiln_ir::launch::{Arg, Buffer, NdRange};
//! use kiln_ir::{AddrSpace, Expr, Kernel, Scalar, Stmt, Type, Var};
//!
//! // kernel saxpy(x: ptr<global, f32>, y: ptr<global, f32>, a: f32) {
//! //   let i: u32 = global_id(0); y[i] = a * x[i] + y[i]; }
//! let x = Var::new("x", Type::ptr(AddrSpace::Global, Scalar::F32));
//! let y = Var::new("y", Type::ptr(AddrSpace::Global, Scalar::F32));
//! let a = Var::new("a", Type::F32);
//! let i = Var::new("i", Type::U32);
//! let body = Stmt::block([
//!     Stmt::let_(&i, Expr::global_id(0)),
//!     Stmt::store(&y, &i, &a * x.load(&i) + y.load(&i)),
//! ]);
//! let k = Kernel::new("saxpy", vec![x, y, a], body);
//! let mut bufs = vec![Buffer::from_slice(&[1.0f32, 2.0]), Buffer::from_slice(&[10.0f32, 20.0])];
//! let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(3.0f32)];
//! run(&k, &NdRange::new(&[2]), &args, &mut bufs).unwrap();
//! assert_eq!(bufs[1].to_vec::<f32>(), Some(vec![13.0, 26.0]));
//! ```
//!
//! ## Execution model
//!
//! * **Launch.** The kernel is checked against the launch first (nothing runs if any check
//!   fails): 1 to 3 dimensions, a non-zero global size, `offset + global` within the `u32` id
//!   range, a non-zero local size dividing the global size in every dimension and equal to
//!   `#reqd_work_group_size` when the kernel has one; one argument per parameter, scalars of
//!   exactly the parameter's type, and buffer indices in range whose element type is the
//!   pointer's element type. Entries of [`NdRange`]'s arrays past `dims` are ignored (size 1,
//!   offset 0). Any pointer parameter (whatever its address space) binds a buffer; two
//!   parameters may bind the same buffer, and then see each other's stores. A parameter
//!   bound to a range of a buffer ([`Arg::Range`], which must lie
//!   within it) sees those elements only, index 0 at the range's offset; an index outside
//!   the range is out of bounds, and the message says it is relative to the range.
//! * **Default local size.** With no local size given and no `#reqd_work_group_size`,
//!   [`default_local_size`](crate::launch::default_local_size) is used: dimension 0 gets the largest divisor of its global size
//!   that is at most 64, the other dimensions get 1.
//! * **Order.** Work-groups run one after another, in linear order (dimension 0 fastest).
//!   Within a group, work-items run in linear local-id order, each until it reaches a
//!   barrier or finishes; when all wait at the same barrier they all resume, again in order.
//!   This is one valid schedule; a kernel whose result depends on the schedule has a data
//!   race and no defined result. [`RunOptions::reverse_order`] runs the reverse schedule,
//!   to find such kernels.
//! * **Barriers.** After each round every work-item of a group must be waiting at the same
//!   barrier statement, or all must have finished; otherwise the run fails with "barrier
//!   divergence", naming the group, the barrier (`#k`, counting barrier statements in
//!   program order from 1) and the two disagreeing work-items. Barriers are matched by
//!   statement, not by dynamic instance: work-items that reach the same barrier statement in
//!   different loop iterations (possible only when a barrier sits under a divergent `if`
//!   inside a loop) are not told apart. `fence` is a no-op here: execution is sequential, so
//!   memory is always consistent.
//! * **Memory.** `local` arrays are zeroed at the start of every work-group (wherever their
//!   declaration is); a `private` array is zeroed each time its declaration executes.
//! * **Atomics** run indivisibly (trivially: execution is sequential). They are defined on
//!   i32, u32, i64 and u64 elements, and `atomic_add` also on f32 (the sum rounded to f32,
//!   like an f32 `+`). `atomic_min`/`atomic_max` compare as signed or unsigned by type.
//!   `atomic_cmpxchg(p, i, cmp, v)` stores `v` if the element equals `cmp` (bitwise). The
//!   result, if bound, is the old value.
//! * **Floats.** f32 arithmetic is done in f32 (IEEE binary32, round to nearest even), f64
//!   in f64; `fma` rounds once. `min`/`max` are IEEE 754-2019 minimumNumber/maximumNumber: a
//!   NaN operand yields the other operand (NaN only if both are), and -0.0 < +0.0. `abs` and
//!   `-` only change the sign bit. `exp`, `log`, `sin` and `cos` are kiln's own
//!   algorithms ([`crate::eval::math`] on f32, [`crate::eval::math64`] on f64, docs/math.md:
//!   within 1 ulp, the same bits on every host); they are approximate
//!   ([`crate::Intrinsic::is_approximate`]): GPU backends may differ by a few ulps.
//!   The sign and payload of a NaN computed by arithmetic are unspecified (compare such NaNs
//!   as equal to each other). Moving a value changes no bit: loads, stores, `let`, `var`,
//!   selects, scalar arguments, literals, vector lanes, `-` and `abs` keep a NaN's payload,
//!   a signalling NaN stays signalling (only arithmetic and conversions quiet one, as IEEE
//!   754 says; a cast to the value's own type is no conversion). f16 values only move:
//!   loads, stores and casts (casts to f16 round to nearest even, correctly from any type).
//! * **Casts.** Integer to integer wraps (sign- or zero-extends from the source type, then
//!   truncates); float to integer truncates toward zero and saturates, NaN giving 0; integer
//!   to float rounds to nearest even; float to float rounds to nearest even; to `bool` is
//!   `!= 0` (so NaN is true, -0.0 false); `bool` to a number is 0 or 1.
//! * **Loops.** `for` evaluates `lo`, `hi` and `step` once, on entry; a step that is not
//!   positive is an error (even when the loop would run zero times); the trip count is
//!   computed exactly (in i128), so the counter never wraps.
//! * **Step limit.** [`RunOptions::max_steps`] bounds the number of executed instructions,
//!   summed over all work-items: each `let`, `var`, assignment, store, atomic, barrier,
//!   private array declaration, `if` test, `while` test, loop entry and loop iteration
//!   counts one. Exceeding it is an error. [`run`] sets no limit.
//! * **Deadline.** [`RunOptions::deadline`] bounds the wall-clock time: the clock is read
//!   every few thousand steps, and a launch still running past the deadline stops with an
//!   error naming the work-item it was executing. [`run`] sets none.
//! * **Errors** ([`LaunchError`], the one type of launch faults) name the kernel and, for faults during execution, the
//!   global id of the work-item: out-of-bounds loads, stores and atomics (naming the
//!   pointer, the index and the length), integer division or remainder by zero (naming the
//!   expression as the source wrote it: [`crate::Expr::fault_site`]), bad `for` steps, barrier divergence, the step limit, and every launch
//!   check above. Kernels the verifier would reject are reported as "ill-formed kernel" where
//!   the interpreter notices (names not in scope, assignment to non-`var`s, operand type
//!   mismatches, ...); the interpreter never panics on them.

mod compile;
mod exec;

use crate::kernel::Kernel;

use crate::launch::{Arg, Buffer, LaunchError, NdRange};

/// Options for [`run_with`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunOptions {
    /// The most instructions the whole launch may execute (see the module docs for what
    /// counts); `None` is unlimited. Bound it when running kernels that might not terminate.
    pub max_steps: Option<u64>,
    /// The instant after which the launch stops with an error; `None` is no deadline. It is
    /// checked every [`DEADLINE_CHECK_STEPS`] steps, so a launch overruns it by at most that
    /// many steps.
    pub deadline: Option<std::time::Instant>,
    /// Run the work-groups, and the work-items of each group between barriers, in reverse
    /// linear order instead of forward. Another valid schedule: a race-free kernel gives the
    /// same result either way, so comparing the two finds schedule-dependent kernels.
    pub reverse_order: bool,
}

/// How many steps the interpreter executes between two readings of the clock when
/// [`RunOptions::deadline`] is set: reading it on every step would dominate small steps.
pub const DEADLINE_CHECK_STEPS: u32 = 4096;

impl RunOptions {
    /// Options with a step limit.
    pub fn with_max_steps(max_steps: u64) -> RunOptions {
        RunOptions { max_steps: Some(max_steps), ..RunOptions::default() }
    }
}

/// Runs `kernel` over `range`: `args` has one entry per parameter, pointer parameters
/// naming entries of `buffers`, which the kernel reads and writes in place. No step limit.
pub fn run(
    kernel: &Kernel,
    range: &NdRange,
    args: &[Arg],
    buffers: &mut [Buffer],
) -> Result<(), LaunchError> {
    run_with(kernel, range, args, buffers, &RunOptions::default())
}

/// [`run`] with options. On error, buffers hold whatever the kernel had written before the
/// failure; nothing runs if the launch itself is rejected.
pub fn run_with(
    kernel: &Kernel,
    range: &NdRange,
    args: &[Arg],
    buffers: &mut [Buffer],
    options: &RunOptions,
) -> Result<(), LaunchError> {
    // Compiling walks expressions recursively; give it bounded depth (see crate::depth).
    let kernel = &crate::depth::bound_kernel(kernel);
    let fail = |message: String| LaunchError {
        kernel: kernel.name().to_string(),
        work_item: None,
        message,
    };
    let launch = crate::launch::resolve_launch(kernel, range).map_err(fail)?;
    let prog = compile::compile(kernel, &launch, args, buffers).map_err(fail)?;
    exec::execute(kernel, &prog, launch, buffers, options)
}
