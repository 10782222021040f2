//! Index arithmetic on `i32` expressions: constructors that fold constants as they build (so
//! generated kernels read like hand-written ones, not like `0 * 64 + 1 * x`), substitution
//! of variables, and evaluation of closed expressions with the interpreter's own semantics.

use std::cell::RefCell;
use std::collections::HashMap;

use kiln_ir::eval;
use kiln_ir::{
    walk_mutate_expr, BinOp, Expr, ExprNode, Imm, Intrinsic, Mutator, Scalar, Type, Var,
};

/// An `i32` constant. A value asked for again gets the handle made the first time, from a
/// small per-thread table: a generator builds thousands of index constants, mostly the same
/// few dozen values, and most are dropped at once (folded into a neighbour); a node
/// allocated, hashed and freed for each was a tenth of the GEMM generator's time. A table
/// slot is overwritten by the next value hashed to it, so the table stays small.
pub fn c(v: i64) -> Expr {
    const SLOTS: usize = 64;
    thread_local! {
        static TABLE: RefCell<[Option<Expr>; SLOTS]> =
            const { RefCell::new([const { None }; SLOTS]) };
    }
    let v = v as i32;
    // Fibonacci hashing: nearby values (strides, lane offsets) land in different slots.
    let slot = ((v as u32).wrapping_mul(0x9e37_79b9) >> 26) as usize % SLOTS;
    TABLE.with(|t| {
        let mut t = t.borrow_mut();
        match &t[slot] {
            Some(e) if as_const(e) == Some(i64::from(v)) => e.clone(),
            _ => {
                let e = Expr::i32(v);
                t[slot] = Some(e.clone());
                e
            }
        }
    })
}

/// The value of an `i32` constant expression.
pub fn as_const(e: &Expr) -> Option<i64> {
    e.as_imm().and_then(Imm::as_i128).map(|v| v as i64)
}

/// `a + b`, folded when either side is 0 or both are constants.
pub fn add(a: &Expr, b: &Expr) -> Expr {
    match (as_const(a), as_const(b)) {
        (Some(x), Some(y)) => c(x + y),
        (Some(0), _) => b.clone(),
        (_, Some(0)) => a.clone(),
        (_, Some(y)) if y < 0 => Expr::binary(BinOp::Sub, a.clone(), c(-y)),
        _ => Expr::binary(BinOp::Add, a.clone(), b.clone()),
    }
}

/// `a - b`, folded like [`add`].
pub fn sub(a: &Expr, b: &Expr) -> Expr {
    match (as_const(a), as_const(b)) {
        (Some(x), Some(y)) => c(x - y),
        (_, Some(0)) => a.clone(),
        (_, Some(y)) if y < 0 => Expr::binary(BinOp::Add, a.clone(), c(-y)),
        _ => Expr::binary(BinOp::Sub, a.clone(), b.clone()),
    }
}

/// `a * b`, folded when either side is 0 or 1 or both are constants.
pub fn mul(a: &Expr, b: &Expr) -> Expr {
    match (as_const(a), as_const(b)) {
        (Some(x), Some(y)) => c(x * y),
        (Some(0), _) | (_, Some(0)) => c(0),
        (Some(1), _) => b.clone(),
        (_, Some(1)) => a.clone(),
        _ => Expr::binary(BinOp::Mul, a.clone(), b.clone()),
    }
}

/// `a / d` for a positive constant `d`; the identity for `d == 1`.
pub fn div(a: &Expr, d: i64) -> Expr {
    match as_const(a) {
        Some(x) => c(x / d),
        None if d == 1 => a.clone(),
        None => Expr::binary(BinOp::Div, a.clone(), c(d)),
    }
}

/// `a % d` for a positive constant `d`; 0 for `d == 1`.
pub fn rem(a: &Expr, d: i64) -> Expr {
    match as_const(a) {
        Some(x) => c(x % d),
        None if d == 1 => c(0),
        None => Expr::binary(BinOp::Rem, a.clone(), c(d)),
    }
}

/// `a && b`, where `None` means "always true".
pub fn and(a: Option<Expr>, b: Option<Expr>) -> Option<Expr> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.logic_and(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

struct Subst<'a>(&'a HashMap<Var, Expr>);

impl Mutator for Subst<'_> {
    fn mutate_expr(&mut self, e: &Expr) -> Expr {
        if let ExprNode::Var(v) = e.node() {
            if let Some(r) = self.0.get(v) {
                return r.clone();
            }
        }
        walk_mutate_expr(self, e)
    }
}

/// `e` with each variable in `map` replaced by its expression (simultaneously).
pub fn subst(e: &Expr, map: &HashMap<Var, Expr>) -> Expr {
    Subst(map).mutate_expr(e)
}

