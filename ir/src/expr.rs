//! Expressions: immutable, reference-counted, structurally comparable trees.
//!
//! An [`Expr`] is a cheap-to-clone handle (an `Arc`) over an [`ExprNode`]. Expressions are
//! pure: evaluating one has no side effect, and every operand is always evaluated (there is
//! no short-circuit; guard a load with an `if` statement, not with `&&`). Side effects
//! (barriers, atomics) are call *statements*, see [`crate::Stmt`].
//!
//! Operators build expressions, as in oneDNN: `2 * (a.clone() + b) - a` is an `Expr`.
//! Comparisons are methods ([`Expr::cmp_lt`], ...), because Rust's `==` must return `bool`;
//! `==` on two `Expr`s is structural equality, the same as [`Expr::is_equal`].

use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;

use smallvec::SmallVec;

use crate::types::{Scalar, Type};

/// A named, typed variable: a kernel parameter, a `let`/`var` binding, a loop counter, an
/// array allocation (pointer-typed) or the result of a call statement.
///
/// Variables are identified by name and type; within one kernel a name is bound at most once
/// in any scope (the verifier rejects shadowing), so names are unambiguous.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Var {
    name: Arc<str>,
    ty: Type,
}

impl Var {
    /// A variable of the given name and type.
    pub fn new(name: impl AsRef<str>, ty: Type) -> Var {
        Var { name: Arc::from(name.as_ref()), ty }
    }

    /// The variable's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The variable's name as the shared string it holds: a map keyed by names can take a
    /// copy of it without allocating.
    pub fn name_arc(&self) -> &Arc<str> {
        &self.name
    }

    /// Prints the variable as a declaration (`name: type`, as a parameter is written) to
    /// stderr. Meant for debuggers: `call kiln_ir::expr::Var::dump(&v)` in gdb.
    #[inline(never)]
    pub fn dump(&self) {
        eprintln!("{self:?}");
    }

    /// The variable's type.
    pub fn ty(&self) -> Type {
        self.ty
    }

    /// This variable as an expression.
    pub fn expr(&self) -> Expr {
        Expr::var(self)
    }

    /// A load `self[index]` (this variable must be a pointer).
    pub fn load(&self, index: impl Into<Expr>) -> Expr {
        Expr::load(self, index)
    }
}

impl fmt::Debug for Var {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.name, self.ty)
    }
}

impl fmt::Display for Var {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// An immediate (constant) value of a scalar type.
///
/// Integers are kept canonical: the bit pattern sign-extended (signed types) or zero-extended
/// (unsigned types) to 64 bits. Floats are kept as `f64` holding a value exactly representable
/// in their type; an f16 or f32 NaN as the `f64` NaN with its sign and payload (quiet bit
/// included) at the top ([`float_from_bits`]), so a signalling NaN keeps every bit while it
/// is only moved. Equality and hashing are bitwise, so `-0.0 != 0.0` and a NaN equals itself.
#[derive(Clone, Copy, Debug)]
pub enum Imm {
    /// A `bool`.
    Bool(bool),
    /// An integer of the given type, canonical bits.
    Int(Scalar, u64),
    /// A float of the given type.
    Float(Scalar, f64),
}

impl Imm {
    /// An integer immediate; the value wraps to the type's width (two's complement).
    pub fn int(ty: Scalar, value: i128) -> Imm {
        debug_assert!(ty.is_int(), "Imm::int of non-integer type {ty}");
        Imm::Int(ty, canonical_int(ty, value as u64))
    }

    /// A float immediate; the value is rounded to the type's precision.
    pub fn float(ty: Scalar, value: f64) -> Imm {
        debug_assert!(ty.is_float(), "Imm::float of non-float type {ty}");
        Imm::Float(ty, round_float(ty, value))
    }

    /// The immediate of type `ty` whose bits are the low bits of `bits` (a `bool` is true when
    /// they are not 0). Exact: a float keeps every bit, a signalling NaN included
    /// ([`float_from_bits`]).
    pub fn from_bits(ty: Scalar, bits: u64) -> Imm {
        match ty {
            Scalar::Bool => Imm::Bool(bits & 0xff != 0),
            t if t.is_float() => Imm::Float(t, float_from_bits(t, bits)),
            t => Imm::Int(t, canonical_int(t, bits)),
        }
    }

    /// The immediate's bits in its type, zero-extended to 64 (`bool`: 0 or 1): what a buffer
    /// element of its type holds. The inverse of [`Imm::from_bits`].
    pub fn to_bits(&self) -> u64 {
        match *self {
            Imm::Bool(b) => b as u64,
            Imm::Int(t, bits) if t.bits() < 64 => bits & ((1u64 << t.bits()) - 1),
            Imm::Int(_, bits) => bits,
            Imm::Float(t, v) => float_to_bits(t, v),
        }
    }

    /// The immediate's scalar type.
    pub fn scalar(&self) -> Scalar {
        match *self {
            Imm::Bool(_) => Scalar::Bool,
            Imm::Int(t, _) | Imm::Float(t, _) => t,
        }
    }

    /// An integer immediate's mathematical value.
    pub fn as_i128(&self) -> Option<i128> {
        match *self {
            Imm::Int(t, bits) if t.is_signed() => Some(bits as i64 as i128),
            Imm::Int(_, bits) => Some(bits as i128),
            _ => None,
        }
    }

    /// A float immediate's value.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Imm::Float(_, v) => Some(v),
            _ => None,
        }
    }

    /// True if this is the value zero of its type (`false`, `0`, `+0.0` or `-0.0`).
    pub fn is_zero(&self) -> bool {
        match *self {
            Imm::Bool(b) => !b,
            Imm::Int(_, bits) => bits == 0,
            Imm::Float(_, v) => v == 0.0,
        }
    }

    fn key(&self) -> (Scalar, u64) {
        match *self {
            Imm::Bool(b) => (Scalar::Bool, b as u64),
            Imm::Int(t, bits) => (t, bits),
            Imm::Float(t, v) => (t, v.to_bits()),
        }
    }
}

impl PartialEq for Imm {
    fn eq(&self, other: &Imm) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Imm {}

impl Hash for Imm {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key().hash(state)
    }
}

/// Wraps the low bits of `bits` to `ty`'s width and extends them to the canonical 64 bits.
pub fn canonical_int(ty: Scalar, bits: u64) -> u64 {
    let w = ty.bits();
    if w >= 64 {
        return bits;
    }
    let mask = (1u64 << w) - 1;
    let low = bits & mask;
    if ty.is_signed() && (low >> (w - 1)) & 1 == 1 {
        low | !mask
    } else {
        low
    }
}

/// Rounds `v` to the nearest value of float type `ty` (round-to-nearest-even). A NaN keeps
/// its sign and the payload bits `ty` has room for, signalling or quiet as it was (see
/// [`float_to_bits`]): rounding a value that is already of type `ty` changes no bit.
pub fn round_float(ty: Scalar, v: f64) -> f64 {
    match ty {
        _ if v.is_nan() => float_from_bits(ty, float_to_bits(ty, v)),
        Scalar::F16 => crate::types::f16_from_f64(v).to_f64(),
        Scalar::BF16 => crate::types::bf16_from_f64(v).to_f64(),
        Scalar::F32 => v as f32 as f64,
        _ => v,
    }
}

/// The payload width (explicit significand bits) of float type `ty`: 10, 7, 23 or 52.
fn payload_bits(ty: Scalar) -> u32 {
    match ty {
        Scalar::F16 => 10,
        Scalar::BF16 => 7,
        Scalar::F32 => 23,
        _ => 52,
    }
}

