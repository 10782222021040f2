//! The reference interpreter: the semantic definition of kiln.
//!
//! [`run`] executes a kernel over an [`NdRange`] with real work-group semantics, on buffers
//! the caller owns; every pass and backend is tested against it. The crate docs ("Semantics")
//! say what kernels mean; this module adds the details they leave open.
//!
//! ```
//! use kiln_ir::interp::{run, Arg, Buffer, NdRange};
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
//!   parameters may bind the same buffer, and then see each other's stores.
//! * **Default local size.** With no local size given and no `#reqd_work_group_size`,
//!   [`default_local_size`] is used: dimension 0 gets the largest divisor of its global size
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
//!   `-` only change the sign bit. `exp`, `log`, `sin` and `cos` use the host's libm and are
//!   approximate ([`crate::Intrinsic::is_approximate`]); backends may differ by a few ulps.
//!   The sign and payload of a NaN result are unspecified (compare NaNs as equal to each
//!   other); loading and storing f32 may quiet a signalling NaN. f16 values only move:
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
//! * **Errors** ([`InterpError`]) name the kernel and, for faults during execution, the
//!   global id of the work-item: out-of-bounds loads, stores and atomics (naming the
//!   pointer, the index and the length), integer division or remainder by zero (naming the
//!   expression), bad `for` steps, barrier divergence, the step limit, and every launch
//!   check above. Kernels the verifier would reject are reported as "ill-formed kernel" where
//!   the interpreter notices (names not in scope, assignment to non-`var`s, operand type
//!   mismatches, ...); the interpreter never panics on them.

mod buffer;
mod compile;
mod exec;
mod ops;

use std::fmt;

use crate::expr::Imm;
use crate::kernel::Kernel;

pub use buffer::{Buffer, BufferError, Element};

/// An nd-range: 1 to 3 dimensions of global size, optional local size, and offset.
///
/// ```
/// use kiln_ir::interp::NdRange;
/// let r = NdRange::new(&[8, 4]).with_local(&[4, 2]).with_offset(&[1, 0]);
/// assert_eq!((r.dims, r.global, r.local, r.offset), (2, [8, 4, 1], Some([4, 2, 1]), [1, 0, 0]));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NdRange {
    /// Number of dimensions, 1..=3.
    pub dims: usize,
    /// Global size per dimension (1 in unused dimensions).
    pub global: [u32; 3],
    /// Work-group size per dimension; `None` lets the device choose.
    pub local: Option<[u32; 3]>,
    /// Global offset per dimension (0 in unused dimensions).
    pub offset: [u32; 3],
}

/// Copies up to three entries of `v` over `fill`.
fn pad3(v: &[u32], fill: u32) -> [u32; 3] {
    let mut out = [fill; 3];
    for (o, x) in out.iter_mut().zip(v) {
        *o = *x;
    }
    out
}

impl NdRange {
    /// A range of the given global size, one entry per dimension, with no offset and the
    /// local size left to the device. A slice of length 0 or more than 3 gives a range that
    /// [`run`] rejects.
    pub fn new(global: &[u32]) -> NdRange {
        NdRange { dims: global.len(), global: pad3(global, 1), local: None, offset: [0; 3] }
    }

    /// The same range with the given work-group size (missing dimensions are 1).
    pub fn with_local(mut self, local: &[u32]) -> NdRange {
        self.local = Some(pad3(local, 1));
        self
    }

    /// The same range with the given global offset (missing dimensions are 0).
    pub fn with_offset(mut self, offset: &[u32]) -> NdRange {
        self.offset = pad3(offset, 0);
        self
    }

    /// The total number of work-items (the product of the used global sizes).
    pub fn work_items(&self) -> u64 {
        self.global.iter().take(self.dims.min(3)).map(|&g| g as u64).product()
    }
}

/// A kernel argument: a scalar value, or the index of a buffer in the buffer list.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    /// A scalar parameter's value.
    Scalar(Imm),
    /// A pointer parameter bound to `buffers[i]`.
    Buffer(usize),
}

impl Arg {
    /// A scalar argument from a Rust value (`Arg::scalar(2.5f32)`).
    pub fn scalar<T: Element>(v: T) -> Arg {
        Arg::Scalar(v.to_imm())
    }
}

/// A run-time error, naming the kernel and (when it is about one) the work-item.
///
/// Displays as ``kernel `saxpy`, work-item (17, 0, 0): load `x[17]` out of bounds (buffer
/// has 16 elements)``, or ``kernel `saxpy`: ...`` for errors about the whole launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterpError {
    /// The kernel's name.
    pub kernel: String,
    /// The global id of the failing work-item.
    pub work_item: Option<[u32; 3]>,
    /// What went wrong.
    pub message: String,
}

impl fmt::Display for InterpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kernel `{}`", self.kernel)?;
        if let Some([x, y, z]) = self.work_item {
            write!(f, ", work-item ({x}, {y}, {z})")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for InterpError {}

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
) -> Result<(), InterpError> {
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
) -> Result<(), InterpError> {
    // Compiling walks expressions recursively; give it bounded depth (see crate::depth).
    let kernel = &crate::depth::bound_kernel(kernel);
    let fail = |message: String| InterpError {
        kernel: kernel.name().to_string(),
        work_item: None,
        message,
    };
    let launch = exec::resolve_launch(kernel, range).map_err(fail)?;
    let prog = compile::compile(kernel, &launch, args, buffers).map_err(fail)?;
    exec::execute(kernel, &prog, launch, buffers, options)
}

/// The local size used when none is given and the kernel has no `#reqd_work_group_size`:
/// dimension 0 gets the largest divisor of its global size that is at most 64 (1 for a
/// global size of 0), the other dimensions get 1.
///
/// ```
/// use kiln_ir::interp::default_local_size;
/// assert_eq!(default_local_size([1000, 7, 3]), [50, 1, 1]);
/// assert_eq!(default_local_size([256, 1, 1]), [64, 1, 1]);
/// assert_eq!(default_local_size([97, 1, 1]), [1, 1, 1]);
/// ```
pub fn default_local_size(global: [u32; 3]) -> [u32; 3] {
    let g = global[0];
    let l0 = (1..=g.min(64)).rev().find(|&l| g % l < 1).unwrap_or(1);
    [l0, 1, 1]
}

/// The interpreter's scalar semantics, for constant folding in passes: exactly what the
/// interpreter does to operand values (division and remainder by zero are `Err`).
pub mod scalar {
    use crate::expr::{BinOp, Imm, Intrinsic, UnOp};
    use crate::types::Scalar;

    /// `op a`.
    pub fn unary(op: UnOp, a: Imm) -> Result<Imm, String> {
        super::ops::unary(op, a)
    }

    /// `a op b`; division or remainder by zero is an `Err`.
    pub fn binary(op: BinOp, a: Imm, b: Imm) -> Result<Imm, String> {
        super::ops::binary(op, a, b)
    }

    /// `a as to`.
    pub fn cast(to: Scalar, a: Imm) -> Imm {
        super::ops::cast(to, a)
    }

    /// An intrinsic call.
    pub fn intrinsic(op: Intrinsic, args: &[Imm]) -> Result<Imm, String> {
        super::ops::intrinsic(op, args)
    }
}
