//! Rules of the warpgroup (sm_90) matrix operations: `wgmma` and its fence/commit/wait,
//! `frag_elem`, `tma_load` and the barrier objects (`mbar_*`).

use crate::expr::{Expr, Var};
use crate::matrix::{FragRole, MatShape, MatrixOp};
use crate::stmt::Stmt;
use crate::types::{AddrSpace, Scalar, Type};

use super::{show, Checker, Kind};

impl Checker<'_> {
    /// The rules of warpgroup call `op(args)` binding `result`; `ok[k]`: operand `k` is
    /// well-typed.
    pub(super) fn warpgroup(
        &mut self,
        s: &Stmt,
        op: MatrixOp,
        result: Option<&Var>,
        args: &[Expr],
        ok: &[bool],
    ) {
        let name = op.name();
        match (result, op.has_result()) {
            (Some(r), false) => {
                self.at_stmt(
                    s,
                    format!("`{name}` has no result, but it is bound to `{}`", r.name()),
                );
                return;
            }
            (None, true) => {
                self.at_stmt(s, format!("the value `{name}` yields must be bound with `let`"));
                return;
            }
            _ => {}
        }
        let u32_at = |c: &mut Self, k: usize, what: &str| {
            if ok[k] && args[k].ty() != Type::U32 {
                c.at_expr(
                    &args[k],
                    format!("{what} {} of `{name}` is {}, not u32", show(&args[k]), args[k].ty()),
                );
            }
        };
        match op {
            MatrixOp::Wgmma(swa, swb) => {
                for l in [swa, swb] {
                    if let Err(m) = l.check() {
                        self.at_stmt(s, m);
                    }
                }
                let Some(d) = self.wg_acc(&args[0], ok[0], name) else { return };
                if let Some(v) = args[0].as_var() {
                    if !matches!(
                        self.scopes.get(v.name()).copied().map(|b| b.kind),
                        Some(Kind::Mutable)
                    ) {
                        self.at_expr(
                            &args[0],
                            format!(
                                "`wgmma` accumulates into its first operand in place: `{}` must \
                                 be a `var`",
                                v.name()
                            ),
                        );
                    }
                }
                let a = self.local_ptr(&args[1], ok[1], name, "factor A");
                let b = self.local_ptr(&args[3], ok[3], name, "factor B");
                u32_at(self, 2, "offset of A");
                u32_at(self, 4, "offset of B");
                if let (Some(a), Some(b)) = (a, b) {
                    if a != b || !matches!(a, Scalar::F16 | Scalar::BF16) {
                        self.at_stmt(
                            s,
                            format!(
                                "`wgmma` factors hold f16 or bf16, both the same; A holds {a}, B \
                                 holds {b} (into {d})"
                            ),
                        );
                    }
                }
            }
            MatrixOp::WgFence | MatrixOp::WgCommit | MatrixOp::WgWait(_) => {}
            MatrixOp::SetMaxNReg { count, .. }
                if !(24..=256).contains(&count) || !count.is_multiple_of(8) =>
            {
                self.at_stmt(
                    s,
                    format!(
                        "`{name}({count})`: a register budget is a multiple of 8 from 24 to 256"
                    ),
                );
            }
            MatrixOp::SetMaxNReg { .. } => {}
            MatrixOp::FragElem(i) => {
                let Some(MatShape::M64(n)) = self.wg_acc(&args[0], ok[0], name).map(|f| f.shape)
                else {
                    return;
                };
                if i as u16 >= n / 2 {
                    self.at_stmt(
                        s,
                        format!(
                            "`frag_elem` index {i}: a work-item holds {} elements of a \
                             m64n{n}k16 accumulator",
                            n / 2
                        ),
                    );
                }
                if let Some(r) = result {
                    if r.ty() != Type::F32 {
                        self.at_stmt(
                            s,
                            format!(
                                "`frag_elem` yields f32; `{}` is declared {}",
                                r.name(),
                                r.ty()
                            ),
                        );
                    }
                }
            }
            MatrixOp::TmaLoad(bx) => {
                let dst = self.local_ptr(&args[0], ok[0], name, "destination");
                let src = match (ok[2], args[2].as_var().map(|v| v.ty())) {
                    (false, _) => None,
                    (true, Some(Type::Ptr(AddrSpace::Global | AddrSpace::Constant, e))) => Some(e),
                    _ => {
                        self.at_expr(
                            &args[2],
                            format!(
                                "the source {} of `tma_load` must be a pointer parameter to \
                                 global memory",
                                show(&args[2])
                            ),
                        );
                        None
                    }
                };
                for (k, what) in [
                    (1, "destination index"),
                    (3, "width"),
                    (4, "height"),
                    (5, "pitch"),
                    (6, "column"),
                    (7, "row"),
                    (9, "barrier index"),
                ] {
                    u32_at(self, k, what);
                }
                self.mbar_ptr(&args[8], ok[8], name);
                if let (Some(d), Some(sc)) = (dst, src) {
                    if d != sc {
                        self.at_stmt(s, format!("`tma_load` from {sc} elements to {d} elements"));
                    } else if d == Scalar::Bool {
                        self.at_stmt(s, "`tma_load` of bool elements".to_string());
                    } else if let Err(m) = bx.check(d.size_bytes() as u64) {
                        self.at_stmt(s, format!("`tma_load` of {m}"));
                    }
                }
            }
            MatrixOp::MbarInit
            | MatrixOp::MbarArrive
            | MatrixOp::MbarExpectTx
            | MatrixOp::MbarWait => {
                self.mbar_ptr(&args[0], ok[0], name);
                u32_at(self, 1, "barrier index");
                if args.len() > 2 {
                    let what = match op {
                        MatrixOp::MbarInit => "count",
                        MatrixOp::MbarExpectTx => "byte count",
                        _ => "parity",
                    };
                    u32_at(self, 2, what);
                }
            }
            _ => {}
        }
    }

    /// The warpgroup accumulator fragment operand `e`, or an error.
    fn wg_acc(&mut self, e: &Expr, ok: bool, name: &str) -> Option<crate::matrix::Frag> {
        if !ok {
            return None;
        }
        match e.ty() {
            Type::Frag(f) if f.role == FragRole::Acc && f.shape.is_warpgroup() => Some(f),
            t => {
                self.at_expr(
                    e,
                    format!(
                        "{} of `{name}` is {t}, not a warpgroup accumulator \
                         (`frag<acc, m64nNk16, f32>`)",
                        show(e)
                    ),
                );
                None
            }
        }
    }

    /// The element type of local pointer variable `e`, or an error.
    fn local_ptr(&mut self, e: &Expr, ok: bool, name: &str, what: &str) -> Option<Scalar> {
        if !ok {
            return None;
        }
        match e.as_var().map(|v| v.ty()) {
            Some(Type::Ptr(AddrSpace::Local, elem)) => Some(elem),
            _ => {
                self.at_expr(
                    e,
                    format!(
                        "the {what} {} of `{name}` must be a local array (`ptr<local, ..>` \
                         variable), it is {}",
                        show(e),
                        e.ty()
                    ),
                );
                None
            }
        }
    }

    /// Checks that `e` is a local array of u64 barrier objects.
    fn mbar_ptr(&mut self, e: &Expr, ok: bool, name: &str) {
        if let Some(t) = self.local_ptr(e, ok, name, "barrier array") {
            if t != Scalar::U64 {
                self.at_expr(
                    e,
                    format!(
                        "barrier objects are u64 elements of a local array; {} holds {t}",
                        show(e)
                    ),
                );
            }
        }
    }
}