/// The `f64` that stands for the float of type `ty` whose bits are the low 16, 32 or 64 of
/// `bits`: how an f16 or f32 is held in [`Imm::Float`]. Every value is exact. A NaN keeps its
/// sign and its whole payload, quiet bit included, at the top of the `f64`'s payload (where a
/// hardware conversion puts it, but not made quiet), so a signalling NaN stays signalling and
/// moving a value through an `Imm` keeps every bit; [`float_to_bits`] gives them back.
///
/// ```
/// use kiln_ir::expr::{float_from_bits, float_to_bits};
/// use kiln_ir::Scalar;
/// let snan = float_from_bits(Scalar::F32, 0x7f80_0001);
/// assert!(snan.is_nan());
/// assert_eq!(float_to_bits(Scalar::F32, snan), 0x7f80_0001);
/// assert_eq!(float_to_bits(Scalar::F16, float_from_bits(Scalar::F16, 0x7c01)), 0x7c01);
/// ```
pub fn float_from_bits(ty: Scalar, bits: u64) -> f64 {
    let p = payload_bits(ty);
    if p == 52 {
        return f64::from_bits(bits);
    }
    let width = ty.bits();
    let bits = bits & ((1u64 << width) - 1);
    let exp_mask = ((1u64 << (width - 1 - p)) - 1) << p;
    let payload = bits & ((1u64 << p) - 1);
    if bits & exp_mask == exp_mask && payload != 0 {
        let sign = (bits >> (width - 1)) << 63;
        return f64::from_bits(sign | 0x7ff0_0000_0000_0000 | payload << (52 - p));
    }
    match ty {
        Scalar::F16 => half::f16::from_bits(bits as u16).to_f64(),
        Scalar::BF16 => half::bf16::from_bits(bits as u16).to_f64(),
        _ => f32::from_bits(bits as u32) as f64,
    }
}

/// The bits (zero-extended) of `v` as a float of type `ty`, the inverse of
/// [`float_from_bits`]. A value `ty` cannot hold is rounded to nearest even; a NaN keeps its
/// sign and the top payload bits `ty` has room for, and if none of those is set it gets the
/// quiet bit, so it stays a NaN.
pub fn float_to_bits(ty: Scalar, v: f64) -> u64 {
    let p = payload_bits(ty);
    if p == 52 {
        return v.to_bits();
    }
    if v.is_nan() {
        let width = ty.bits();
        let b = v.to_bits();
        let mut payload = (b & ((1u64 << 52) - 1)) >> (52 - p);
        if payload == 0 {
            payload = 1 << (p - 1);
        }
        let exp_mask = ((1u64 << (width - 1 - p)) - 1) << p;
        return (b >> 63) << (width - 1) | exp_mask | payload;
    }
    match ty {
        Scalar::F16 => crate::types::f16_from_f64(v).to_bits() as u64,
        Scalar::BF16 => crate::types::bf16_from_f64(v).to_bits() as u64,
        _ => (v as f32).to_bits() as u64,
    }
}

/// A unary operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnOp {
    /// Arithmetic negation `-a` (wrapping for integers, sign flip for floats).
    Neg,
    /// Logical not `!a` on `bool`.
    Not,
    /// Bitwise complement `~a` on integers.
    BitNot,
}

impl UnOp {
    /// The operator's text-format symbol.
    pub fn symbol(self) -> &'static str {
        match self {
            UnOp::Neg => "-",
            UnOp::Not => "!",
            UnOp::BitNot => "~",
        }
    }
}

/// A binary operator. Both operands always have the same type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/` (integers truncate toward zero; division by zero is an error)
    Div,
    /// `%` on integers (sign follows the dividend; by zero is an error)
    Rem,
    /// `&` on integers and bools
    And,
    /// `|` on integers and bools
    Or,
    /// `^` on integers and bools
    Xor,
    /// `<<`, amount taken modulo the bit width
    Shl,
    /// `>>`, arithmetic on signed and logical on unsigned; amount modulo the bit width
    Shr,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `&&` on bools (both operands are evaluated)
    LogicAnd,
    /// `||` on bools (both operands are evaluated)
    LogicOr,
}

impl BinOp {
    /// Every binary operator.
    pub const ALL: [BinOp; 18] = [
        BinOp::Add,
        BinOp::Sub,
        BinOp::Mul,
        BinOp::Div,
        BinOp::Rem,
        BinOp::And,
        BinOp::Or,
        BinOp::Xor,
        BinOp::Shl,
        BinOp::Shr,
        BinOp::Eq,
        BinOp::Ne,
        BinOp::Lt,
        BinOp::Le,
        BinOp::Gt,
        BinOp::Ge,
        BinOp::LogicAnd,
        BinOp::LogicOr,
    ];

    /// The operator's text-format symbol.
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::And => "&",
            BinOp::Or => "|",
            BinOp::Xor => "^",
            BinOp::Shl => "<<",
            BinOp::Shr => ">>",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::LogicAnd => "&&",
            BinOp::LogicOr => "||",
        }
    }

    /// C precedence: higher binds tighter. `?:` is 1, `||` is 2, ..., `* / %` is 11.
    pub fn precedence(self) -> u8 {
        match self {
            BinOp::LogicOr => 2,
            BinOp::LogicAnd => 3,
            BinOp::Or => 4,
            BinOp::Xor => 5,
            BinOp::And => 6,
            BinOp::Eq | BinOp::Ne => 7,
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => 8,
            BinOp::Shl | BinOp::Shr => 9,
            BinOp::Add | BinOp::Sub => 10,
            BinOp::Mul | BinOp::Div | BinOp::Rem => 11,
        }
    }

    /// True for `== != < <= > >=`, whose result is `bool`.
    pub fn is_comparison(self) -> bool {
        matches!(self, BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge)
    }

    /// True for `&&` and `||`.
    pub fn is_logical(self) -> bool {
        matches!(self, BinOp::LogicAnd | BinOp::LogicOr)
    }
}

/// A work-item built-in. Each takes a dimension 0..=2 and yields a `u32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Builtin {
    /// `global_id(d)` = `global_offset(d) + group_id(d) * local_size(d) + local_id(d)`
    GlobalId,
    /// `local_id(d)`: the work-item's index within its work-group
    LocalId,
    /// `group_id(d)`: the work-group's index
    GroupId,
    /// `global_size(d)`: the number of work-items in dimension d
    GlobalSize,
    /// `local_size(d)`: the work-group size in dimension d
    LocalSize,
    /// `num_groups(d)` = `global_size(d) / local_size(d)`
    NumGroups,
    /// `global_offset(d)`: the nd-range's offset
    GlobalOffset,
}

impl Builtin {
    /// Every built-in.
    pub const ALL: [Builtin; 7] = [
        Builtin::GlobalId,
        Builtin::LocalId,
        Builtin::GroupId,
        Builtin::GlobalSize,
        Builtin::LocalSize,
        Builtin::NumGroups,
        Builtin::GlobalOffset,
    ];

    /// The text-format name.
    pub fn name(self) -> &'static str {
        match self {
            Builtin::GlobalId => "global_id",
            Builtin::LocalId => "local_id",
            Builtin::GroupId => "group_id",
            Builtin::GlobalSize => "global_size",
            Builtin::LocalSize => "local_size",
            Builtin::NumGroups => "num_groups",
            Builtin::GlobalOffset => "global_offset",
        }
    }

    /// Parses a text-format name.
    pub fn from_name(name: &str) -> Option<Builtin> {
        Builtin::ALL.into_iter().find(|b| b.name() == name)
    }
}

