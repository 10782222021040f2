//! # kiln-ir: the kiln intermediate representation
//!
//! An immutable, reference-counted IR for data-parallel kernels in the spirit of oneDNN's GPU
//! JIT IR: [`Expr`] (pure expressions), [`Stmt`] (statements), [`Func`] (side-effecting
//! operations used by call statements), [`Kernel`] and [`Module`]. Handles are cheap to clone
//! (`Arc` inside) and compare structurally; [`Visitor`] and [`Mutator`] walk them.
//! Every object prints in the text format (`.kir`, see `docs/ir-syntax.md`) through
//! `Display`, and `dump()` prints it to stderr from a debugger.
//!
//! ```
//! use kiln_ir::{Expr, Type, Var};
//! let a = Var::new("a", Type::I32);
//! let b = Var::new("b", Type::I32);
//! let e = 2 * (&a + &b) - a.expr();
//! assert_eq!(e.to_string(), "2 * (a + b) - a");
//! ```
//!
//! ## Semantics
//!
//! The reference interpreter ([`interp`]) defines what a kernel means; every pass and backend
//! is tested against it. In words:
//!
//! * **Work-items.** A kernel runs once per work-item of an nd-range of 1 to 3 dimensions.
//!   Dimension 0 varies fastest. `global_id(d) = global_offset(d) + group_id(d) *
//!   local_size(d) + local_id(d)`; the global linear id is `x + gs0 * (y + gs1 * z)` over ids
//!   relative to the offset. The global size must be a multiple of the local size in every
//!   dimension. Without an explicit local size, [`launch::default_local_size`] picks one.
//!   Unused dimensions have size 1 and offset 0. All built-ins are `u32`.
//! * **Integers** wrap (two's complement). Division truncates toward zero and the remainder
//!   takes the dividend's sign; `MIN / -1` wraps to `MIN` and `MIN % -1` is 0. Division or
//!   remainder by zero is an error. Shift amounts are taken modulo the bit width; `>>` is
//!   arithmetic on signed and logical on unsigned types.
//! * **Floats** are IEEE-754 binary32/binary64 with round-to-nearest-even and no
//!   reassociation or contraction (`fma` is explicit) unless the kernel is `#fast_math`.
//!   `f16` and `bf16` are storage types: they can be loaded, stored and cast, not computed
//!   with (casts to them round to nearest even, once, from any type).
//! * **Matrix operations** ([`matrix`]) act on fragments held by a sub-group of 32
//!   consecutive work-items, which must execute them together with equal operands.
//! * **Casts** between integers wrap; float to integer rounds toward zero and saturates, NaN
//!   giving 0; integer to float rounds to nearest; anything to `bool` is `!= 0`; `bool` to a
//!   number is 0 or 1.
//! * **Expressions** are pure and every operand is evaluated: `&&`, `||` and `?:` do not
//!   short-circuit, so an out-of-bounds load under a false condition is still an error.
//! * **Memory.** Pointer parameters refer to buffers the caller binds (two parameters may
//!   bind the same buffer). `local` arrays are shared by the work-items of one work-group and
//!   `private` arrays belong to one work-item; both start zeroed. An access outside a buffer
//!   or array is an error naming the kernel, the access and the work-item.
//! * **Barriers** synchronize all work-items of a work-group; a barrier that some work-items
//!   of a group reach while others finish or wait at a different barrier is an error.
//!   Between barriers, work-items of a group run in an unspecified order, so a kernel whose
//!   result depends on that order (a data race) has no defined result.
//! * **Atomics** act on one element of global or local memory, indivisibly, and yield the
//!   old value.
//! * **Loops.** `for v in lo .. hi step s` evaluates `lo`, `hi` and `s` once; `s` must be
//!   positive (an error otherwise) and `v` takes `lo, lo+s, ...` while below `hi`, with no
//!   wrap-around.

#![warn(missing_docs)]

pub mod check;
pub mod depth;
pub mod diag;
pub mod eval;
pub mod expr;
pub mod interp;
pub mod kernel;
pub mod launch;
pub mod matrix;
pub mod ops;
pub mod parse;
pub mod print;
pub mod scope;
pub mod stmt;
#[cfg(feature = "testing")]
pub mod testing;
pub mod types;
pub mod verify;
pub mod visit;
pub mod warpgroup;

pub use check::check_source;
pub use diag::{Diagnostic, Span, Spans};
pub use expr::{BinOp, Builtin, Expr, ExprNode, Imm, IntoOperand, Intrinsic, UnOp, Var};
pub use kernel::{Attrs, FusedArg, FusedAttr, Kernel, Module, NdRangeAttr};
pub use matrix::{Frag, FragRole, Layout, MatShape, MatrixOp};
pub use parse::{parse_file, parse_module, Parsed};
pub use stmt::{AtomicOp, Func, FuncKind, MemFence, Stmt, StmtNode};
pub use types::{AddrSpace, Scalar, Type, VECTOR_LANES};
pub use verify::{verify_kernel, verify_module, ToVerified, Verified, VerifyError};
pub use visit::{
    walk_expr, walk_mutate_expr, walk_mutate_kernel, walk_mutate_nested, walk_mutate_stmt,
    walk_mutate_stmt_changed, walk_stmt, Mutator, Visitor,
};

// Keep every `dump()` in any binary that links kiln-ir, even one that never calls it, so that
// a debugger can always `call e.dump()`: the linker would otherwise drop them as unused.
#[used]
static KEEP_EXPR_DUMP: fn(&Expr) = Expr::dump;
#[used]
static KEEP_STMT_DUMP: fn(&Stmt) = Stmt::dump;
#[used]
static KEEP_KERNEL_DUMP: fn(&Kernel) = Kernel::dump;
#[used]
static KEEP_MODULE_DUMP: fn(&Module) = Module::dump;
#[used]
static KEEP_VAR_DUMP: fn(&Var) = Var::dump;
#[used]
static KEEP_FUNC_DUMP: fn(&Func) = Func::dump;

/// A map keyed by expressions, compared structurally.
pub type ExprMap<V> = hashbrown::HashMap<Expr, V>;
/// A set of expressions, compared structurally.
pub type ExprSet = hashbrown::HashSet<Expr>;
