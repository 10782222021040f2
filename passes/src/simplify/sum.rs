//! Integer sums as a list of signed terms: `(i + j + n) - (j + n)` is `i`. Flattening a tree
//! of `+` and `-`, cancelling a term against an equal one of opposite sign and folding the
//! constants is what the e-graph reaches through associativity, commutativity,
//! `a - b = a + (-b)`, `a + (-a) = 0` and constant folding, but only after growing a large
//! e-graph; here it is one walk. A term is only cancelled when it cannot fail (an error is
//! an observable result), and the result is only taken when strictly cheaper.

use kiln_ir::eval;
use kiln_ir::{BinOp, Expr, ExprNode, Imm, UnOp};

use super::expr_cost;
use super::pre::same;

/// Sums with more terms are left to the e-graph (cancellation here is quadratic).
const MAX_TERMS: usize = 16;

struct Sum {
    /// Non-constant terms and whether each is subtracted.
    terms: Vec<(bool, Expr)>,
    /// The folded constant part.
    k: Imm,
    /// How many constants were folded into `k`.
    consts: u32,
}

impl Sum {
    fn add(&mut self, e: &Expr, neg: bool) -> Option<()> {
        match e.node() {
            ExprNode::Binary { op: BinOp::Add, a, b } => {
                self.add(a, neg)?;
                self.add(b, neg)
            }
            ExprNode::Binary { op: BinOp::Sub, a, b } => {
                self.add(a, neg)?;
                self.add(b, !neg)
            }
            ExprNode::Unary { op: UnOp::Neg, a } => self.add(a, !neg),
            ExprNode::Imm(c) => {
                let op = if neg { BinOp::Sub } else { BinOp::Add };
                self.k = eval::binary(op, self.k, *c).ok()?;
                self.consts += 1;
                Some(())
            }
            _ => {
                if self.terms.len() >= MAX_TERMS {
                    return None;
                }
                self.terms.push((neg, e.clone()));
                Some(())
            }
        }
    }
}

/// `a op b` (`op` is integer `+` or `-`) with equal terms of opposite signs cancelled and
/// constants folded, if that is strictly cheaper.
pub(super) fn cancel(op: BinOp, a: &Expr, b: &Expr) -> Option<Expr> {
    let ty = a.ty().scalar().filter(|s| s.is_int())?;
    // Nothing to cancel or fold (the answer below is `None`), told without a list of the
    // terms: asked of every integer `+` and `-` the cheap pass meets, bottom-up, so a chain
    // of `n` terms was listed (each term's handle taken) `n` times over.
    let mut shape = Shape::default();
    shape.scan(a, false);
    shape.scan(b, op == BinOp::Sub);
    if shape.consts < 2 && !(shape.signs[0] && shape.signs[1]) {
        return None;
    }
    let mut s = Sum { terms: Vec::new(), k: Imm::int(ty, 0), consts: 0 };
    s.add(a, false)?;
    s.add(b, op == BinOp::Sub)?;
    let mut cancelled = false;
    let mut i = 0;
    while i < s.terms.len() {
        let (neg, t) = s.terms[i].clone();
        let partner = (i + 1..s.terms.len())
            .find(|&j| s.terms[j].0 != neg && same(&s.terms[j].1, &t) && !t.may_fail());
        if let Some(j) = partner {
            s.terms.remove(j);
            s.terms.remove(i);
            cancelled = true;
        } else {
            i += 1;
        }
    }
    if !cancelled && s.consts < 2 {
        return None;
    }
    let r = rebuild(s.terms, s.k);
    let original = Expr::binary(op, a.clone(), b.clone());
    (expr_cost(&r) < expr_cost(&original)).then_some(r)
}

/// What [`cancel`] needs to know before listing a sum's terms: whether it has terms of
/// both signs (only those can cancel) and how many constants (two fold into one).
#[derive(Default)]
struct Shape {
    /// Whether some term is added (`[0]`) or subtracted (`[1]`).
    signs: [bool; 2],
    /// The constants, as [`Sum::add`] meets them.
    consts: u32,
}

impl Shape {
    /// [`Sum::add`]'s walk, noting signs and constants only.
    fn scan(&mut self, e: &Expr, neg: bool) {
        match e.node() {
            ExprNode::Binary { op: BinOp::Add, a, b } => {
                self.scan(a, neg);
                self.scan(b, neg);
            }
            ExprNode::Binary { op: BinOp::Sub, a, b } => {
                self.scan(a, neg);
                self.scan(b, !neg);
            }
            ExprNode::Unary { op: UnOp::Neg, a } => self.scan(a, !neg),
            ExprNode::Imm(_) => self.consts += 1,
            _ => self.signs[usize::from(neg)] = true,
        }
    }
}

/// `-e` for an integer sum `e`, with every term's sign flipped, if that is cheaper.
pub(super) fn negated(e: &Expr) -> Option<Expr> {
    let ty = e.ty().scalar().filter(|s| s.is_int())?;
    let mut s = Sum { terms: Vec::new(), k: Imm::int(ty, 0), consts: 0 };
    s.add(e, true)?;
    let r = rebuild(s.terms, s.k);
    (expr_cost(&r) < expr_cost(e) + 1).then_some(r)
}

/// Added terms in order, then subtracted ones, then the constant (subtracted when it is
/// negative, which reads better and costs the same). With only subtracted terms, the
/// constant comes first (`k - a - b`, cheaper than `-a - b + k`).
fn rebuild(terms: Vec<(bool, Expr)>, k: Imm) -> Expr {
    let (plus, minus): (Vec<_>, Vec<_>) = terms.into_iter().partition(|(neg, _)| !neg);
    if plus.is_empty() && !minus.is_empty() && !k.is_zero() {
        return minus
            .into_iter()
            .fold(Expr::imm(k), |acc, (_, t)| Expr::binary(BinOp::Sub, acc, t));
    }
    let mut acc: Option<Expr> = None;
    for (_, t) in plus {
        acc = Some(match acc {
            None => t,
            Some(x) => Expr::binary(BinOp::Add, x, t),
        });
    }
    for (_, t) in minus {
        acc = Some(match acc {
            None => Expr::unary(UnOp::Neg, t),
            Some(x) => Expr::binary(BinOp::Sub, x, t),
        });
    }
    let Some(acc) = acc else { return Expr::imm(k) };
    if k.is_zero() {
        return acc;
    }
    let negative = k.as_i128().is_some_and(|v| {
        let ty = k.scalar();
        if ty.is_signed() {
            v < 0
        } else {
            // An unsigned constant above half the range is a small negative one, wrapped.
            ty.int_max().is_some_and(|m| v > m / 2)
        }
    });
    match eval::unary(UnOp::Neg, k) {
        Ok(nk) if negative => Expr::binary(BinOp::Sub, acc, Expr::imm(nk)),
        _ => Expr::binary(BinOp::Add, acc, Expr::imm(k)),
    }
}