/// A pure intrinsic function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Intrinsic {
    /// `min(a, b)`; on floats a NaN operand yields the other operand, and -0.0 < +0.0.
    Min,
    /// `max(a, b)`; on floats a NaN operand yields the other operand, and -0.0 < +0.0.
    Max,
    /// `abs(a)`; wrapping on signed integers (`abs(i32::MIN) == i32::MIN`).
    Abs,
    /// `fma(a, b, c)` = a * b + c with a single rounding (floats only).
    Fma,
    /// `sqrt(a)`, correctly rounded (floats only).
    Sqrt,
    /// `floor(a)` (floats only).
    Floor,
    /// `ceil(a)` (floats only).
    Ceil,
    /// `trunc(a)`: round toward zero (floats only).
    Trunc,
    /// `exp(a)`, approximate (floats only).
    Exp,
    /// `log(a)`: natural logarithm, approximate (floats only).
    Log,
    /// `sin(a)`, approximate (floats only).
    Sin,
    /// `cos(a)`, approximate (floats only).
    Cos,
    /// `mad(a, b, c)` = a * b + c, wrapping (integers only); the exact integer
    /// multiply-add that peephole fusion forms and backends lower to one instruction.
    Mad,
    /// `add3(a, b, c)` = a + b + c, wrapping (integers only); the three-input add that
    /// peephole fusion forms.
    Add3,
}

impl Intrinsic {
    /// Every intrinsic.
    pub const ALL: [Intrinsic; 14] = [
        Intrinsic::Min,
        Intrinsic::Max,
        Intrinsic::Abs,
        Intrinsic::Fma,
        Intrinsic::Sqrt,
        Intrinsic::Floor,
        Intrinsic::Ceil,
        Intrinsic::Trunc,
        Intrinsic::Exp,
        Intrinsic::Log,
        Intrinsic::Sin,
        Intrinsic::Cos,
        Intrinsic::Mad,
        Intrinsic::Add3,
    ];

    /// The text-format name.
    pub fn name(self) -> &'static str {
        match self {
            Intrinsic::Min => "min",
            Intrinsic::Max => "max",
            Intrinsic::Abs => "abs",
            Intrinsic::Fma => "fma",
            Intrinsic::Sqrt => "sqrt",
            Intrinsic::Floor => "floor",
            Intrinsic::Ceil => "ceil",
            Intrinsic::Trunc => "trunc",
            Intrinsic::Exp => "exp",
            Intrinsic::Log => "log",
            Intrinsic::Sin => "sin",
            Intrinsic::Cos => "cos",
            Intrinsic::Mad => "mad",
            Intrinsic::Add3 => "add3",
        }
    }

    /// Parses a text-format name.
    pub fn from_name(name: &str) -> Option<Intrinsic> {
        Intrinsic::ALL.into_iter().find(|i| i.name() == name)
    }

    /// The number of arguments.
    pub fn arity(self) -> usize {
        match self {
            Intrinsic::Min | Intrinsic::Max => 2,
            Intrinsic::Fma | Intrinsic::Mad | Intrinsic::Add3 => 3,
            _ => 1,
        }
    }

    /// True if the intrinsic is defined on floats only (f32, f64).
    pub fn float_only(self) -> bool {
        !matches!(
            self,
            Intrinsic::Min | Intrinsic::Max | Intrinsic::Abs | Intrinsic::Mad | Intrinsic::Add3
        )
    }

    /// True if the intrinsic is defined on integers only (`mad`, `add3`).
    pub fn int_only(self) -> bool {
        matches!(self, Intrinsic::Mad | Intrinsic::Add3)
    }

    /// True if results may differ between the interpreter and a backend by a few ulps.
    pub fn is_approximate(self) -> bool {
        matches!(self, Intrinsic::Exp | Intrinsic::Log | Intrinsic::Sin | Intrinsic::Cos)
    }
}

/// The node kinds of an expression.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ExprNode {
    /// A variable reference.
    Var(Var),
    /// A constant.
    Imm(Imm),
    /// `op a`
    Unary {
        /// The operator.
        op: UnOp,
        /// The operand.
        a: Expr,
    },
    /// `a op b`
    Binary {
        /// The operator.
        op: BinOp,
        /// Left operand.
        a: Expr,
        /// Right operand.
        b: Expr,
    },
    /// `cond ? a : b` (also written `select(cond, a, b)`); both arms are evaluated.
    Select {
        /// The `bool` condition.
        cond: Expr,
        /// Value when true.
        a: Expr,
        /// Value when false.
        b: Expr,
    },
    /// `a as to`: integer casts wrap; float to integer truncates toward zero and saturates
    /// (NaN gives 0); to `bool` means `!= 0`; from `bool` gives 0 or 1.
    Cast {
        /// The target type.
        to: Scalar,
        /// The operand.
        a: Expr,
    },
    /// `buf[index]`: element `index` of the buffer or array `buf` points to.
    Load {
        /// A pointer-typed variable.
        buf: Var,
        /// An integer element index.
        index: Expr,
    },
    /// A work-item built-in such as `global_id(0)`.
    Builtin {
        /// Which built-in.
        kind: Builtin,
        /// The dimension, 0..=2.
        dim: u8,
    },
    /// A pure intrinsic call such as `min(a, b)`.
    Intrinsic {
        /// Which intrinsic.
        op: Intrinsic,
        /// Its arguments.
        args: SmallVec<[Expr; 3]>,
    },
    /// `vload4(buf, index)`: the `lanes` contiguous elements `buf[index] ..
    /// buf[index + lanes - 1]` as one vector. `index` must be a multiple of `lanes` (the
    /// access is then aligned to the vector's size); a misaligned index is an error.
    VecLoad {
        /// A pointer-typed variable.
        buf: Var,
        /// The integer element index of lane 0.
        index: Expr,
        /// The lane count (2, 4 or 8).
        lanes: u8,
    },
    /// `extract(v, lane)`: one lane of a vector, a scalar.
    Extract {
        /// The vector.
        a: Expr,
        /// The lane, a constant below the vector's lane count.
        lane: u8,
    },
    /// `insert(v, lane, x)`: the vector `v` with lane `lane` replaced by the scalar `x`.
    Insert {
        /// The vector.
        a: Expr,
        /// The lane, a constant below the vector's lane count.
        lane: u8,
        /// The new lane value, of the vector's element type.
        b: Expr,
    },
    /// `f32x4(a, b, c, d)` builds a vector from one scalar per lane; `f32x4(a)` with a
    /// single element broadcasts it to every lane (`elems` then holds one expression).
    Vector {
        /// The vector type built.
        ty: Type,
        /// One scalar per lane, or one scalar for every lane.
        elems: SmallVec<[Expr; 4]>,
    },
}

struct ExprData {
    ty: Type,
    hash: u64,
    /// Nodes on the longest path to a leaf (a leaf is 1), kept so that depth checks are O(1).
    depth: u32,
    /// Nodes in the tree (a shared operand counts each time it occurs), saturating.
    size: u32,
    /// Whether evaluating the expression may be an error (see [`Expr::may_fail`]), kept
    /// because passes ask it of every operand they move.
    may_fail: bool,
    /// The binary operators in the tree, one bit each ([`binop_bit`]), kept so that a pass
    /// can skip a subtree without the operator it rewrites ([`Expr::has_binary`]).
    binops: u32,
    /// Whether the tree has a vector-typed node (a lane read's vector operand included),
    /// kept so that vector lowering skips scalar trees in O(1) ([`Expr::has_vector`]).
    vector: bool,
    /// Whether the tree has an operator node whose operands are all constants
    /// ([`Expr::has_constant_operands`]).
    const_operands: bool,
    /// Whether the tree has a work-item built-in node ([`Expr::has_builtin`]).
    builtin: bool,
    /// Whether the tree has no constant and no operator that folding rewrites
    /// ([`Expr::is_opaque`]).
    opaque: bool,
    /// The [`name_bit`]s of the variables the tree refers to ([`Expr::name_bits`]).
    names: u64,
    node: ExprNode,
    /// How error messages name the source construct this node was derived from (see
    /// [`Expr::origin`]); not part of equality, hashing or printing.
    origin: Option<Arc<str>>,
}

/// An immutable, reference-counted expression handle. Cloning is cheap; equality and hashing
/// are structural (with a cached hash, so map lookups do not walk the tree).
#[derive(Clone)]
pub struct Expr(Arc<ExprData>);

