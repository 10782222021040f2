//! Stores on both sides of an `if` to the same elements, as one store of a `select`, for the
//! lanes.
//!
//! Users write a per-element choice as a branch with a store on each side (ROT13's
//! `if c >= 97 && c <= 122 { dst[i] = ...; } else if ... { dst[i] = ...; } else { dst[i] =
//! c; }`). On the lanes, a divergent branch runs each side under its mask, so each side's
//! store is a masked one: for 8- and 16-bit elements, for which no masked store exists, eight
//! lane tests and byte stores per side, whose branches mispredict on mixed data (the ROT13
//! kernel of the seventh cpu suite set ran at 0.05x a Rust loop). Here, before the lanes'
//! code is generated, such an `if` becomes `dst[i] = c ? a : b;`: one store of every lane,
//! which the usual store paths write whole (a packed `vmovq` under a guard's unmasked copy).
//!
//! ## The form
//!
//! `if c { S } else { T }` where `S` and `T` are each a sequence of stores, the same number,
//! the `j`-th of each to the same buffer at the same index expression (a side may hold `if`s
//! of this form, `else if` chains included, which count as the stores they become). It becomes the sequence of stores `buf_j[index_j] = c ? a_j : b_j`.
//! Every index, value and inner condition (of an `if` in a side) must be *quiet*: no loads,
//! integer `/` and `%` only by a constant that cannot fault (not 0, for `i32` not -1), and
//! no `exp`, `log`, `sin` or `cos` (nothing costly: the merged form computes both sides in
//! every lane); the values merged from one `if` have at most [`MAX_NODES`] nodes in all. The
//! outer condition `c` must be quiet too where the sides hold more than one store (each
//! merged store computes it again, after the ones before it have stored); before a single
//! store it may be anything (`if x[i] > 0.0 { ... }`): every lane computes it as written.
//!
//! ## Why the result is the interpreter's
//!
//! Per work-item, the interpreter evaluates `c`, then the stores of the side it takes, in
//! order. The merged form evaluates `c` (once per store: where there are several it is
//! quiet, so each time gives the same value without a fault) and both sides' values, then
//! stores, in the same order, to the same elements (the index expressions are the same and name nothing the
//! sides assign: the sides are stores only), the value of the side `c` picks. The other
//! side's values are computed and dropped: quiet expressions read no memory and cannot
//! fault (integers wrap, float operations and casts never fail), so nothing of them shows;
//! a fault of a loading `c` is the same fault, of the same lane, before anything is stored,
//! as `c` is computed before the store and its index and value cannot fault.
//! The stores' own faults (an index out of bounds) are those of the same stores at the same
//! indices, in the same order. Lanes of a batch run interleaved either way, which for a
//! race-free kernel gives the same memory.

use kiln_ir::{
    walk_mutate_stmt, BinOp, Expr, ExprNode, Intrinsic, Kernel, Mutator, Stmt, StmtNode,
};

use super::scalar::safe_divisor_expr;

/// The most nodes of the values and conditions one merged `if` computes in every lane.
const MAX_NODES: usize = 64;

/// The kernel with every `if` of the form above as stores of `select`s (see the module
/// docs); the same kernel where none qualifies.
pub(crate) fn merge_if_stores(k: &Kernel) -> Kernel {
    let mut m = Merge { changed: false };
    let body = m.mutate_stmt(k.body());
    if m.changed {
        k.with_body(body)
    } else {
        k.clone()
    }
}

/// Replaces each `if` of the form in a block by its stores.
struct Merge {
    changed: bool,
}

impl Mutator for Merge {
    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        let s = walk_mutate_stmt(self, s);
        let StmtNode::Block(list) = s.node() else { return s };
        let parts: Vec<_> = list.iter().map(|x| merged(x, true)).collect();
        if parts.iter().all(Option::is_none) {
            return s;
        }
        self.changed = true;
        let out =
            parts.into_iter().zip(list).flat_map(|(p, x)| p.unwrap_or_else(|| vec![x.clone()]));
        Stmt::block(out)
    }
}

/// The stores `s` becomes, if it is an `if` of the form; `outer`: the `if` is a statement
/// of a block, not a side of another.
fn merged(s: &Stmt, outer: bool) -> Option<Vec<Stmt>> {
    let StmtNode::If { cond, then, otherwise: Some(otherwise) } = s.node() else { return None };
    let (a, b) = (stores(then)?, stores(otherwise)?);
    // An outer `if`'s condition is computed in every lane as written, so it may load and
    // fault, but only once: before a single store.
    let cond_ok = quiet(cond) || (outer && a.len() == 1);
    if a.is_empty() || a.len() != b.len() || !cond_ok {
        return None;
    }
    let mut nodes = 0;
    let mut out = Vec::with_capacity(a.len());
    for (sa, sb) in a.iter().zip(&b) {
        let (
            StmtNode::Store { buf, index, value: va },
            StmtNode::Store { buf: buf_b, index: index_b, value: vb },
        ) = (sa.node(), sb.node())
        else {
            unreachable!("`stores` gives stores")
        };
        let same = buf.name() == buf_b.name() && index == index_b;
        if !same || !quiet(index) || !quiet(va) || !quiet(vb) {
            return None;
        }
        nodes += va.size() + vb.size();
        let value = Expr::select(cond.clone(), va.clone(), vb.clone());
        out.push(Stmt::store(buf, index.clone(), value));
    }
    (nodes <= MAX_NODES).then_some(out)
}

/// The stores of a side that is stores only (or `if`s of the form), in order.
fn stores(s: &Stmt) -> Option<Vec<Stmt>> {
    match s.node() {
        StmtNode::Store { .. } => Some(vec![s.clone()]),
        StmtNode::If { .. } => merged(s, false),
        StmtNode::Block(list) => {
            let mut out = Vec::new();
            for s in list {
                out.extend(stores(s)?);
            }
            Some(out)
        }
        _ => None,
    }
}

/// True if `e` reads no memory, cannot fault and is cheap (see the module docs).
fn quiet(e: &Expr) -> bool {
    match e.node() {
        ExprNode::Var(_) | ExprNode::Imm(_) | ExprNode::Builtin { .. } => true,
        ExprNode::Binary { op: BinOp::Div | BinOp::Rem, a, b }
            if !a.ty().is_float() && !safe_divisor_expr(b) =>
        {
            false
        }
        ExprNode::Intrinsic {
            op: Intrinsic::Exp | Intrinsic::Log | Intrinsic::Sin | Intrinsic::Cos,
            ..
        } => false,
        ExprNode::Unary { .. }
        | ExprNode::Binary { .. }
        | ExprNode::Select { .. }
        | ExprNode::Cast { .. }
        | ExprNode::Intrinsic { .. } => e.children().into_iter().all(quiet),
        _ => false,
    }
}
