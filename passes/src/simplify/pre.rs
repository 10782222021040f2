//! The cheap half of the simplifier: a bottom-up algebraic pass (constant folding with the
//! interpreter's exact semantics, neutral elements, the index identities of nd-range
//! remapping, constant reassociation) that settles most expressions in one walk, and the test
//! that decides whether the e-graph could still improve what it leaves.
//!
//! Two properties keep this pass honest:
//!
//! - Every rewrite here is one the e-graph rules ([`super::rules`]) and its constant folding
//!   derive as well, under the same guards (types, "may fail" operands). So it adds no
//!   equivalence egg would not find (soundness is exactly that of the rule set, which
//!   `tests/rules.rs` checks), and a saturated e-graph over its result holds everything it
//!   does, which keeps the simplifier idempotent.
//! - [`egg_may_help`](super::gate::egg_may_help) answers `false` only for expressions no rule sequence can make
//!   cheaper, so skipping egg there loses nothing (`tests/simplify_gate.rs` checks this on
//!   random expressions against a full e-graph run).

use kiln_ir::eval;
use kiln_ir::{BinOp, Expr, ExprNode, Imm, Intrinsic, Scalar, UnOp};
use smallvec::SmallVec;

use super::lang::is_operator;

/// How many rewrites one node may take in a row (each strictly simplifies or normalizes it;
/// the bound is a guard against a rule pair undoing each other, never reached in practice).
const FUEL: u32 = 16;

/// Simplifies `e` bottom-up with cheap algebraic rewrites. Returns the very same handle when
/// nothing changed. Only nodes the e-graph treats as operators are rewritten (plus the
/// folding of casts and intrinsics that the e-graph's leaf handling does too).
pub fn presimplify(e: &Expr) -> Expr {
    match e.node() {
        ExprNode::Var(_) | ExprNode::Imm(_) | ExprNode::Builtin { .. } => e.clone(),
        ExprNode::Load { buf, index } => {
            let i = presimplify(index);
            if i.ptr_eq(index) {
                e.clone()
            } else {
                Expr::load(buf, i)
            }
        }
        ExprNode::Cast { to, a } => {
            let a2 = presimplify(a);
            if let Some(k) = a2.as_imm() {
                return Expr::imm(eval::cast(*to, *k));
            }
            if a2.ty() == e.ty() {
                // A cast to the operand's own type is the identity.
                return a2;
            }
            if a2.ptr_eq(a) {
                e.clone()
            } else {
                a2.cast(*to)
            }
        }
        _ if is_operator(e) => operator(e),
        ExprNode::Binary { .. } if e.origin().is_some() => {
            let d = super::named_division(e, presimplify);
            if d.origin().is_none() {
                operator(&d)
            } else {
                d
            }
        }
        ExprNode::Intrinsic { op, args } => {
            let new: SmallVec<[Expr; 3]> = args.iter().map(presimplify).collect();
            // The constants are gathered only when every operand is one.
            let consts: Option<SmallVec<[Imm; 3]>> = if new.iter().all(|a| a.as_imm().is_some()) {
                new.iter().map(|a| a.as_imm().copied()).collect()
            } else {
                None
            };
            if let Some(Ok(k)) = consts.map(|c| eval::intrinsic(*op, &c)) {
                if !op.is_approximate() {
                    return Expr::imm(k);
                }
            }
            if new.iter().zip(args.iter()).all(|(a, b)| a.ptr_eq(b)) {
                e.clone()
            } else {
                Expr::intrinsic(*op, new)
            }
        }
        // Operators the e-graph keeps opaque (f16 arithmetic): left alone, as egg does.
        _ => e.clone(),
    }
}