pub use crate::ops::IntoOperand;

impl Expr {
    /// Wraps a node, computing its type from its operands. Ill-typed nodes can be built (the
    /// verifier reports them); their type is then the first operand's.
    pub fn new(node: ExprNode) -> Expr {
        let ty = match &node {
            ExprNode::Var(v) => v.ty(),
            ExprNode::Imm(i) => Type::Scalar(i.scalar()),
            // Lane-wise on vectors: a compare of `f32x4`s is a `boolx4` mask, a cast of one
            // casts each lane.
            ExprNode::Unary { op: UnOp::Not, a } => a.ty().with_lanes_of(Scalar::Bool),
            ExprNode::Unary { a, .. } => a.ty(),
            ExprNode::Binary { op, a, .. } => {
                if op.is_comparison() || op.is_logical() {
                    a.ty().with_lanes_of(Scalar::Bool)
                } else {
                    a.ty()
                }
            }
            ExprNode::Select { a, .. } => a.ty(),
            ExprNode::Cast { to, a } => a.ty().with_lanes_of(*to),
            ExprNode::Load { buf, .. } => match buf.ty() {
                Type::Ptr(_, elem) => Type::Scalar(elem),
                t => t,
            },
            ExprNode::Builtin { .. } => Type::U32,
            ExprNode::Intrinsic { args, .. } => args.first().map_or(Type::I32, Expr::ty),
            ExprNode::VecLoad { buf, lanes, .. } => match buf.ty() {
                Type::Ptr(_, elem) => Type::Vector(elem, *lanes),
                t => t,
            },
            ExprNode::Extract { a, .. } => match a.ty() {
                Type::Vector(elem, _) => Type::Scalar(elem),
                t => t,
            },
            ExprNode::Insert { a, .. } => a.ty(),
            ExprNode::Vector { ty, .. } => *ty,
        };
        // Fixed seed: a structural hash is the same in every process (keys built from it,
        // such as fusion keys, stay stable); foldhash, not std's SipHash, because every node
        // built pays for it.
        let hash = foldhash::fast::FixedState::with_seed(STRUCTURAL_SEED).hash_one(&node);
        // One pass over the operands for every summary (a pass per summary, over a list of
        // them built first, was most of what building a node cost besides its allocation).
        let (depth, size, may_fail, binops, vector, const_operands, builtin, opaque, names) = {
            let kids = node_operands(&node);
            let (mut depth, mut size, mut binops, mut names) = (0u32, 1u32, 0u32, 0u64);
            let (mut may_fail, mut vector, mut const_operands) = (false, ty.is_vector(), false);
            let mut builtin = matches!(node, ExprNode::Builtin { .. });
            let (mut all_imm, mut kids_opaque) = (true, true);
            for c in kids.0.into_iter().flatten().chain(kids.1) {
                let d = &c.0;
                depth = depth.max(d.depth);
                size = size.saturating_add(d.size);
                binops |= d.binops;
                names |= d.names;
                may_fail |= d.may_fail;
                vector |= d.vector;
                const_operands |= d.const_operands;
                builtin |= d.builtin;
                all_imm &= c.as_imm().is_some();
                kids_opaque &= d.opaque;
            }
            let opaque = kids_opaque
                && match &node {
                    ExprNode::Var(_)
                    | ExprNode::Builtin { .. }
                    | ExprNode::Load { .. }
                    | ExprNode::VecLoad { .. }
                    | ExprNode::Extract { .. }
                    | ExprNode::Insert { .. }
                    | ExprNode::Vector { .. } => true,
                    ExprNode::Cast { a, .. } => a.ty() != ty,
                    ExprNode::Intrinsic { op, args } => {
                        !matches!(op, Intrinsic::Min | Intrinsic::Max) && !args.is_empty()
                    }
                    ExprNode::Imm(_)
                    | ExprNode::Unary { .. }
                    | ExprNode::Binary { .. }
                    | ExprNode::Select { .. } => false,
                };
            let (own_binop, own_name) = match &node {
                ExprNode::Binary { op, .. } => (binop_bit(*op), 0),
                ExprNode::Var(v)
                | ExprNode::Load { buf: v, .. }
                | ExprNode::VecLoad { buf: v, .. } => (0, name_bit(v.name())),
                _ => (0, 0),
            };
            let operator = matches!(
                &node,
                ExprNode::Unary { .. }
                    | ExprNode::Binary { .. }
                    | ExprNode::Select { .. }
                    | ExprNode::Cast { .. }
                    | ExprNode::Intrinsic { .. }
            );
            (
                depth + 1,
                size,
                fails_itself(&node, ty) || may_fail,
                binops | own_binop,
                vector,
                (operator && all_imm) || const_operands,
                builtin,
                opaque,
                names | own_name,
            )
        };
        Expr(Arc::new(ExprData {
            ty,
            hash,
            depth,
            size,
            may_fail,
            binops,
            vector,
            const_operands,
            builtin,
            opaque,
            names,
            node,
            origin: None,
        }))
    }

    /// `node`, a rebuilt version of this node (same kind, new operands), keeping this node's
    /// [`Expr::origin`]. Passes that rewrite operands use it so that a fault site keeps
    /// naming its source.
    pub fn rebuild(&self, node: ExprNode) -> Expr {
        let e = Expr::new(node);
        match &self.0.origin {
            Some(o) => e.with_origin(o.clone()),
            None => e,
        }
    }

    /// How an error names this node's source, when a pass recorded it: the source
    /// expression in backticks (`` `x[i] / a[(i + 1) % 8]` ``), or ``a lane of `v / w` ``
    /// for one lane of a vector operation. The optimizer records it on the nodes that can
    /// fault (integer division and remainder) before rewriting them, so that their errors
    /// quote the source as the interpreter does. It takes no part in equality, hashing or
    /// printing, so it does not survive printing and parsing back.
    pub fn origin(&self) -> Option<&str> {
        self.0.origin.as_deref()
    }

    /// This expression with the [`Expr::origin`] of `from`, if it has one (a node that
    /// replaces `from` and stands for the same source, such as one lane of it).
    pub fn with_origin_of(&self, from: &Expr) -> Expr {
        match &from.0.origin {
            Some(o) => self.with_origin(o.clone()),
            None => self.clone(),
        }
    }

    /// This expression with `origin` recorded as its [`Expr::origin`] (equal to `self`).
    pub fn with_origin(&self, origin: Arc<str>) -> Expr {
        if self.0.origin.as_ref().is_some_and(|o| **o == *origin) {
            return self.clone();
        }
        let d = &self.0;
        Expr(Arc::new(ExprData {
            ty: d.ty,
            hash: d.hash,
            depth: d.depth,
            size: d.size,
            may_fail: d.may_fail,
            binops: d.binops,
            vector: d.vector,
            const_operands: d.const_operands,
            builtin: d.builtin,
            opaque: d.opaque,
            names: d.names,
            node: d.node.clone(),
            origin: Some(origin),
        }))
    }

    /// How a fault message names this expression (`integer division by zero in {site}`):
    /// its [`Expr::origin`] if it has one, else its text in backticks, as ``a lane of `e` ``
    /// for a vector.
    pub fn fault_site(&self) -> String {
        match (self.origin(), self.ty().is_vector()) {
            (Some(o), _) => o.to_string(),
            (None, true) => format!("a lane of `{self}`"),
            (None, false) => format!("`{self}`"),
        }
    }

    /// Nodes on the longest path from this expression to a leaf: a variable or constant is 1,
    /// `a + b` is one more than the deeper operand. Cached, so this is O(1).
    pub fn depth(&self) -> usize {
        self.0.depth as usize
    }

    /// True if evaluating this expression may be an error (an observable result, which a
    /// rewrite must keep): it contains a load, or an integer division or remainder whose
    /// divisor is not a non-zero constant ([`Expr::is_fault_division`]). O(1).
    pub fn may_fail(&self) -> bool {
        self.0.may_fail
    }