/// [`Subst`] by name from a short list: the `i32` variable named `pairs[i].0` becomes
/// `pairs[i].1`.
struct SubstNames<'a>(&'a [(&'a str, Expr)]);

impl Mutator for SubstNames<'_> {
    fn mutate_expr(&mut self, e: &Expr) -> Expr {
        if let ExprNode::Var(v) = e.node() {
            if v.ty() == Type::I32 {
                if let Some((_, r)) = self.0.iter().find(|(n, _)| *n == v.name()) {
                    return r.clone();
                }
            }
        }
        walk_mutate_expr(self, e)
    }
}

/// [`subst`] with the map given as distinct names of `i32` variables and their expressions:
/// the same result, without a `Var` made and hashed for each name (a view's access, made for
/// every element a generated kernel touches, substitutes two or three).
pub fn subst_names(e: &Expr, pairs: &[(&str, Expr)]) -> Expr {
    SubstNames(pairs).mutate_expr(e)
}

/// Evaluates a closed expression (variables taken from `env`) with the interpreter's scalar
/// semantics; loads and built-ins are not closed and are an error.
pub fn eval(e: &Expr, env: &HashMap<Var, Imm>) -> Result<Imm, String> {
    let args =
        |es: &[&Expr]| -> Result<Vec<Imm>, String> { es.iter().map(|x| eval(x, env)).collect() };
    match e.node() {
        ExprNode::Imm(i) => Ok(*i),
        ExprNode::Var(v) => env.get(v).copied().ok_or_else(|| format!("`{v}` has no value")),
        ExprNode::Unary { op, a } => eval::unary(*op, eval(a, env)?),
        ExprNode::Binary { op, a, b } => eval::binary(*op, eval(a, env)?, eval(b, env)?),
        ExprNode::Select { cond, a, b } => {
            let v = args(&[cond, a, b])?;
            Ok(if v[0] == Imm::Bool(true) { v[1] } else { v[2] })
        }
        ExprNode::Cast { to, a } => Ok(eval::cast(*to, eval(a, env)?)),
        ExprNode::Intrinsic { op, args: xs } => {
            let v: Vec<Imm> = xs.iter().map(|x| eval(x, env)).collect::<Result<_, _>>()?;
            eval::intrinsic(*op, &v)
        }
        ExprNode::Load { .. } | ExprNode::VecLoad { .. } | ExprNode::Builtin { .. } => {
            Err(format!("`{e}` cannot be evaluated without a kernel"))
        }
        ExprNode::Extract { .. } | ExprNode::Insert { .. } | ExprNode::Vector { .. } => {
            Err(format!("`{e}` is a vector; index expressions are scalar"))
        }
    }
}

/// Evaluates an `i32` expression to a number.
pub fn eval_i64(e: &Expr, env: &HashMap<Var, Imm>) -> Result<i64, String> {
    eval(e, env)?.as_i128().map(|v| v as i64).ok_or_else(|| format!("`{e}` is not an integer"))
}

/// Evaluates a `bool` expression.
pub fn eval_bool(e: &Expr, env: &HashMap<Var, Imm>) -> Result<bool, String> {
    match eval(e, env)? {
        Imm::Bool(b) => Ok(b),
        _ => Err(format!("`{e}` is not a bool")),
    }
}

/// An `i32` immediate for an environment.
pub fn imm(v: i64) -> Imm {
    Imm::int(Scalar::I32, v as i128)
}

/// `min(a, b)` on `i32`.
pub fn min(a: &Expr, b: &Expr) -> Expr {
    match (as_const(a), as_const(b)) {
        (Some(x), Some(y)) => c(x.min(y)),
        _ => Expr::intrinsic(Intrinsic::Min, [a.clone(), b.clone()]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `c` answers the constant asked for, whatever its table holds: values that share a
    /// slot, negative values and values that wrap to `i32`, asked in changing orders; a value
    /// asked again while its slot still holds it gets the same handle.
    #[test]
    fn constants_are_the_values_asked_for() {
        let values: Vec<i64> =
            (-300..300).chain([4096, 1 << 31, -(1 << 31), (1 << 32) + 5, i64::MAX]).collect();
        for round in 0..3 {
            for &v in values.iter().rev().skip(round) {
                let e = c(v);
                assert_eq!(e, Expr::i32(v as i32), "{v}");
                assert_eq!(as_const(&e), Some(i64::from(v as i32)), "{v}");
            }
        }
        assert!(c(4096).ptr_eq(&c(4096)), "a value asked twice in a row shares its handle");
    }
}