/// An operator node: children first, then the rules at the top.
fn operator(e: &Expr) -> Expr {
    // The operands as simplified, `None` where one stays as it is, and the rules given
    // borrowed operands: most nodes of an index take no rule over operands that stay
    // (variables and constants, mostly), and a handle taken and given back for each
    // operand, twice, was much of this pass's cost.
    let ops = operands(e);
    let new: SmallVec<[Option<Expr>; 3]> = ops.iter().map(|c| changed(c)).collect();
    let kids: SmallVec<[&Expr; 3]> =
        new.iter().zip(&ops).map(|(n, c)| n.as_ref().unwrap_or(c)).collect();
    let node = match e.node() {
        ExprNode::Unary { op, .. } => unary(*op, kids[0]),
        ExprNode::Binary { op, .. } => binary(*op, kids[0], kids[1], FUEL),
        ExprNode::Select { .. } => select(kids[0].clone(), kids[1].clone(), kids[2].clone()),
        ExprNode::Intrinsic { op, .. } => minmax(*op, kids[0].clone(), kids[1].clone()),
        _ => None,
    };
    match node {
        Some(r) => r,
        None if new.iter().any(Option::is_some) => rebuild(e, kids.into_iter().cloned().collect()),
        None => e.clone(),
    }
}

/// The operands of operator `e` ([`Expr::children`], read from the node).
fn operands(e: &Expr) -> SmallVec<[&Expr; 3]> {
    match e.node() {
        ExprNode::Unary { a, .. } => smallvec::smallvec![a],
        ExprNode::Binary { a, b, .. } => smallvec::smallvec![a, b],
        ExprNode::Select { cond, a, b } => smallvec::smallvec![cond, a, b],
        _ => e.children(),
    }
}

/// [`presimplify`] of `e`, or `None` if it gives `e` itself back (a variable, a constant
/// or a built-in always does, without a handle taken).
fn changed(e: &Expr) -> Option<Expr> {
    if matches!(e.node(), ExprNode::Var(_) | ExprNode::Imm(_) | ExprNode::Builtin { .. }) {
        return None;
    }
    let r = presimplify(e);
    (!r.ptr_eq(e)).then_some(r)
}

/// `e` with its children replaced by `kids` (in order).
pub(super) fn rebuild(e: &Expr, kids: SmallVec<[Expr; 3]>) -> Expr {
    let mut k = kids.into_iter();
    let mut next = || k.next().unwrap_or_else(|| Expr::bool(false));
    match e.node() {
        ExprNode::Unary { op, .. } => Expr::unary(*op, next()),
        ExprNode::Binary { op, .. } => {
            let a = next();
            Expr::binary(*op, a, next())
        }
        ExprNode::Select { .. } => {
            let (c, a) = (next(), next());
            Expr::select(c, a, next())
        }
        ExprNode::Intrinsic { op, .. } => {
            let a = next();
            Expr::intrinsic(*op, [a, next()])
        }
        _ => e.clone(),
    }
}

fn scalar_of(e: &Expr) -> Option<Scalar> {
    e.ty().scalar()
}

fn is_int(e: &Expr) -> bool {
    scalar_of(e).is_some_and(|s| s.is_int())
}

/// The integer value of a constant operand.
fn int_k(e: &Expr) -> Option<i128> {
    e.as_imm().filter(|k| k.scalar().is_int()).and_then(|k| k.as_i128())
}

fn is_float_bits(e: &Expr, want: f64) -> bool {
    e.as_imm().and_then(|k| k.as_f64()).is_some_and(|x| x.to_bits() == want.to_bits())
}

/// All bits set: -1 of a signed type, the maximum of an unsigned one.
fn all_ones(e: &Expr) -> bool {
    let (Some(k), Some(ty)) = (int_k(e), scalar_of(e)) else { return false };
    (ty.is_signed() && k == -1) || (ty.is_unsigned() && Some(k) == ty.int_max())
}

fn safe(e: &Expr) -> bool {
    !e.may_fail()
}

fn zero_like(e: &Expr) -> Option<Expr> {
    let ty = scalar_of(e)?;
    ty.is_int().then(|| Expr::int(ty, 0))
}

/// Structural equality up to commutativity of integer and boolean operators (what the
/// e-graph's commutativity rules see as one class).
pub(super) fn same(a: &Expr, b: &Expr) -> bool {
    if a.is_equal(b) {
        return true;
    }
    match (a.node(), b.node()) {
        (ExprNode::Binary { op: o1, a: a1, b: b1 }, ExprNode::Binary { op: o2, a: a2, b: b2 })
            if o1 == o2 && commutative(*o1) && !scalar_of(a1).is_some_and(|s| s.is_float()) =>
        {
            (same(a1, a2) && same(b1, b2)) || (same(a1, b2) && same(b1, a2))
        }
        _ => false,
    }
}