    /// True if this node is an integer division or remainder (lane-wise on vectors) whose
    /// divisor is not a non-zero constant: evaluating it may be a division by zero.
    pub fn is_fault_division(&self) -> bool {
        fails_itself(&self.0.node, self.0.ty) && matches!(self.0.node, ExprNode::Binary { .. })
    }

    /// True if this expression or one of its subexpressions is the binary operation `op`.
    /// O(1) (kept per node): a pass that rewrites only `op` skips the subtrees without one.
    pub fn has_binary(&self, op: BinOp) -> bool {
        self.0.binops & binop_bit(op) != 0
    }

    /// True if this expression or one of its subexpressions has a vector type (so a lane
    /// read, `extract(v, k)`, has one: its operand `v`). O(1) (kept per node): vector
    /// lowering skips the scalar trees, most of a kernel, without walking them.
    pub fn has_vector(&self) -> bool {
        self.0.vector
    }

    /// True if this expression or one of its subexpressions is a work-item built-in
    /// (`global_id(0)`, ...). O(1) (kept per node): a backend that lists the built-ins a
    /// kernel reads skips the trees without one, most of a kernel, without walking them.
    pub fn has_builtin(&self) -> bool {
        self.0.builtin
    }

    /// True if the tree is built only from variables, work-item built-ins, loads and vector
    /// loads, lane reads and writes, vector constructors, casts that change the type and
    /// intrinsics other than `min` and `max` (with operands): no constant and no unary,
    /// binary or select operator anywhere, so nothing in it folds or is rewritten
    /// arithmetically (the simplifier answers such a tree as it is). O(1) (kept per node).
    pub fn is_opaque(&self) -> bool {
        self.0.opaque
    }

    /// True if this expression or one of its subexpressions is an operator (unary, binary,
    /// select, cast or intrinsic) whose operands are all constants: what folding could
    /// evaluate. O(1) (kept per node): a pass that only folds and substitutes skips a
    /// subtree without one and without a variable it substitutes ([`Expr::name_bits`]).
    pub fn has_constant_operands(&self) -> bool {
        self.0.const_operands
    }

    /// The [`name_bit`]s of every variable this expression refers to (as a value or as a
    /// load's buffer), or-ed: a superset filter of its names, O(1) (kept per node). If
    /// `e.name_bits() & name_bit(n) == 0`, `e` does not refer to `n`.
    pub fn name_bits(&self) -> u64 {
        self.0.names
    }

    /// The number of nodes in this expression's tree, an operand used twice counted twice
    /// (a variable or constant is 1), saturating at `u32::MAX`. Cached, so this is O(1),
    /// where a walk of a tree with shared operands can take far longer than its handles.
    pub fn size(&self) -> usize {
        self.0.size as usize
    }

    /// The node this handle points to.
    pub fn node(&self) -> &ExprNode {
        &self.0.node
    }

    /// The expression's type.
    pub fn ty(&self) -> Type {
        self.0.ty
    }

    /// Structural equality (same as `==`); pointer-equal handles compare equal at once.
    pub fn is_equal(&self, other: &Expr) -> bool {
        self == other
    }

    /// True if both handles point to the same node (no structural comparison).
    pub fn ptr_eq(&self, other: &Expr) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The address of the node, usable as an identity key for side tables (e.g. source spans).
    pub fn addr(&self) -> usize {
        Arc::as_ptr(&self.0) as *const () as usize
    }

    /// Prints the expression in the text format to stderr. Meant for debuggers:
    /// `call kiln_ir::expr::Expr::dump(&e)` in gdb.
    #[inline(never)]
    pub fn dump(&self) {
        eprintln!("{self}");
    }

    /// A variable reference.
    pub fn var(v: &Var) -> Expr {
        Expr::new(ExprNode::Var(v.clone()))
    }

    /// A constant.
    pub fn imm(i: Imm) -> Expr {
        Expr::new(ExprNode::Imm(i))
    }

    /// A `bool` constant.
    pub fn bool(b: bool) -> Expr {
        Expr::imm(Imm::Bool(b))
    }

    /// An integer constant of type `ty` (wrapped to its width).
    pub fn int(ty: Scalar, v: i128) -> Expr {
        Expr::imm(Imm::int(ty, v))
    }

    /// A float constant of type `ty` (rounded to its precision).
    pub fn float(ty: Scalar, v: f64) -> Expr {
        Expr::imm(Imm::float(ty, v))
    }

    /// An `i32` constant.
    pub fn i32(v: i32) -> Expr {
        Expr::int(Scalar::I32, v as i128)
    }

    /// An `i64` constant.
    pub fn i64(v: i64) -> Expr {
        Expr::int(Scalar::I64, v as i128)
    }

    /// A `u32` constant.
    pub fn u32(v: u32) -> Expr {
        Expr::int(Scalar::U32, v as i128)
    }

    /// A `u64` constant.
    pub fn u64(v: u64) -> Expr {
        Expr::int(Scalar::U64, v as i128)
    }

    /// An `f32` constant.
    pub fn f32(v: f32) -> Expr {
        Expr::float(Scalar::F32, v as f64)
    }

    /// An `f64` constant.
    pub fn f64(v: f64) -> Expr {
        Expr::float(Scalar::F64, v)
    }

    /// A constant of type `ty` with the numeric value `v` (ints truncate toward zero and
    /// wrap, bools are `v != 0`). Used where a literal takes its type from context.
    pub fn constant(ty: Scalar, v: f64) -> Expr {
        if ty == Scalar::Bool {
            Expr::bool(v != 0.0)
        } else if ty.is_float() {
            Expr::float(ty, v)
        } else {
            Expr::int(ty, v as i128)
        }
    }

    /// `op a`
    pub fn unary(op: UnOp, a: impl Into<Expr>) -> Expr {
        Expr::new(ExprNode::Unary { op, a: a.into() })
    }

    /// `a op b`
    pub fn binary(op: BinOp, a: impl Into<Expr>, b: impl Into<Expr>) -> Expr {
        Expr::new(ExprNode::Binary { op, a: a.into(), b: b.into() })
    }

    /// `cond ? a : b`
    pub fn select(cond: impl Into<Expr>, a: impl Into<Expr>, b: impl Into<Expr>) -> Expr {
        Expr::new(ExprNode::Select { cond: cond.into(), a: a.into(), b: b.into() })
    }

    /// `self as to`
    pub fn cast(&self, to: Scalar) -> Expr {
        Expr::new(ExprNode::Cast { to, a: self.clone() })
    }

    /// `buf[index]`
    pub fn load(buf: &Var, index: impl Into<Expr>) -> Expr {
        Expr::new(ExprNode::Load { buf: buf.clone(), index: index.into() })
    }

    /// A work-item built-in in dimension `dim`.
    pub fn builtin(kind: Builtin, dim: u8) -> Expr {
        Expr::new(ExprNode::Builtin { kind, dim })
    }

    /// `global_id(dim)`
    pub fn global_id(dim: u8) -> Expr {
        Expr::builtin(Builtin::GlobalId, dim)
    }

    /// `local_id(dim)`
    pub fn local_id(dim: u8) -> Expr {
        Expr::builtin(Builtin::LocalId, dim)
    }

    /// `group_id(dim)`
    pub fn group_id(dim: u8) -> Expr {
        Expr::builtin(Builtin::GroupId, dim)
    }

    /// An intrinsic call.
    pub fn intrinsic(op: Intrinsic, args: impl IntoIterator<Item = Expr>) -> Expr {
        Expr::new(ExprNode::Intrinsic { op, args: args.into_iter().collect() })
    }

    /// `min(self, b)`
    pub fn min(&self, b: impl Into<Expr>) -> Expr {
        Expr::intrinsic(Intrinsic::Min, [self.clone(), b.into()])
    }

