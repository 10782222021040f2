//! Vector rules: vector types, vector loads and stores, lanes, broadcasts and the alignment
//! of vector accesses where it can be proven from the index expression alone.

use crate::expr::{BinOp, Expr, ExprNode, Imm, Var};
use crate::stmt::Stmt;
use crate::types::{AddrSpace, Scalar, Type, VECTOR_LANES};

use super::{show, Checker, Node};

/// The type each lane of `t` has: a vector's element type, otherwise `t` itself.
pub(super) fn lane_type(t: Type) -> Type {
    match t {
        Type::Vector(s, _) => Type::Scalar(s),
        t => t,
    }
}

/// Why `t` is not a valid vector type, if it is a vector type at all.
pub(super) fn bad_vector_type(t: Type) -> Option<String> {
    match t {
        Type::Vector(s, n) if !VECTOR_LANES.contains(&n) => {
            Some(format!("a vector of {n} lanes of {s}; vectors have 2, 4 or 8 lanes"))
        }
        _ => None,
    }
}

/// The residue of `e` modulo `m` (a power of two), when it follows from `e`'s form alone:
/// constants, and sums, differences, products and left shifts of such, and integer casts
/// (which keep the low bits that a power-of-two residue depends on).
pub fn known_residue(e: &Expr, m: u64) -> Option<u64> {
    let mask = m - 1;
    match e.node() {
        ExprNode::Imm(Imm::Int(_, bits)) => Some(bits & mask),
        ExprNode::Cast { to, a } if to.is_int() && a.ty().is_int() => known_residue(a, m),
        ExprNode::Binary { op, a, b } => {
            let (ra, rb) = (known_residue(a, m), known_residue(b, m));
            match op {
                BinOp::Add => Some(ra?.wrapping_add(rb?) & mask),
                BinOp::Sub => Some(ra?.wrapping_sub(rb?) & mask),
                BinOp::Mul => match (ra, rb) {
                    (Some(0), _) | (_, Some(0)) => Some(0),
                    (Some(x), Some(y)) => Some(x.wrapping_mul(y) & mask),
                    _ => None,
                },
                BinOp::Shl => {
                    let amount = b.as_imm()?.as_i128()?;
                    let width = a.ty().scalar()?.bits() as i128;
                    let amount = amount.rem_euclid(width) as u32;
                    if amount >= 64 || (1u64 << amount).is_multiple_of(m) {
                        return Some(0);
                    }
                    Some(ra?.wrapping_shl(amount) & mask)
                }
                _ => None,
            }
        }
        _ => None,
    }
}