fn commutative(op: BinOp) -> bool {
    use BinOp::*;
    matches!(op, Add | Mul | And | Or | Xor | Eq | Ne | LogicAnd | LogicOr)
}

/// `(x, k)` when one operand of a commutative binary node `e` of operator `op` is the
/// constant `k`.
fn split_const(e: &Expr, op: BinOp) -> Option<(Expr, Imm)> {
    match e.node() {
        ExprNode::Binary { op: o, a, b } if *o == op => match (a.as_imm(), b.as_imm()) {
            (None, Some(k)) => Some((a.clone(), *k)),
            (Some(k), None) if commutative(op) => Some((b.clone(), *k)),
            _ => None,
        },
        _ => None,
    }
}

fn fold2(op: BinOp, a: Imm, b: Imm) -> Option<Expr> {
    eval::binary(op, a, b).ok().map(Expr::imm)
}

/// `op a b` built and simplified at the top.
fn mk(op: BinOp, a: Expr, b: Expr, fuel: u32) -> Expr {
    match binary(op, &a, &b, fuel) {
        Some(e) => e,
        None => Expr::binary(op, a, b),
    }
}

/// `a op b` simplified at the top (its operands already are), or `None` when no rule applies.
fn binary(op: BinOp, a: &Expr, b: &Expr, fuel: u32) -> Option<Expr> {
    if let (Some(x), Some(y)) = (a.as_imm(), b.as_imm()) {
        // An error (division by zero) is the expression's observable result: keep it.
        return fold2(op, *x, *y);
    }
    let fuel = fuel.checked_sub(1)?;
    if is_int(a) {
        int_binary(op, a, b, fuel)
    } else if scalar_of(a).is_some_and(|s| s.is_float()) {
        float_binary(op, a, b)
    } else {
        bool_binary(op, a, b)
    }
}