    /// `max(self, b)`
    pub fn max(&self, b: impl Into<Expr>) -> Expr {
        Expr::intrinsic(Intrinsic::Max, [self.clone(), b.into()])
    }

    /// `self == b` as an expression.
    pub fn cmp_eq(&self, b: impl IntoOperand) -> Expr {
        self.bin(BinOp::Eq, b)
    }

    /// `self != b` as an expression.
    pub fn cmp_ne(&self, b: impl IntoOperand) -> Expr {
        self.bin(BinOp::Ne, b)
    }

    /// `self < b` as an expression.
    pub fn cmp_lt(&self, b: impl IntoOperand) -> Expr {
        self.bin(BinOp::Lt, b)
    }

    /// `self <= b` as an expression.
    pub fn cmp_le(&self, b: impl IntoOperand) -> Expr {
        self.bin(BinOp::Le, b)
    }

    /// `self > b` as an expression.
    pub fn cmp_gt(&self, b: impl IntoOperand) -> Expr {
        self.bin(BinOp::Gt, b)
    }

    /// `self >= b` as an expression.
    pub fn cmp_ge(&self, b: impl IntoOperand) -> Expr {
        self.bin(BinOp::Ge, b)
    }

    /// `self && b` as an expression.
    pub fn logic_and(&self, b: impl Into<Expr>) -> Expr {
        Expr::binary(BinOp::LogicAnd, self.clone(), b)
    }

    /// `self || b` as an expression.
    pub fn logic_or(&self, b: impl Into<Expr>) -> Expr {
        Expr::binary(BinOp::LogicOr, self.clone(), b)
    }

    fn bin(&self, op: BinOp, b: impl IntoOperand) -> Expr {
        let b = b.into_operand(self.ty());
        Expr::binary(op, self.clone(), b)
    }

    /// `vloadN(buf, index)`: `lanes` contiguous elements from `buf[index]` on.
    pub fn vload(buf: &Var, index: impl Into<Expr>, lanes: u8) -> Expr {
        Expr::new(ExprNode::VecLoad { buf: buf.clone(), index: index.into(), lanes })
    }

    /// `extract(self, lane)`: one lane of a vector.
    pub fn extract(&self, lane: u8) -> Expr {
        Expr::new(ExprNode::Extract { a: self.clone(), lane })
    }

    /// `insert(self, lane, b)`: this vector with one lane replaced.
    pub fn insert(&self, lane: u8, b: impl Into<Expr>) -> Expr {
        Expr::new(ExprNode::Insert { a: self.clone(), lane, b: b.into() })
    }

    /// `f32x4(self)`: this scalar in each of `lanes` lanes.
    pub fn broadcast(&self, lanes: u8) -> Expr {
        let ty = match self.ty() {
            Type::Scalar(s) => Type::Vector(s, lanes),
            t => t,
        };
        Expr::new(ExprNode::Vector { ty, elems: smallvec::smallvec![self.clone()] })
    }

    /// `f32x4(a, b, c, d)`: a vector of one scalar per lane (at least two elements; the
    /// vector type is `elems[0]`'s type with `elems.len()` lanes).
    pub fn build_vector(elems: impl IntoIterator<Item = Expr>) -> Expr {
        let elems: SmallVec<[Expr; 4]> = elems.into_iter().collect();
        let ty = match elems.first().map(Expr::ty) {
            Some(Type::Scalar(s)) => Type::Vector(s, elems.len() as u8),
            Some(t) => t,
            None => Type::BOOL,
        };
        Expr::new(ExprNode::Vector { ty, elems })
    }

    /// The constant, if this expression is an immediate.
    pub fn as_imm(&self) -> Option<&Imm> {
        match self.node() {
            ExprNode::Imm(i) => Some(i),
            _ => None,
        }
    }

    /// The variable, if this expression is a variable reference.
    pub fn as_var(&self) -> Option<&Var> {
        match self.node() {
            ExprNode::Var(v) => Some(v),
            _ => None,
        }
    }

    /// The direct sub-expressions, in evaluation order.
    pub fn children(&self) -> SmallVec<[&Expr; 3]> {
        node_children(self.node())
    }

    /// The direct sub-expressions, in evaluation order, as [`children`](Self::children)
    /// lists them, read from the node without building a list (for walks that visit every
    /// node).
    // Inlined across crates: the passes' walks call it for every node, and as a call its
    // iterator was built and stepped through out of line.
    #[inline]
    pub fn operands(&self) -> impl DoubleEndedIterator<Item = &Expr> + Clone {
        let (fixed, many) = node_operands(self.node());
        fixed.into_iter().flatten().chain(many)
    }
}

/// The bit of 64 that stands for variable name `name` in [`Expr::name_bits`]: from its
/// length and first byte, so that names which differ in either mostly get different bits.
pub fn name_bit(name: &str) -> u64 {
    let first = name.as_bytes().first().map_or(0, |&b| u64::from(b));
    1 << (first.wrapping_mul(31).wrapping_add(name.len() as u64) & 63)
}

/// The bit of `op` in [`ExprData::binops`].
fn binop_bit(op: BinOp) -> u32 {
    1 << (op as u32)
}

/// The direct sub-expressions of a node, in evaluation order.
fn node_children(node: &ExprNode) -> SmallVec<[&Expr; 3]> {
    match node {
        ExprNode::Var(_) | ExprNode::Imm(_) | ExprNode::Builtin { .. } => SmallVec::new(),
        ExprNode::Unary { a, .. } | ExprNode::Cast { a, .. } => smallvec::smallvec![a],
        ExprNode::Binary { a, b, .. } => smallvec::smallvec![a, b],
        ExprNode::Select { cond, a, b } => smallvec::smallvec![cond, a, b],
        ExprNode::Load { index, .. } | ExprNode::VecLoad { index, .. } => {
            smallvec::smallvec![index]
        }
        ExprNode::Intrinsic { args, .. } => slice_children(args),
        ExprNode::Extract { a, .. } => smallvec::smallvec![a],
        ExprNode::Insert { a, b, .. } => smallvec::smallvec![a, b],
        ExprNode::Vector { elems, .. } => slice_children(elems),
    }
}

/// [`node_children`] of an operand slice: the usual one to three operands placed at once
/// (collected, each was pushed through the generic `extend`, a good part of what listing
/// an intrinsic's operands cost every walk that asks).
fn slice_children(xs: &[Expr]) -> SmallVec<[&Expr; 3]> {
    match xs {
        [] => SmallVec::new(),
        [a] => smallvec::smallvec![a],
        [a, b] => smallvec::smallvec![a, b],
        [a, b, c] => smallvec::smallvec![a, b, c],
        _ => xs.iter().collect(),
    }
}

/// [`node_children`] without the list: up to three fixed operands, then a slice (an
/// intrinsic's arguments, a vector's lanes), in evaluation order.
#[inline]
fn node_operands(node: &ExprNode) -> ([Option<&Expr>; 3], &[Expr]) {
    match node {
        ExprNode::Var(_) | ExprNode::Imm(_) | ExprNode::Builtin { .. } => ([None; 3], &[]),
        ExprNode::Unary { a, .. } | ExprNode::Cast { a, .. } | ExprNode::Extract { a, .. } => {
            ([Some(a), None, None], &[])
        }
        ExprNode::Load { index, .. } | ExprNode::VecLoad { index, .. } => {
            ([Some(index), None, None], &[])
        }
        ExprNode::Binary { a, b, .. } | ExprNode::Insert { a, b, .. } => {
            ([Some(a), Some(b), None], &[])
        }
        ExprNode::Select { cond, a, b } => ([Some(cond), Some(a), Some(b)], &[]),
        ExprNode::Intrinsic { args, .. } => ([None; 3], args),
        ExprNode::Vector { elems, .. } => ([None; 3], elems),
    }
}

