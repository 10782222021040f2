//! Expression rules. Expressions are checked bottom-up with an explicit stack (arbitrarily
//! deep trees cannot overflow it); a node whose own rule fails is *poisoned*, and the rules
//! of its ancestors that depend on its type are skipped, so one mistake gives one error.

use crate::expr::{canonical_int, round_float, BinOp, Expr, ExprNode, Imm, Intrinsic, UnOp};
use crate::types::{Scalar, Type};
use smallvec::{smallvec, SmallVec};

use super::{show, Checker, Node};

const F16_NOTE: &str = "; f16 is a storage type (load, store and cast it; convert with `as f32`)";
const BF16_NOTE: &str = "; bf16 is a storage type (load, store and cast it; convert with `as f32`)";

fn f16_note(t: Type) -> &'static str {
    if t == Type::F16 {
        F16_NOTE
    } else if t == Type::BF16 {
        BF16_NOTE
    } else {
        ""
    }
}

fn f16_note2(a: Type, b: Type) -> &'static str {
    if a == Type::BF16 || b == Type::BF16 {
        BF16_NOTE
    } else if a == Type::F16 || b == Type::F16 {
        F16_NOTE
    } else {
        ""
    }
}

impl Checker<'_> {
    /// Checks an expression tree; returns true if its type ([`Expr::ty`]) can be trusted.
    pub(super) fn expr(&mut self, root: &Expr) -> bool {
        // On the stack for the usual statement-sized tree (every statement's expressions
        // come through here); each node is listed with its operand count once expanded.
        // Each node's operand list is built once, when it is expanded: its first fragment
        // operand, if any, rides along to its own check (the operands' checks come first).
        // A node without operands is checked at once.
        const UNEXPANDED: usize = usize::MAX;
        let mut todo: SmallVec<[(&Expr, usize, Option<&Expr>); 32]> =
            smallvec![(root, UNEXPANDED, None)];
        let mut done: SmallVec<[bool; 32]> = SmallVec::new();
        while let Some((e, n, frag)) = todo.pop() {
            if n == UNEXPANDED {
                let kids = e.children();
                if kids.is_empty() {
                    let ok = self.expr_node(e, true, None);
                    done.push(ok);
                    continue;
                }
                let frag = kids.iter().find(|k| k.ty().frag().is_some()).copied();
                todo.push((e, kids.len(), frag));
                todo.extend(kids.iter().rev().map(|k| (*k, UNEXPANDED, None)));
                continue;
            }
            let base = done.len().saturating_sub(n);
            let kids_ok = done[base..].iter().all(|&ok| ok);
            done.truncate(base);
            let ok = self.expr_node(e, kids_ok, frag);
            done.push(ok);
        }
        done.pop().unwrap_or(false)
    }

    /// Checks one node whose children have been checked (`kids_ok`: all are well typed;
    /// `frag`: its first operand of a fragment type, if any).
    fn expr_node(&mut self, e: &Expr, kids_ok: bool, frag: Option<&Expr>) -> bool {
        if !matches!(e.node(), ExprNode::Var(_)) {
            if let Some(k) = frag {
                self.at_expr(
                    e,
                    format!(
                        "{} is a fragment ({}); fragments only move through variables and \
                         matrix calls (store one with `frag_store` to compute with it)",
                        show(k),
                        k.ty()
                    ),
                );
                return false;
            }
        }
        match e.node() {
            ExprNode::Var(v) => {
                self.reference(v, || Node::Expr(e.clone()), "use of");
                true
            }
            ExprNode::Imm(i) => match *i {
                Imm::Int(t, _) if !t.is_int() => {
                    self.at_expr(
                        e,
                        format!("malformed immediate: an integer constant of type {t}"),
                    );
                    false
                }
                Imm::Float(t, _) if !t.is_float() => {
                    self.at_expr(e, format!("malformed immediate: a float constant of type {t}"));
                    false
                }
                Imm::Int(t, bits) if canonical_int(t, bits) != bits => {
                    self.at_expr(
                        e,
                        format!(
                            "malformed immediate: bits {bits:#x} are not a canonical {t} (build \
                             integer constants with `Imm::int`)"
                        ),
                    );
                    true
                }
                Imm::Float(t, v) if !v.is_nan() && round_float(t, v).to_bits() != v.to_bits() => {
                    self.at_expr(
                        e,
                        format!(
                            "malformed immediate: {v:e} is not a {t} value (build float \
                             constants with `Imm::float`)"
                        ),
                    );
                    true
                }
                _ => true,
            },
            ExprNode::Unary { op, a } => {
                if !kids_ok {
                    return false;
                }
                let t = super::vector::lane_type(a.ty());
                let (ok, need) = match op {
                    UnOp::Neg => (t.is_arith(), "an arithmetic operand (integer, f32 or f64)"),
                    UnOp::Not => (t.is_bool(), "a bool operand or mask (use `~` for integers)"),
                    UnOp::BitNot => (t.is_int(), "an integer operand"),
                };
                if !ok {
                    self.at_expr(
                        e,
                        format!(
                            "unary `{}` needs {need}, but {} is {t}{}",
                            op.symbol(),
                            show(a),
                            f16_note(t)
                        ),
                    );
                }
                ok
            }
            ExprNode::Binary { op, a, b } => kids_ok && self.binary(e, *op, a, b),
            ExprNode::Select { cond, a, b } => {
                if !kids_ok {
                    return false;
                }
                let mut ok = true;
                // A mask (`boolxN`) selects lane by lane between vectors of N lanes.
                let mask_ok = matches!((cond.ty(), a.ty()),
                    (Type::Vector(Scalar::Bool, n), Type::Vector(_, m)) if n == m);
                if !cond.ty().is_bool() && !mask_ok {
                    self.at_expr(
                        e,
                        format!(
                            "condition {} of select is {}, not bool (or a mask of as many lanes \
                             as the arms)",
                            show(cond),
                            cond.ty()
                        ),
                    );
                    ok = false;
                }
                let (ta, tb) = (a.ty(), b.ty());
                if ta != tb {
                    self.at_expr(
                        e,
                        format!(
                            "arms of select have different types: {} is {ta}, {} is {tb}{}",
                            show(a),
                            show(b),
                            f16_note2(ta, tb)
                        ),
                    );
                    ok = false;
                } else if super::vector::lane_type(ta).scalar().is_none()
                    || super::vector::lane_type(ta).is_float()
                        && !super::vector::lane_type(ta).is_arith()
                {
                    self.at_expr(
                        e,
                        format!(
                            "select needs scalar arms other than f16 and bf16, but {} and {} are {ta}{}",
                            show(a),
                            show(b),
                            f16_note(ta)
                        ),
                    );
                    ok = false;
                }
                ok
            }
            ExprNode::Cast { to, a } => {
                if kids_ok {
                    // A vector is cast lane by lane (`v as i32` of an `f32x4` is an `i32x4`).
                    if let Type::Ptr(..) = a.ty() {
                        self.at_expr(
                            e,
                            format!(
                                "cannot cast {}, a pointer ({}), to {to}; casts convert scalars \
                                 only",
                                show(a),
                                a.ty()
                            ),
                        );
                    }
                }
                // The result type is `to` whatever the operand was.
                true
            }
            ExprNode::Load { buf, index } => {
                self.reference(buf, || Node::Expr(e.clone()), "load from");
                let is_ptr = buf.ty().is_ptr();
                if !is_ptr {
                    self.at_expr(
                        e,
                        format!(
                            "load {} from `{}`, which is {}, not a pointer",
                            show(e),
                            buf.name(),
                            buf.ty()
                        ),
                    );
                }
                if kids_ok && !index.ty().is_int() {
                    self.at_expr(
                        index,
                        format!(
                            "index {} of the load from `{}` is {}; indices must be integers",
                            show(index),
                            buf.name(),
                            index.ty()
                        ),
                    );
                }
                is_ptr
            }
            ExprNode::Builtin { kind, dim } => {
                if *dim > 2 {
                    self.at_expr(
                        e,
                        format!(
                            "`{}({dim})`: dimension {dim} is out of range; built-ins take \
                             dimension 0, 1 or 2",
                            kind.name()
                        ),
                    );
                }
                true
            }
            ExprNode::VecLoad { .. }
            | ExprNode::Extract { .. }
            | ExprNode::Insert { .. }
            | ExprNode::Vector { .. } => self.vector_expr(e, kids_ok),
            ExprNode::Intrinsic { op, args } => {
                let name = op.name();
                if args.len() != op.arity() {
                    let s = if op.arity() == 1 { "" } else { "s" };
                    self.at_expr(
                        e,
                        format!("`{name}` takes {} argument{s}, got {}", op.arity(), args.len()),
                    );
                    return false;
                }
                if !kids_ok {
                    return false;
                }
                let t = super::vector::lane_type(args[0].ty());
                if let Some(other) = args.iter().find(|x| x.ty() != args[0].ty()) {
                    self.at_expr(
                        e,
                        format!(
                            "arguments of `{name}` have different types: {} is {t}, {} is {}{}",
                            show(&args[0]),
                            show(other),
                            other.ty(),
                            f16_note2(t, other.ty())
                        ),
                    );
                    return false;
                }
                let (ok, need) = if op.float_only() {
                    (matches!(t, Type::F32 | Type::F64), "f32 or f64 arguments")
                } else if op.int_only() {
                    (t.is_int(), "integer arguments")
                } else {
                    (t.is_arith(), "arithmetic arguments (integers, f32 or f64)")
                };
                if !ok {
                    let what = if args.len() == 1 {
                        format!("{} is {t}", show(&args[0]))
                    } else {
                        format!("its arguments are {t}")
                    };
                    let hint = if *op != Intrinsic::Abs && op.float_only() && t.is_int() {
                        " (cast with `as f32`)"
                    } else {
                        ""
                    };
                    self.at_expr(
                        e,
                        format!("`{name}` needs {need}, but {what}{hint}{}", f16_note(t)),
                    );
                }
                ok
            }
        }
    }

    fn binary(&mut self, e: &Expr, op: BinOp, a: &Expr, b: &Expr) -> bool {
        let sym = op.symbol();
        let (ta, tb) = (a.ty(), b.ty());
        if op.is_logical() {
            let mut ok = true;
            for (x, t) in [(a, ta), (b, tb)] {
                if !t.is_bool() {
                    self.at_expr(
                        e,
                        format!(
                            "operand {} of `{sym}` is {t}, not bool (compare it, e.g. `x != 0`)",
                            show(x)
                        ),
                    );
                    ok = false;
                }
            }
            return ok;
        }
        if ta != tb {
            self.at_expr(
                e,
                format!(
                    "operands of `{sym}` have different types: {} is {ta}, {} is {tb}{}",
                    show(a),
                    show(b),
                    f16_note2(ta, tb)
                ),
            );
            return false;
        }
        let t = super::vector::lane_type(ta);
        let is_f16 = t == Type::F16 || t == Type::BF16;
        let (ok, need) = match op {
            BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div => {
                (t.is_arith(), "arithmetic operands (integers, f32 or f64)")
            }
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
                (t.is_arith(), "arithmetic operands (integers, f32 or f64)")
            }
            BinOp::Rem | BinOp::Shl | BinOp::Shr => (t.is_int(), "integer operands"),
            BinOp::And | BinOp::Or | BinOp::Xor => {
                (t.is_int() || t.is_bool(), "integer or bool operands")
            }
            BinOp::Eq | BinOp::Ne => {
                (t.scalar().is_some() && !is_f16, "scalar operands other than f16 and bf16")
            }
            BinOp::LogicAnd | BinOp::LogicOr => (true, ""),
        };
        if !ok {
            let hint = if op == BinOp::Rem && t.is_float() && !is_f16 {
                " (`%` is defined on integers only)"
            } else {
                ""
            };
            self.at_expr(
                e,
                format!(
                    "`{sym}` needs {need}, but {} and {} are {t}{hint}{}",
                    show(a),
                    show(b),
                    f16_note(t)
                ),
            );
        }
        ok
    }
}
