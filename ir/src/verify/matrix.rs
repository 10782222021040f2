//! Matrix rules: fragment types, the operands of the matrix calls, and where fragments may
//! appear (variables, `let`/`var`, assignments and matrix calls only).

use crate::expr::{Expr, ExprNode, Var};
use crate::matrix::{Frag, FragRole, MatrixOp};
use crate::stmt::Stmt;
use crate::types::{AddrSpace, Scalar, Type};

use super::{show, Checker};

impl Checker<'_> {
    /// A fragment type's own rule (element types per role), reported at `s` as `what()`:
    /// the description is made only for a report (a `format!` per `let` was ~2% of the
    /// generator's time).
    pub(super) fn frag_type(&mut self, s: &Stmt, what: impl FnOnce() -> String, ty: Type) {
        if let Type::Frag(f) = ty {
            if let Err(m) = f.check() {
                self.at_stmt(s, format!("{}: {m}", what()));
            }
        }
    }

    /// The rules of a matrix call `op(args)` binding `result`.
    pub(super) fn matrix(&mut self, s: &Stmt, op: MatrixOp, result: Option<&Var>, args: &[Expr]) {
        let name = op.name();
        let ok: Vec<bool> = args.iter().map(|a| self.expr(a)).collect();
        if args.len() != op.arity() {
            self.at_stmt(s, format!("`{name}` takes {} operands, got {}", op.arity(), args.len()));
            return;
        }
        if op.is_warpgroup() {
            return self.warpgroup(s, op, result, args, &ok);
        }
        // Sub-group operations on warpgroup accumulators: only `frag_fill` applies.
        let wg = result
            .map(|r| r.ty())
            .into_iter()
            .chain(args.iter().map(|a| a.ty()))
            .find_map(|t| t.frag().filter(|f| f.shape.is_warpgroup() && op != MatrixOp::Fill));
        if let Some(f) = wg {
            self.at_stmt(
                s,
                format!(
                    "`{name}` on {f}: a warpgroup accumulator is filled with `frag_fill`, \
                     updated by `wgmma` and read with `frag_elem`"
                ),
            );
            return;
        }
        let frag = match (result, op.has_result()) {
            (Some(r), true) => {
                self.frag_type(s, || format!("result `{}` of `{name}`", r.name()), r.ty());
                match r.ty() {
                    Type::Frag(f) => Some(f),
                    t => {
                        self.at_stmt(
                            s,
                            format!(
                                "result `{}` of `{name}` is declared {t}; `{name}` yields a \
                                 fragment (`frag<role, shape, elem>`)",
                                r.name()
                            ),
                        );
                        return;
                    }
                }
            }
            (None, true) => {
                self.at_stmt(s, format!("the fragment `{name}` yields must be bound with `let`"));
                return;
            }
            (Some(r), false) => {
                self.at_stmt(
                    s,
                    format!("`{name}` has no result, but it is bound to `{}`", r.name()),
                );
                return;
            }
            (None, false) => None,
        };
        let u32_operand = |c: &mut Self, k: usize, what: &str| {
            if ok[k] && args[k].ty() != Type::U32 {
                c.at_expr(
                    &args[k],
                    format!("{what} {} of `{name}` is {}, not u32", show(&args[k]), args[k].ty()),
                );
            }
        };
        match op {
            MatrixOp::Load(_) | MatrixOp::Store(_) => {
                let f = if let MatrixOp::Store(_) = op {
                    match self.frag_operand(&args[3], ok[3], name, "stored fragment") {
                        Some(f) if f.role != FragRole::Acc => {
                            self.at_expr(
                                &args[3],
                                format!("`{name}` stores accumulators; {} is {f}", show(&args[3])),
                            );
                            return;
                        }
                        Some(f) => f,
                        None => return,
                    }
                } else {
                    match frag {
                        Some(f) => f,
                        None => return,
                    }
                };
                let spaces: &[AddrSpace] = if let MatrixOp::Store(_) = op {
                    &[AddrSpace::Global, AddrSpace::Local]
                } else {
                    &[AddrSpace::Global, AddrSpace::Constant, AddrSpace::Local]
                };
                self.matrix_pointer(&args[0], name, spaces, f.elem);
                u32_operand(self, 1, "offset");
                u32_operand(self, 2, "stride");
            }
            MatrixOp::Fill => {
                let Some(f) = frag else { return };
                if ok[0] && args[0].ty() != Type::Scalar(f.elem) {
                    self.at_expr(
                        &args[0],
                        format!(
                            "fill value {} is {} but the fragment holds {} elements",
                            show(&args[0]),
                            args[0].ty(),
                            f.elem
                        ),
                    );
                }
            }
            MatrixOp::Mma => {
                let Some(d) = frag else { return };
                let roles = [(FragRole::A, "a"), (FragRole::B, "b"), (FragRole::Acc, "c")];
                let mut fs = Vec::new();
                for (k, (role, what)) in roles.into_iter().enumerate() {
                    let Some(f) = self.frag_operand(&args[k], ok[k], name, what) else { return };
                    if f.role != role {
                        self.at_expr(
                            &args[k],
                            format!(
                                "operand `{what}` of `mma` must be a `{}` fragment; {} is {f}",
                                role.name(),
                                show(&args[k])
                            ),
                        );
                        return;
                    }
                    fs.push(f);
                }
                let (a, b, c) = (fs[0], fs[1], fs[2]);
                if a.shape != b.shape || a.shape != c.shape || c != d {
                    self.at_stmt(
                        s,
                        format!(
                            "`mma` operands and result disagree in shape: a is {a}, b is {b}, c \
                             is {c}, the result is {d}"
                        ),
                    );
                } else if a.elem != b.elem {
                    self.at_stmt(
                        s,
                        format!("`mma` factors have different element types: a is {a}, b is {b}"),
                    );
                }
            }
            MatrixOp::CopyAsync(n) => {
                let dst = self.matrix_pointer(&args[0], name, &[AddrSpace::Local], None);
                let src = self.matrix_pointer(&args[2], name, &[AddrSpace::Global], None);
                u32_operand(self, 1, "destination index");
                u32_operand(self, 3, "source index");
                if let (Some(d), Some(sc)) = (dst, src) {
                    if d != sc {
                        self.at_stmt(s, format!("`copy_async` from {sc} elements to {d} elements"));
                    }
                    let bytes = n as usize * d.size_bytes();
                    if d == Scalar::Bool || ![4, 8, 16].contains(&bytes) {
                        self.at_stmt(
                            s,
                            format!(
                                "`copy_async` of {n} {d} elements ({bytes} bytes); a copy moves \
                                 4, 8 or 16 bytes"
                            ),
                        );
                    }
                }
            }
            _ => {}
        }
    }

    /// The fragment type of operand `e` (a fragment variable), or an error and `None`.
    fn frag_operand(&mut self, e: &Expr, ok: bool, name: &str, what: &str) -> Option<Frag> {
        if !ok {
            return None;
        }
        match e.ty() {
            Type::Frag(f) => Some(f),
            t => {
                self.at_expr(e, format!("{what} {} of `{name}` is {t}, not a fragment", show(e)));
                None
            }
        }
    }

    /// Checks that `p` is a pointer variable into one of `spaces` (with elements `elem`, when
    /// given); its element type if it is a pointer.
    fn matrix_pointer(
        &mut self,
        p: &Expr,
        name: &str,
        spaces: &[AddrSpace],
        elem: impl Into<Option<Scalar>>,
    ) -> Option<Scalar> {
        let elem = elem.into();
        let ExprNode::Var(v) = p.node() else {
            self.at_expr(
                p,
                format!(
                    "the memory operand of `{name}` must be a pointer variable, not {}",
                    show(p)
                ),
            );
            return None;
        };
        let Type::Ptr(space, e) = v.ty() else {
            self.at_expr(
                p,
                format!("`{name}` on `{}`, which is {}, not a pointer", v.name(), v.ty()),
            );
            return None;
        };
        if !spaces.contains(&space) {
            let names: Vec<&str> = spaces.iter().map(|s| s.name()).collect();
            self.at_expr(
                p,
                format!(
                    "`{name}` on `{}`, a pointer to {space} memory; it needs {} memory",
                    v.name(),
                    names.join(" or ")
                ),
            );
        }
        if let Some(want) = elem {
            if e != want {
                self.at_expr(
                    p,
                    format!(
                        "`{name}` on `{}`, whose elements are {e}; the fragment holds {want}",
                        v.name()
                    ),
                );
            }
        }
        Some(e)
    }
}