impl PartialEq for Expr {
    fn eq(&self, other: &Expr) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
            || (self.0.hash == other.0.hash
                && self.0.ty == other.0.ty
                && self.0.node == other.0.node)
    }
}

impl Eq for Expr {}

impl Hash for Expr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.0.hash)
    }
}

impl fmt::Debug for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Expr({self})")
    }
}

/// True if evaluating `node` (of type `ty`) itself, its operands aside, may be an error: a
/// load (out of bounds), or an integer division or remainder by anything but a non-zero
/// constant.
fn fails_itself(node: &ExprNode, ty: Type) -> bool {
    match node {
        ExprNode::Load { .. } | ExprNode::VecLoad { .. } => true,
        ExprNode::Binary { op: BinOp::Div | BinOp::Rem, b, .. } => {
            ty.lane_scalar().is_some_and(|s| s.is_int()) && b.as_imm().is_none_or(|k| k.is_zero())
        }
        _ => false,
    }
}

/// The seed of every node's structural hash.
const STRUCTURAL_SEED: u64 = 0x006b_696c_6e5f_6972;

/// Deepest expression dropped by plain recursion (a few stack frames per level); deeper ones
/// are torn down iteratively.
const SHALLOW_DROP: u32 = 128;

impl Drop for ExprData {
    /// Drops deep chains iteratively, so a long expression cannot overflow the stack.
    fn drop(&mut self) {
        // Nearly every expression is shallow: its fields drop recursively, with no stack
        // to allocate and no placeholder to swap in (that was most of the cost of freeing
        // a kernel).
        if self.depth <= SHALLOW_DROP {
            return;
        }
        let mut stack: Vec<Expr> = Vec::new();
        take_children(&mut self.node, &mut stack);
        while let Some(e) = stack.pop() {
            if let Ok(mut data) = Arc::try_unwrap(e.0) {
                if data.depth > SHALLOW_DROP {
                    take_children(&mut data.node, &mut stack);
                }
            }
        }
    }
}

fn take_children(node: &mut ExprNode, out: &mut Vec<Expr>) {
    let placeholder = || {
        Expr(Arc::clone(PLACEHOLDER.get_or_init(|| {
            Arc::new(ExprData {
                ty: Type::BOOL,
                hash: 0,
                depth: 1,
                size: 1,
                may_fail: false,
                binops: 0,
                vector: false,
                const_operands: false,
                builtin: false,
                opaque: false,
                names: 0,
                node: ExprNode::Imm(Imm::Bool(false)),
                origin: None,
            })
        })))
    };
    match node {
        ExprNode::Unary { a, .. } | ExprNode::Cast { a, .. } | ExprNode::Extract { a, .. } => {
            out.push(std::mem::replace(a, placeholder()))
        }
        ExprNode::Insert { a, b, .. } => {
            out.push(std::mem::replace(a, placeholder()));
            out.push(std::mem::replace(b, placeholder()));
        }
        ExprNode::VecLoad { index, .. } => out.push(std::mem::replace(index, placeholder())),
        ExprNode::Vector { elems, .. } => out.extend(elems.drain(..)),
        ExprNode::Binary { a, b, .. } => {
            out.push(std::mem::replace(a, placeholder()));
            out.push(std::mem::replace(b, placeholder()));
        }
        ExprNode::Select { cond, a, b } => {
            out.push(std::mem::replace(cond, placeholder()));
            out.push(std::mem::replace(a, placeholder()));
            out.push(std::mem::replace(b, placeholder()));
        }
        ExprNode::Load { index, .. } => out.push(std::mem::replace(index, placeholder())),
        ExprNode::Intrinsic { args, .. } => out.extend(args.drain(..)),
        ExprNode::Var(_) | ExprNode::Imm(_) | ExprNode::Builtin { .. } => {}
    }
}

/// A leaf swapped in for children while a node is torn down; never dropped.
static PLACEHOLDER: std::sync::OnceLock<Arc<ExprData>> = std::sync::OnceLock::new();

#[cfg(test)]
mod tests {
    use super::*;

    /// The kept `may_fail` against its definition, computed over the whole tree.
    fn fails_anywhere(e: &Expr) -> bool {
        fails_itself(e.node(), e.ty()) || e.children().iter().any(|c| fails_anywhere(c))
    }

    #[test]
    fn size_counts_every_occurrence() {
        let x = Var::new("x", Type::I32);
        let s = &x * 3 + 1;
        let e = (&s * &s).cast(Scalar::F32);
        assert_eq!((x.expr().size(), s.size(), e.size()), (1, 5, 12));
        assert_eq!(e.with_origin("`e`".into()).size(), 12);
        let walked = |e: &Expr| {
            fn n(e: &Expr) -> usize {
                1 + e.children().iter().map(|c| n(c)).sum::<usize>()
            }
            n(e)
        };
        assert_eq!(walked(&e), e.size());
    }

    /// The kept `has_builtin` against a walk of the tree, through every kind of node that
    /// has operands, with the built-in at the top, deep down, or absent; a copy with an
    /// origin keeps it.
    #[test]
    fn has_builtin_is_kept_for_every_tree_with_a_built_in() {
        fn walked(e: &Expr) -> bool {
            matches!(e.node(), ExprNode::Builtin { .. }) || e.children().iter().any(|c| walked(c))
        }
        let x = Var::new("x", Type::I32);
        let buf = Var::new("buf", Type::Ptr(crate::types::AddrSpace::Global, Scalar::F32));
        let gid = Expr::global_id(0).cast(Scalar::I32);
        let trees = [
            x.expr(),
            Expr::global_id(1),
            &x * 3 + 1,
            (&x * 3 + gid.clone()) * 2,
            Expr::load(&buf, &gid + 1),
            Expr::select(x.expr().cmp_lt(gid.clone()), x.expr(), Expr::i32(0)),
            Expr::intrinsic(Intrinsic::Min, [x.expr(), Expr::local_id(0).cast(Scalar::I32)]),
            Expr::intrinsic(Intrinsic::Max, [x.expr(), Expr::i32(4)]),
            Expr::vload(&buf, gid.clone() * 4, 4),
            Expr::vload(&buf, &x * 4, 4).extract(2),
        ];
        for e in &trees {
            assert_eq!(e.has_builtin(), walked(e), "{e}");
            assert_eq!(e.with_origin("`e`".into()).has_builtin(), walked(e), "{e}");
        }
        assert_eq!(trees.iter().filter(|e| e.has_builtin()).count(), 6);
    }

