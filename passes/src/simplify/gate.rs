//! When the e-graph is worth running: [`egg_may_help`] looks at the operator part of an
//! expression (what becomes e-graph nodes; loads, casts and other leaves are opaque) and
//! answers `false` only where no sequence of the rules in [`super::rules`] can reach a
//! strictly cheaper form, so skipping egg there loses nothing.
//!
//! Why `false` is safe. Every rule that can lower the cost needs one of:
//! - a unary operator (`-(-x)`, `!(a < b)`, `0 - x` written as a negation, ...), a `select`,
//!   `min` or `max` (their rules are cheap to trigger, so these always go to egg);
//! - a special integer or boolean constant (0, 1, -1, all ones, `true`/`false`). Float
//!   constants never count: the only float rules with constants are `x * 1.0`, `x / 1.0`,
//!   `x - (+0.0)` and `x + (-0.0)` (no reassociation), which the pre-pass has applied;
//!   `0.0 * x[i]` (a kernel's scale set to 0 by constant propagation) is already final;
//! - two constants that associativity, commutativity or distribution can bring together
//!   (for integers: two constants in one connected region of `+ - *` nodes, or of `/ %`
//!   nodes, or of one bitwise operator);
//! - an operand that occurs twice (`x - x`, `(x / c) * c + x % c`, factoring);
//! - a work-item id together with its size (`local_id(d) < local_size(d)`).
//!
//! Without any of these, the operator part is a read-once formula over distinct leaves with
//! at most one constant per region, which commutativity, associativity and distribution
//! only rearrange at equal or higher cost.
//!
//! An affine region (integer `+`, `-`, negation and multiplications by constants over atoms
//! that cannot fail, `affine::is_affine_region`) has been through the affine normal form
//! just before: its constants are folded, its equal terms merged, and its rebuilt form
//! is taken whenever cheaper, so its constants and negations count for nothing here (what
//! the ring rules could reach from it, the normal form has reached). `tests/simplify_gate.rs` checks the claim on
//! random expressions against full e-graph runs.

use kiln_ir::{BinOp, Builtin, Expr, ExprNode, ExprSet, Imm, Scalar, UnOp};

use super::affine;

use super::lang::is_operator;

/// Operator families whose constants rules can combine.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    Ring,
    DivRem,
    And,
    Or,
    Xor,
    /// Shifts, comparisons, logic: no rule combines their constants with anything.
    Other,
}

fn family(op: BinOp) -> Family {
    use BinOp::*;
    match op {
        Add | Sub | Mul => Family::Ring,
        Div | Rem => Family::DivRem,
        And => Family::And,
        Or => Family::Or,
        Xor => Family::Xor,
        _ => Family::Other,
    }
}

#[derive(Default)]
struct Scan {
    leaves: ExprSet,
    builtins: Vec<(Builtin, u8)>,
    /// Constants seen per region, and whether the region is affine (its constants are
    /// settled by the normal form, [`super::affine`]).
    regions: Vec<(u8, bool)>,
    hit: bool,
}

/// True if the e-graph might find something strictly cheaper than `e` at its top level (the
/// operator part; what is inside opaque leaves is simplified on its own).
pub fn egg_may_help(e: &Expr) -> bool {
    if !is_operator(e) {
        return false;
    }
    let mut s = Scan::default();
    scan(e, None, &mut s);
    if s.hit {
        return true;
    }
    s.builtins.iter().any(|&(k, d)| {
        let partner = match k {
            Builtin::LocalId => Builtin::LocalSize,
            Builtin::GroupId => Builtin::NumGroups,
            _ => return false,
        };
        s.builtins.contains(&(partner, d))
    })
}

fn special(k: &Imm) -> bool {
    match *k {
        Imm::Bool(_) => true,
        Imm::Int(t, _) => {
            let v = k.as_i128();
            v == Some(0) || v == Some(1) || v == Some(-1) || v == t.int_max()
        }
        Imm::Float(..) => false,
    }
}

fn scan(e: &Expr, parent: Option<(Family, usize)>, s: &mut Scan) {
    if s.hit {
        return;
    }
    if e.as_imm().is_some() {
        return;
    }
    if !is_operator(e) {
        if let ExprNode::Builtin { kind, dim } = e.node() {
            s.builtins.push((*kind, *dim));
        }
        // A repeated leaf: cancellation, factoring or an index identity may apply.
        if !s.leaves.insert(e.clone()) {
            s.hit = true;
        }
        return;
    }
    let in_affine = |p: Option<(Family, usize)>, s: &Scan| {
        p.is_some_and(|(f, r)| f == Family::Ring && s.regions[r].1)
    };
    let (op, a, b) = match e.node() {
        ExprNode::Binary { op, a, b } => (*op, a, b),
        // A negation inside an affine region is one of its terms' signs.
        ExprNode::Unary { op: UnOp::Neg, a } if in_affine(parent, s) => {
            return scan(a, parent, s);
        }
        ExprNode::Unary { op: UnOp::Neg, a } if affine::is_affine_region(e) => {
            s.regions.push((0, true));
            let region = Some((Family::Ring, s.regions.len() - 1));
            return scan(a, region, s);
        }
        _ => {
            // Unary operators, select, min and max.
            s.hit = true;
            return;
        }
    };
    let ty = a.ty().scalar().unwrap_or(Scalar::Bool);
    let region = if ty.is_int() {
        let fam = family(op);
        match parent {
            Some((f, r)) if f == fam && fam != Family::Other => Some((fam, r)),
            _ => {
                let affine = fam == Family::Ring && affine::is_affine_region(e);
                s.regions.push((0, affine));
                Some((fam, s.regions.len() - 1))
            }
        }
    } else {
        None
    };
    let affine = in_affine(region, s);
    for c in [a, b] {
        match c.as_imm() {
            // The normal form has folded, merged and dropped what these constants allow.
            Some(_) if affine => {}
            Some(k) if special(k) => s.hit = true,
            Some(_) => {
                if let Some((_, r)) = region {
                    s.regions[r].0 += 1;
                    if s.regions[r].0 >= 2 {
                        s.hit = true;
                    }
                }
            }
            None => scan(c, region, s),
        }
    }
}