/// Integer rules (wrapping arithmetic, truncating division).
fn int_binary(op: BinOp, a: &Expr, b: &Expr, fuel: u32) -> Option<Expr> {
    use BinOp::*;
    let (ka, kb) = (int_k(a), int_k(b));
    match op {
        Add => {
            if kb == Some(0) {
                return Some(a.clone());
            }
            if ka == Some(0) {
                return Some(b.clone());
            }
            // (x + c1) + c2 -> x + (c1 + c2), in either operand order.
            if let Some(kb) = b.as_imm() {
                if let Some((x, k1)) = split_const(a, Add) {
                    return Some(mk(Add, x, fold2(Add, k1, *kb)?, fuel));
                }
            }
            if let Some(ka) = a.as_imm() {
                if let Some((x, k1)) = split_const(b, Add) {
                    return Some(mk(Add, x, fold2(Add, k1, *ka)?, fuel));
                }
            }
            // (x / c) * c + x % c -> x (either order of the sum and of the product).
            if let Some(x) = div_mul_rem(a, b).or_else(|| div_mul_rem(b, a)) {
                return Some(x);
            }
            // (x - y) + y -> x and y + (x - y) -> x.
            for (s, y) in [(a, b), (b, a)] {
                if let ExprNode::Binary { op: Sub, a: x, b: y2 } = s.node() {
                    if same(y, y2) && safe(y) {
                        return Some(x.clone());
                    }
                }
            }
            // x * c + x -> x * (c + 1), either order.
            for (p, x) in [(a, b), (b, a)] {
                if let Some((y, k)) = split_const(p, Mul) {
                    if same(&y, x) {
                        let one = Imm::int(k.scalar(), 1);
                        return Some(mk(Mul, y, fold2(Add, k, one)?, fuel));
                    }
                }
            }
            super::sum::cancel(Add, a, b)
        }
        Sub => {
            if kb == Some(0) {
                return Some(a.clone());
            }
            if same(a, b) {
                return if safe(a) { zero_like(a) } else { None };
            }
            // (x + c1) - c2 -> x + (c1 - c2).
            if let Some(kb) = b.as_imm() {
                if let Some((x, k1)) = split_const(a, Add) {
                    return Some(mk(Add, x, fold2(Sub, k1, *kb)?, fuel));
                }
            }
            // (x + y) - x -> y and (x + y) - y -> x.
            if let ExprNode::Binary { op: Add, a: x, b: y } = a.node() {
                if same(x, b) && safe(x) {
                    return Some(y.clone());
                }
                if same(y, b) && safe(y) {
                    return Some(x.clone());
                }
            }
            // x * c - x -> x * (c - 1).
            if let Some((y, k)) = split_const(a, Mul) {
                if same(&y, b) {
                    let one = Imm::int(k.scalar(), 1);
                    return Some(mk(Mul, y, fold2(Sub, k, one)?, fuel));
                }
            }
            super::sum::cancel(Sub, a, b)
        }
        Mul => {
            let (x, k) = match (a.as_imm(), b.as_imm()) {
                (_, Some(k)) => (a, *k),
                (Some(k), _) => (b, *k),
                _ => return None,
            };
            match k.as_i128() {
                Some(1) => return Some(x.clone()),
                Some(0) => return if safe(x) { Some(Expr::imm(k)) } else { None },
                // Times -1 (all ones, signed or not) is a negation, which may fold further.
                _ if all_ones(&Expr::imm(k)) => {
                    let n = Expr::unary(UnOp::Neg, x.clone());
                    return Some(unary(UnOp::Neg, x).unwrap_or(n));
                }
                _ => {}
            }
            // (y * c1) * c2 -> y * (c1 * c2).
            if let Some((y, k1)) = split_const(x, Mul) {
                return Some(mk(Mul, y, fold2(Mul, k1, k)?, fuel));
            }
            // (y + c1) * c2 -> y * c2 + c1 * c2: distributing the constant lets it meet
            // other constants of the sum (`c * (x + 1) - c` is `x * c`).
            if let Some((y, k1)) = split_const(x, Add) {
                let prod = mk(Mul, y, Expr::imm(k), fuel);
                return Some(mk(Add, prod, fold2(Mul, k1, k)?, fuel));
            }
            None
        }
        Div if kb == Some(1) => Some(a.clone()),
        Rem if kb == Some(1) => {
            if safe(a) {
                zero_like(a)
            } else {
                None
            }
        }
        Rem => {
            // (x % c) % c -> x % c.
            let c = kb.filter(|&c| c != 0)?;
            match a.node() {
                ExprNode::Binary { op: Rem, b: c2, .. } if int_k(c2) == Some(c) => Some(a.clone()),
                _ => None,
            }
        }
        And => {
            if kb == Some(0) || ka == Some(0) {
                let (x, z) = if kb == Some(0) { (a, b) } else { (b, a) };
                return if safe(x) { Some(z.clone()) } else { None };
            }
            if all_ones(b) {
                return Some(a.clone());
            }
            if all_ones(a) {
                return Some(b.clone());
            }
            if same(a, b) {
                return Some(a.clone());
            }
            reassoc_bits(And, a, b, fuel)
        }
        Or | Xor => {
            if kb == Some(0) {
                return Some(a.clone());
            }
            if ka == Some(0) {
                return Some(b.clone());
            }
            if same(a, b) {
                return if op == Or {
                    Some(a.clone())
                } else if safe(a) {
                    zero_like(a)
                } else {
                    None
                };
            }
            reassoc_bits(op, a, b, fuel)
        }
        Shl | Shr if kb == Some(0) => Some(a.clone()),
        Eq | Le | Ge if same(a, b) && safe(a) => Some(Expr::bool(true)),
        Ne | Lt | Gt if same(a, b) && safe(a) => Some(Expr::bool(false)),
        _ => None,
    }
}

/// `(x op c1) op c2 -> x op (c1 op c2)` for the associative bitwise operators.
fn reassoc_bits(op: BinOp, a: &Expr, b: &Expr, fuel: u32) -> Option<Expr> {
    let (x, k) = match (a.as_imm(), b.as_imm()) {
        (_, Some(k)) => (a, *k),
        (Some(k), _) => (b, *k),
        _ => return None,
    };
    let (y, k1) = split_const(x, op)?;
    Some(mk(op, y, fold2(op, k1, k)?, fuel))
}

/// `x` if `p` is `(x / c) * c` (or `c * (x / c)`) and `r` is `x % c`, `c` a non-zero constant.
fn div_mul_rem(p: &Expr, r: &Expr) -> Option<Expr> {
    let ExprNode::Binary { op: BinOp::Rem, a: x, b: c } = r.node() else { return None };
    let k = int_k(c).filter(|&k| k != 0)?;
    let (q, k2) = split_const(p, BinOp::Mul)?;
    let ExprNode::Binary { op: BinOp::Div, a: x2, b: c2 } = q.node() else { return None };
    (k2.as_i128() == Some(k) && int_k(c2) == Some(k) && same(x, x2)).then(|| x.clone())
}

