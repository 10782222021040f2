//! Statement rules: bindings, assignments, stores, arrays, control flow and calls.

use crate::expr::{Expr, ExprNode, Var};
use crate::stmt::{AtomicOp, FuncKind, Stmt, StmtNode};
use crate::types::{AddrSpace, Scalar, Type};

use super::{fence_text, show, Checker, Kind, Node, Place};

impl Checker<'_> {
    /// Checks the declared type of a `let`/`var` against its value.
    fn binding_value(&mut self, s: &Stmt, keyword: &str, var: &Var, value: &Expr) {
        if let Type::Ptr(..) = var.ty() {
            self.at_stmt(
                s,
                format!(
                    "`{keyword} {}` binds a pointer ({}); `let` and `var` bind scalars only \
                     (only parameters and arrays are pointers)",
                    var.name(),
                    var.ty()
                ),
            );
        }
        if let Some(msg) = super::vector::bad_vector_type(var.ty()) {
            self.at_stmt(s, format!("`{keyword} {}`: {msg}", var.name()));
        }
        self.frag_type(s, || format!("`{keyword} {}`", var.name()), var.ty());
        if self.expr(value) && value.ty() != var.ty() && !var.ty().is_ptr() {
            self.at_expr(
                value,
                format!(
                    "`{keyword} {}` is declared {} but its value {} is {}",
                    var.name(),
                    var.ty(),
                    show(value),
                    value.ty()
                ),
            );
        }
    }

    pub(super) fn stmt(&mut self, s: &Stmt, place: Place) {
        match s.node() {
            // The checks before the binding, and the statements that bind nothing, read
            // nothing but the statement and the names it looks up: a shared one is checked
            // once per meaning of those names (see `super::shared`).
            StmtNode::Let { var, value } => {
                self.once(s, |c| c.binding_value(s, "let", var, value));
                self.bind(var, Kind::Let, s);
            }
            StmtNode::Decl { var, init } => {
                self.once(s, |c| c.binding_value(s, "var", var, init));
                self.bind(var, Kind::Mutable, s);
            }
            StmtNode::Assign { var, value } => self.once(s, |c| c.assign(s, var, value)),
            StmtNode::Store { buf, index, value } => {
                self.once(s, |c| c.store(s, buf, index, value))
            }
            StmtNode::VecStore { buf, index, value } => {
                self.once(s, |c| c.vec_store(s, buf, index, value))
            }
            StmtNode::Alloc { var, count } => self.alloc(s, var, *count, place),
            StmtNode::If { cond, then, otherwise } => {
                self.condition(cond, "if");
                self.block_body(then, Some("an `if`"));
                if let Some(o) = otherwise {
                    self.block_body(o, Some("an `else`"));
                }
            }
            StmtNode::While { cond, body } => {
                self.condition(cond, "while");
                self.block_body(body, Some("a `while` loop"));
            }
            StmtNode::For { var, lo, hi, step, body } => {
                if !var.ty().is_int() {
                    self.at_stmt(
                        s,
                        format!(
                            "loop counter `{}` is {}; `for` counters must be integers",
                            var.name(),
                            var.ty()
                        ),
                    );
                }
                for (e, what) in [(lo, "lower bound"), (hi, "upper bound"), (step, "step")] {
                    if self.expr(e) && e.ty() != var.ty() {
                        self.at_expr(
                            e,
                            format!(
                                "{what} {} of the `for` loop is {} but its counter `{}` is {}",
                                show(e),
                                e.ty(),
                                var.name(),
                                var.ty()
                            ),
                        );
                    }
                }
                self.scopes.push();
                self.bind(var, Kind::Counter, s);
                self.block_body(body, Some("a `for` loop"));
                self.scopes.pop();
            }
            StmtNode::Block(stmts) => {
                let inner = place.or(Some("a nested block"));
                self.scopes.push();
                for x in stmts {
                    self.stmt(x, inner);
                }
                self.scopes.pop();
            }
            StmtNode::Call { result, func, args } => {
                let name = func.name();
                match func.kind() {
                    FuncKind::Barrier(f) | FuncKind::Fence(f) => {
                        for a in args {
                            self.expr(a);
                        }
                        if !args.is_empty() {
                            self.at_stmt(
                                s,
                                format!("`{name}` takes no operands, got {}", args.len()),
                            );
                        }
                        if !f.local && !f.global {
                            self.at_stmt(
                                s,
                                format!(
                                    "`{name}` with an empty fence; name the memory it orders: \
                                     `{name}(local)`, `{name}(global)` or `{name}(local, global)`"
                                ),
                            );
                        }
                        if let Some(r) = result {
                            self.at_stmt(
                                s,
                                format!(
                                    "`{name}({})` has no result, but it is bound to `{}`",
                                    fence_text(f),
                                    r.name()
                                ),
                            );
                        }
                    }
                    FuncKind::Atomic(op) => self.atomic(s, op, result.as_ref(), args),
                    FuncKind::Matrix(op) => self.matrix(s, op, result.as_ref(), args),
                }
                if let Some(r) = result {
                    self.bind(r, Kind::CallResult(name), s);
                }
            }
        }
    }

    fn condition(&mut self, cond: &Expr, keyword: &str) {
        if self.expr(cond) && !cond.ty().is_bool() {
            self.at_expr(
                cond,
                format!(
                    "condition {} of `{keyword}` is {}, not bool (compare it, e.g. `x != 0`)",
                    show(cond),
                    cond.ty()
                ),
            );
        }
    }

    fn assign(&mut self, s: &Stmt, var: &Var, value: &Expr) {
        if let Some(b) = self.reference(var, || Node::Stmt(s.clone()), "assignment to") {
            let why = match b.kind {
                Kind::Mutable => None,
                Kind::Let => Some(format!(
                    "`{}` is a `let` binding, which is immutable (declare it with `var`)",
                    var.name()
                )),
                Kind::Counter => Some(format!(
                    "`{}` is the counter of an enclosing `for` loop, which the loop body cannot \
                     change",
                    var.name()
                )),
                k => Some(format!(
                    "`{}` is {}; only `var` variables can be assigned",
                    var.name(),
                    k.describe()
                )),
            };
            if let Some(why) = why {
                self.at_stmt(s, format!("cannot assign to `{}`: {why}", var.name()));
            }
        }
        if self.expr(value) && value.ty() != var.ty() {
            self.at_expr(
                value,
                format!(
                    "assigned value {} is {} but `{}` is {}",
                    show(value),
                    value.ty(),
                    var.name(),
                    var.ty()
                ),
            );
        }
    }

    pub(super) fn store(&mut self, s: &Stmt, buf: &Var, index: &Expr, value: &Expr) {
        self.reference(buf, || Node::Stmt(s.clone()), "store through");
        let elem = match buf.ty() {
            Type::Ptr(space, elem) => {
                if space == AddrSpace::Constant {
                    self.at_stmt(
                        s,
                        format!(
                            "store through `{}`, a pointer to constant memory (read-only)",
                            buf.name()
                        ),
                    );
                }
                Some(elem)
            }
            t => {
                self.at_stmt(
                    s,
                    format!("store through `{}`, which is {t}, not a pointer", buf.name()),
                );
                None
            }
        };
        self.index(index, &format!("store to `{}`", buf.name()));
        if self.expr(value) {
            if let Some(elem) = elem {
                if value.ty() != Type::Scalar(elem) {
                    self.at_expr(
                        value,
                        format!(
                            "stored value {} is {} but `{}` holds {elem} elements",
                            show(value),
                            value.ty(),
                            buf.name()
                        ),
                    );
                }
            }
        }
    }

    /// Checks an index expression (any integer type).
    pub(super) fn index(&mut self, index: &Expr, of: &str) {
        if self.expr(index) && !index.ty().is_int() {
            self.at_expr(
                index,
                format!(
                    "index {} of the {of} is {}; indices must be integers",
                    show(index),
                    index.ty()
                ),
            );
        }
    }

    fn alloc(&mut self, s: &Stmt, var: &Var, count: u32, place: Place) {
        let name = var.name();
        match var.ty() {
            Type::Ptr(space @ (AddrSpace::Local | AddrSpace::Private), elem) => {
                if elem == Scalar::Bool {
                    self.at_stmt(
                        s,
                        format!(
                            "{space} array `{name}` has bool elements; bool cannot be stored \
                             in memory (use u8)"
                        ),
                    );
                }
                if space == AddrSpace::Local {
                    if let Some(inside) = place {
                        self.at_stmt(
                            s,
                            format!(
                                "local array `{name}` declared inside {inside}; local arrays \
                                 must be at kernel scope (directly in the kernel's body)"
                            ),
                        );
                    }
                }
            }
            t => self.at_stmt(
                s,
                format!(
                    "array `{name}` has type {t}; an array's variable must be a \
                     `ptr<local, T>` or `ptr<private, T>`"
                ),
            ),
        }
        if count == 0 {
            self.at_stmt(s, format!("array `{name}` has 0 elements; arrays need at least one"));
        }
        self.bind(var, Kind::Array, s);
    }

    fn atomic(&mut self, s: &Stmt, op: AtomicOp, result: Option<&Var>, args: &[Expr]) {
        let name = op.name();
        let want = 2 + op.value_operands();
        let ok: Vec<bool> = args.iter().map(|a| self.expr(a)).collect();
        if args.len() != want {
            let shape = if op == AtomicOp::CmpXchg {
                "pointer, index, compare, value"
            } else {
                "pointer, index, value"
            };
            self.at_stmt(
                s,
                format!("`{name}` takes {want} operands ({shape}), got {}", args.len()),
            );
        }
        // The element type, once the pointer operand is known to be right.
        let mut elem = None;
        if let Some(p) = args.first() {
            match p.node() {
                ExprNode::Var(v) => match v.ty() {
                    Type::Ptr(space, e) => {
                        if matches!(space, AddrSpace::Constant | AddrSpace::Private) {
                            self.at_expr(
                                p,
                                format!(
                                    "`{name}` on `{}`, a pointer to {space} memory; atomics \
                                     need global, local or generic memory",
                                    v.name()
                                ),
                            );
                        }
                        let allowed =
                            matches!(e, Scalar::I32 | Scalar::U32 | Scalar::I64 | Scalar::U64)
                                || (e == Scalar::F32 && op == AtomicOp::Add);
                        if allowed {
                            elem = Some(e);
                        } else {
                            self.at_expr(
                                p,
                                format!(
                                    "`{name}` on `{}`, whose elements are {e}; atomics need \
                                     i32, u32, i64 or u64 elements (f32 only for `atomic_add`)",
                                    v.name()
                                ),
                            );
                        }
                    }
                    t => self.at_expr(
                        p,
                        format!("`{name}` on `{}`, which is {t}, not a pointer", v.name()),
                    ),
                },
                _ => self.at_expr(
                    p,
                    format!(
                        "the first operand of `{name}` must be a pointer variable, not {}",
                        show(p)
                    ),
                ),
            }
        }
        if let Some(i) = args.get(1) {
            if ok[1] && !i.ty().is_int() {
                self.at_expr(
                    i,
                    format!(
                        "index {} of `{name}` is {}; indices must be integers",
                        show(i),
                        i.ty()
                    ),
                );
            }
        }
        let Some(elem) = elem else { return };
        let elem_ty = Type::Scalar(elem);
        for (k, v) in args.iter().enumerate().skip(2) {
            if ok[k] && v.ty() != elem_ty {
                let what = match (op, k) {
                    (AtomicOp::CmpXchg, 2) => "compare value",
                    _ => "value",
                };
                self.at_expr(
                    v,
                    format!(
                        "{what} {} of `{name}` is {} but the memory holds {elem} elements",
                        show(v),
                        v.ty()
                    ),
                );
            }
        }
        if let Some(r) = result {
            if r.ty() != elem_ty {
                self.at_stmt(
                    s,
                    format!(
                        "result `{}` of `{name}` is declared {} but the memory holds {elem} \
                         elements",
                        r.name(),
                        r.ty()
                    ),
                );
            }
        }
    }
}