impl Checker<'_> {
    /// Checks a vector load, lane access or vector construction.
    pub(super) fn vector_expr(&mut self, e: &Expr, kids_ok: bool) -> bool {
        if let Some(msg) = bad_vector_type(e.ty()) {
            self.at_expr(e, format!("{}: {msg}", show(e)));
            return false;
        }
        match e.node() {
            ExprNode::VecLoad { buf, index, lanes } => {
                self.reference(buf, || Node::Expr(e.clone()), "load from");
                let Type::Ptr(_, elem) = buf.ty() else {
                    self.at_expr(
                        e,
                        format!(
                            "vector load from `{}`, which is {}, not a pointer",
                            buf.name(),
                            buf.ty()
                        ),
                    );
                    return false;
                };
                if elem == Scalar::Bool {
                    self.at_expr(
                        e,
                        format!("vector load from `{}`, a pointer to bool", buf.name()),
                    );
                    return false;
                }
                if kids_ok {
                    self.vector_index(e, buf, index, *lanes, "vector load from");
                }
                true
            }
            ExprNode::Extract { a, lane } | ExprNode::Insert { a, lane, .. } => {
                if !kids_ok {
                    return false;
                }
                let name =
                    if matches!(e.node(), ExprNode::Extract { .. }) { "extract" } else { "insert" };
                let Type::Vector(elem, n) = a.ty() else {
                    self.at_expr(
                        e,
                        format!("`{name}` needs a vector, but {} is {}", show(a), a.ty()),
                    );
                    return false;
                };
                let mut ok = true;
                if *lane >= n {
                    self.at_expr(
                        e,
                        format!("`{name}` of lane {lane} of {}, which has {n} lanes", show(a)),
                    );
                    ok = false;
                }
                if let ExprNode::Insert { b, .. } = e.node() {
                    if b.ty() != Type::Scalar(elem) {
                        self.at_expr(
                            e,
                            format!(
                                "`insert` of {}, which is {}, into a lane of {} ({})",
                                show(b),
                                b.ty(),
                                show(a),
                                a.ty()
                            ),
                        );
                        ok = false;
                    }
                }
                ok
            }
            ExprNode::Vector { ty, elems } => {
                let Type::Vector(elem, n) = *ty else {
                    self.at_expr(e, format!("vector construction of type {ty}, not a vector type"));
                    return false;
                };
                if elems.len() != 1 && elems.len() != n as usize {
                    self.at_expr(
                        e,
                        format!(
                            "`{ty}(...)` takes one value (a broadcast) or {n} lanes, got {}",
                            elems.len()
                        ),
                    );
                    return false;
                }
                if !kids_ok {
                    return false;
                }
                if let Some(bad) = elems.iter().find(|x| x.ty() != Type::Scalar(elem)) {
                    self.at_expr(
                        e,
                        format!("lane {} of `{ty}(...)` is {}, not {elem}", show(bad), bad.ty()),
                    );
                    return false;
                }
                true
            }
            _ => true,
        }
    }

    /// Checks the index of a vector access of `lanes` lanes: an integer, and not provably
    /// misaligned (a multiple of `lanes`). Misalignment that depends on run-time values is
    /// the interpreter's error instead.
    fn vector_index(&mut self, at: &Expr, buf: &Var, index: &Expr, lanes: u8, what: &str) {
        if !index.ty().is_int() {
            self.at_expr(
                index,
                format!(
                    "index {} of the {what} `{}` is {}; indices must be integers",
                    show(index),
                    buf.name(),
                    index.ty()
                ),
            );
            return;
        }
        if let Some(r) = known_residue(index, lanes as u64) {
            if r != 0 {
                self.at_expr(
                    at,
                    format!(
                        "misaligned {what} `{}`: index {} is {r} more than a multiple of {lanes}; \
                         a vector of {lanes} lanes must start at an index that is a multiple of {lanes}",
                        buf.name(),
                        show(index)
                    ),
                );
            }
        }
    }

    /// Checks `vstore(buf, index, value);`.
    pub(super) fn vec_store(&mut self, s: &Stmt, buf: &Var, index: &Expr, value: &Expr) {
        self.reference(buf, || Node::Stmt(s.clone()), "store through");
        let elem = match buf.ty() {
            Type::Ptr(space, elem) => {
                if space == AddrSpace::Constant {
                    self.at_stmt(
                        s,
                        format!(
                            "vector store through `{}`, a pointer to constant memory (read-only)",
                            buf.name()
                        ),
                    );
                }
                Some(elem)
            }
            t => {
                self.at_stmt(
                    s,
                    format!("vector store through `{}`, which is {t}, not a pointer", buf.name()),
                );
                None
            }
        };
        let index_ok = self.expr(index);
        if self.expr(value) {
            match (value.ty(), elem) {
                // A mask (`boolxN`, what a lane-wise compare yields) is a value only.
                (Type::Vector(Scalar::Bool, _), _) => self.at_expr(
                    value,
                    format!(
                        "vector store of {}, a mask ({}); bool vectors cannot be stored \
                         (select numbers with it first: `m ? {}x4(1) : {}x4(0)`)",
                        show(value),
                        value.ty(),
                        Scalar::U32,
                        Scalar::U32
                    ),
                ),
                (Type::Vector(ve, lanes), Some(elem)) if ve == elem && index_ok => {
                    let at = value.clone();
                    self.vector_index(&at, buf, index, lanes, "vector store to");
                }
                (Type::Vector(ve, _), Some(elem)) if ve == elem => {}
                (t, Some(elem)) => self.at_expr(
                    value,
                    format!(
                        "vector store of {}, which is {t}, to `{}`, which holds {elem} elements \
                         (store a vector of {elem}, e.g. {elem}x4)",
                        show(value),
                        buf.name()
                    ),
                ),
                _ => {}
            }
        }
    }
}