/// Float rules: only the exact ones (see [`super::rules`]).
fn float_binary(op: BinOp, a: &Expr, b: &Expr) -> Option<Expr> {
    match op {
        BinOp::Mul if is_float_bits(b, 1.0) => Some(a.clone()),
        BinOp::Mul if is_float_bits(a, 1.0) => Some(b.clone()),
        BinOp::Div if is_float_bits(b, 1.0) => Some(a.clone()),
        BinOp::Sub if is_float_bits(b, 0.0) => Some(a.clone()),
        BinOp::Add if is_float_bits(b, -0.0) => Some(a.clone()),
        BinOp::Add if is_float_bits(a, -0.0) => Some(b.clone()),
        _ => None,
    }
}

/// Boolean rules.
fn bool_binary(op: BinOp, a: &Expr, b: &Expr) -> Option<Expr> {
    let (ka, kb) = (a.as_imm().copied(), b.as_imm().copied());
    let (t, f) = (Some(Imm::Bool(true)), Some(Imm::Bool(false)));
    match op {
        BinOp::LogicAnd | BinOp::LogicOr => {
            let (unit, absorb) = if op == BinOp::LogicAnd { (t, f) } else { (f, t) };
            if kb == unit {
                return Some(a.clone());
            }
            if ka == unit {
                return Some(b.clone());
            }
            if kb == absorb && safe(a) {
                return Some(b.clone());
            }
            if ka == absorb && safe(b) {
                return Some(a.clone());
            }
            same(a, b).then(|| a.clone())
        }
        BinOp::Eq if same(a, b) && safe(a) => Some(Expr::bool(true)),
        BinOp::Ne if same(a, b) && safe(a) => Some(Expr::bool(false)),
        _ => None,
    }
}

/// `op a` simplified at the top.
fn unary(op: UnOp, a: &Expr) -> Option<Expr> {
    if let Some(k) = a.as_imm() {
        return eval::unary(op, *k).ok().map(Expr::imm);
    }
    match (op, a.node()) {
        (UnOp::Neg, ExprNode::Unary { op: UnOp::Neg, a: x })
        | (UnOp::Not, ExprNode::Unary { op: UnOp::Not, a: x })
        | (UnOp::BitNot, ExprNode::Unary { op: UnOp::BitNot, a: x }) => Some(x.clone()),
        // The negation of an integer sum: flip every term's sign, if that is cheaper.
        (UnOp::Neg, ExprNode::Binary { op: BinOp::Add | BinOp::Sub, .. }) if is_int(a) => {
            super::sum::negated(a)
        }
        (UnOp::Not, ExprNode::Binary { op: cmp, a: x, b: y }) => {
            let int = is_int(x);
            let flipped = match cmp {
                BinOp::Eq => BinOp::Ne,
                BinOp::Ne => BinOp::Eq,
                BinOp::Lt if int => BinOp::Ge,
                BinOp::Le if int => BinOp::Gt,
                _ => return None,
            };
            Some(Expr::binary(flipped, x.clone(), y.clone()))
        }
        _ => None,
    }
}

/// `select(c, a, b)` simplified at the top.
fn select(c: Expr, a: Expr, b: Expr) -> Option<Expr> {
    match c.as_imm() {
        Some(Imm::Bool(true)) if safe(&b) => return Some(a),
        Some(Imm::Bool(false)) if safe(&a) => return Some(b),
        _ => {}
    }
    if same(&a, &b) && safe(&c) {
        return Some(a);
    }
    if let ExprNode::Unary { op: UnOp::Not, a: inner } = c.node() {
        return Some(Expr::select(inner.clone(), b, a));
    }
    None
}

/// `min`/`max` simplified at the top.
fn minmax(op: Intrinsic, a: Expr, b: Expr) -> Option<Expr> {
    if let (Some(x), Some(y)) = (a.as_imm(), b.as_imm()) {
        return eval::intrinsic(op, &[*x, *y]).ok().map(Expr::imm);
    }
    a.is_equal(&b).then_some(a)
}