    /// The kept `is_opaque` against its definition walked over the tree, for every kind of
    /// node, opaque at every depth or broken by one node deep down; a copy with an origin
    /// keeps it.
    #[test]
    fn is_opaque_is_kept_for_every_kind_of_node() {
        fn walked(e: &Expr) -> bool {
            let kids = || e.children().iter().all(|c| walked(c));
            match e.node() {
                ExprNode::Var(_) | ExprNode::Builtin { .. } => true,
                ExprNode::Load { .. }
                | ExprNode::VecLoad { .. }
                | ExprNode::Extract { .. }
                | ExprNode::Insert { .. }
                | ExprNode::Vector { .. } => kids(),
                ExprNode::Cast { a, .. } => a.ty() != e.ty() && kids(),
                ExprNode::Intrinsic { op, args } => {
                    !matches!(op, Intrinsic::Min | Intrinsic::Max) && !args.is_empty() && kids()
                }
                _ => false,
            }
        }
        let (x, f) = (Var::new("x", Type::I32), Var::new("f", Type::F32));
        let buf = Var::new("buf", Type::Ptr(crate::types::AddrSpace::Global, Scalar::F32));
        let gid = Expr::global_id(0).cast(Scalar::I32);
        let v = Expr::vload(&buf, x.expr(), 4);
        let trees = [
            x.expr(),
            Expr::i32(3),
            Expr::global_id(1),
            gid.clone(),
            x.expr().cast(Scalar::I32),
            &x + 1,
            -x.expr(),
            Expr::select(x.expr().cmp_lt(gid.clone()), x.expr(), gid.clone()),
            Expr::load(&buf, gid.clone()),
            Expr::load(&buf, Expr::load(&buf, x.expr()).cast(Scalar::I32)),
            Expr::load(&buf, Expr::load(&buf, &x + 1).cast(Scalar::I32)),
            Expr::load(&buf, Expr::i32(0)),
            v.clone(),
            Expr::vload(&buf, &x * 4, 4),
            v.extract(2),
            v.insert(1, f.expr()),
            v.insert(1, Expr::f32(1.0)),
            Expr::build_vector([f.expr(), Expr::load(&buf, x.expr()), f.expr(), f.expr()]),
            Expr::build_vector([f.expr(), f.expr() * 2.0, f.expr(), f.expr()]),
            f.expr().broadcast(4),
            Expr::intrinsic(Intrinsic::Sqrt, [Expr::load(&buf, x.expr())]),
            Expr::intrinsic(Intrinsic::Sqrt, [Expr::load(&buf, &x - 1)]),
            Expr::intrinsic(Intrinsic::Min, [x.expr(), gid.clone()]),
            Expr::intrinsic(Intrinsic::Max, [x.expr(), gid.clone()]),
        ];
        for e in &trees {
            assert_eq!(e.is_opaque(), walked(e), "{e}");
            assert_eq!(e.with_origin("`e`".into()).is_opaque(), walked(e), "{e}");
        }
        let opaque = trees.iter().filter(|e| e.is_opaque()).count();
        assert_eq!((opaque, trees.len() - opaque), (11, 13), "both answers occur");
    }

    #[test]
    fn may_fail_is_kept_for_loads_and_divisions_by_a_non_constant_or_zero() {
        let (x, y) = (Var::new("x", Type::I32), Var::new("y", Type::I32));
        let p = Var::new("p", Type::Ptr(crate::AddrSpace::Global, Scalar::I32));
        let f = Var::new("f", Type::F32);
        let cases = [
            (&x / &y, true),
            (&x % 0, true),
            (&x / 3, false),
            (&x % 7, false),
            (&f / &f, false),
            (Expr::load(&p, &x), true),
            ((&x + Expr::load(&p, Expr::i32(0))) * 2, true),
            (Expr::select(x.expr().cmp_lt(1), &x / 2, y.expr()), false),
            (Expr::select(x.expr().cmp_lt(1), Expr::i32(1), &x / &y), true),
            ((&x / &y).cast(Scalar::F32), true),
        ];
        for (e, fails) in cases {
            assert_eq!(e.may_fail(), fails, "{e}");
            assert_eq!(fails_anywhere(&e), fails, "{e}");
            assert_eq!(e.with_origin("`src`".into()).may_fail(), fails, "{e} with an origin");
        }
        assert!((&x / &y).is_fault_division() && !(&x / 2).is_fault_division());
        assert!(!Expr::load(&p, &x).is_fault_division(), "a load fails, but is no division");
    }

    #[test]
    fn operators_build_typed_trees() {
        let a = Var::new("a", Type::I32);
        let b = Var::new("b", Type::I32);
        let e = 2 * (&a + &b) - a.expr();
        assert_eq!(e.ty(), Type::I32);
        let ExprNode::Binary { op: BinOp::Sub, a: lhs, .. } = e.node() else { panic!("{e:?}") };
        let ExprNode::Binary { op: BinOp::Mul, a: two, .. } = lhs.node() else { panic!() };
        assert_eq!(two.as_imm(), Some(&Imm::int(Scalar::I32, 2)));
        let c = e.cmp_lt(5);
        assert_eq!(c.ty(), Type::BOOL);
    }

    #[test]
    fn literals_take_the_other_operands_type() {
        let x = Var::new("x", Type::F32);
        let e = &x * 2;
        let ExprNode::Binary { b, .. } = e.node() else { panic!() };
        assert_eq!(b.as_imm(), Some(&Imm::float(Scalar::F32, 2.0)));
    }

    #[test]
    fn structural_equality_and_hash() {
        let x = Var::new("x", Type::U32);
        let e1 = &x + 1u32;
        let e2 = &x + 1u32;
        assert!(!e1.ptr_eq(&e2));
        assert!(e1.is_equal(&e2));
        let mut set = hashbrown::HashSet::new();
        set.insert(e1);
        assert!(set.contains(&e2));
        assert!(!set.contains(&(&x + 2u32)));
    }

    #[test]
    fn canonical_integers_wrap() {
        assert_eq!(Imm::int(Scalar::U8, 300).as_i128(), Some(44));
        assert_eq!(Imm::int(Scalar::I8, 200).as_i128(), Some(-56));
        assert_eq!(Imm::int(Scalar::I64, -1).as_i128(), Some(-1));
        assert_eq!(Imm::int(Scalar::U64, -1).as_i128(), Some(u64::MAX as i128));
        assert_ne!(Imm::float(Scalar::F32, 0.0), Imm::float(Scalar::F32, -0.0));
    }

    #[test]
    fn deep_chains_drop_without_overflow() {
        let x = Var::new("x", Type::I32);
        let mut e = x.expr();
        for _ in 0..200_000 {
            e = e + 1;
        }
        drop(e);
    }
}

#[cfg(test)]
mod float_bits_tests {
    use super::*;

    /// Issue 29 (W1): every f16 bit pattern, and f32 NaNs and edge values, survive the trip
    /// through an `Imm` bit for bit; conversions quiet a signalling NaN, copies do not.
    #[test]
    fn floats_keep_every_bit_through_an_imm() {
        for b in 0..=u16::MAX as u64 {
            assert_eq!(Imm::from_bits(Scalar::F16, b).to_bits(), b, "f16 {b:#x}");
        }
        let f32s = [
            0x7f80_0001u64,
            0x7fbf_ffff,
            0xff80_0001,
            0x7fc0_0001,
            0xffff_ffff,
            0x1,
            0x8000_0000,
            0x7f80_0000,
            0x3f80_0000,
        ];
        for b in f32s {
            let i = Imm::from_bits(Scalar::F32, b);
            assert_eq!(i.to_bits(), b, "f32 {b:#x}");
            assert_eq!(Imm::float(Scalar::F32, i.as_f64().unwrap()), i, "rounding {b:#x}");
            assert_eq!(crate::eval::cast(Scalar::F32, i), i, "same-type cast {b:#x}");
        }
        let snan = Imm::from_bits(Scalar::F32, 0x7f80_0001);
        assert_eq!(crate::eval::cast(Scalar::F64, snan).to_bits(), 0x7ff8_0000_2000_0000);
        let h = Imm::from_bits(Scalar::F16, 0x7c01);
        assert_eq!(crate::eval::cast(Scalar::F32, h).to_bits(), 0x7fc0_2000);
        let d = Imm::from_bits(Scalar::F64, 0x7ff0_0000_0000_0001);
        // The payload bits f32 has room for are all zero: the quiet bit keeps it a NaN.
        assert_eq!(crate::eval::cast(Scalar::F32, d).to_bits(), 0x7fc0_0000);
        assert_eq!(float_to_bits(Scalar::F32, f64::from_bits(0x7ff0_0000_0000_0001)), 0x7fc0_0000);
        assert_eq!(crate::eval::unary(UnOp::Neg, snan).map(|v| v.to_bits()), Ok(0xff80_0001));
        let abs =
            crate::eval::intrinsic(Intrinsic::Abs, &[Imm::from_bits(Scalar::F32, 0xff80_0001)]);
        assert_eq!(abs.map(|v| v.to_bits()), Ok(0x7f80_0001));
        assert_eq!(Imm::from_bits(Scalar::I8, 0xff), Imm::int(Scalar::I8, -1));
        assert_eq!(Imm::int(Scalar::I8, -1).to_bits(), 0xff);
    }
}
