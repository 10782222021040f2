//! Vector values on the lanes. What reaches the 8-lane code is the Memory form of vector
//! lowering (see `x86/vector.rs`): `let t: f32x4 = vload4(p, i);` whose lanes are read as
//! `extract(t, k)`, and `vstore(p, i, f32x4(a, b, c, d))`. [`split`] turns each into scalar
//! statements the lanes already run, keeping the access's check whole:
//!
//! ```text
//! let t#i: u32 = i;
//! let t: f32x4 = vload4(p, t#i);   // only checks (see V::vector_check)
//! let t#0: f32 = p[t#i];  ...  let t#3: f32 = p[t#i + 3];
//! ```
//!
//! and `extract(t, k)` reads `t#k`. A store binds its index, then its lanes, to `let`s (the
//! interpreter evaluates them in that order), checks with the `vstore` itself (whose value is
//! then not stored) and stores each lane. The vector statement checks as the interpreter
//! checks, in its order and with its messages: the first element in bounds, the index a
//! multiple of the lane count, the last lane in bounds; so the element accesses after it
//! cannot fault. No IR name contains `#`: a vector statement whose index is not such a `let`
//! was not split, and the lanes refuse it.

use hashbrown::HashMap;
use kiln_ir::{
    walk_mutate_expr, walk_mutate_stmt, BinOp, Expr, ExprNode, Kernel, Mutator, Stmt, StmtNode,
    Type, Var,
};

use iced_x86::code_asm::*;

use super::{no, R, V, YMM};
use crate::x86::gen::Site;
use crate::x86::rt;

/// True if `name` was made by [`split`] (no name of the IR has a `#`).
pub(super) fn is_split_name(name: &str) -> bool {
    name.contains('#')
}

/// `k` with its vector loads and stores split as the module docs say (`k` itself if it
/// has none).
pub(crate) fn split(k: &Kernel) -> Kernel {
    Split::default().mutate_kernel(k)
}

#[derive(Default)]
struct Split {
    /// Split vector `let`s in scope: name, element type.
    lanes: HashMap<String, Type>,
    /// Stores split so far (their `let`s are named after the count).
    stores: usize,
}

impl Split {
    fn lane(name: &str, k: u8, elem: Type) -> Var {
        Var::new(format!("{name}#{k}"), elem)
    }

    /// `index + k` in `index`'s type (no wrap: the check proved `index + lanes - 1` is an
    /// element of the memory).
    fn offset(index: &Var, k: u8) -> Expr {
        let i = Expr::var(index);
        if k == 0 {
            return i;
        }
        let ty = index.ty().scalar().expect("an integer index");
        Expr::binary(BinOp::Add, i, Expr::int(ty, i128::from(k)))
    }

    fn list(&mut self, stmts: &[Stmt]) -> Vec<Stmt> {
        let mut out = Vec::with_capacity(stmts.len());
        for s in stmts {
            match s.node() {
                StmtNode::Let { var, value } if var.ty().is_vector() => {
                    let ExprNode::VecLoad { buf, index, lanes } = value.node() else {
                        out.push(self.mutate_stmt(s));
                        continue;
                    };
                    let elem = Type::Scalar(var.ty().lane_scalar().expect("a vector type"));
                    let ix = Var::new(format!("{}#i", var.name()), index.ty());
                    out.push(Stmt::let_(&ix, self.mutate_expr(index)));
                    out.push(Stmt::let_(var, Expr::vload(buf, Expr::var(&ix), *lanes)));
                    for k in 0..*lanes {
                        let lane = Self::lane(var.name(), k, elem);
                        out.push(Stmt::let_(&lane, Expr::load(buf, Self::offset(&ix, k))));
                    }
                    self.lanes.insert(var.name().to_string(), elem);
                }
                StmtNode::VecStore { buf, index, value } => {
                    let n = value.ty().lanes();
                    let elems: Vec<Expr> = match value.node() {
                        ExprNode::Vector { elems, .. } if elems.len() == usize::from(n) => {
                            elems.iter().map(|e| self.mutate_expr(e)).collect()
                        }
                        ExprNode::Var(v) if self.lanes.contains_key(v.name()) => {
                            let elem = self.lanes[v.name()];
                            (0..n).map(|k| Expr::var(&Self::lane(v.name(), k, elem))).collect()
                        }
                        _ => {
                            out.push(self.mutate_stmt(s));
                            continue;
                        }
                    };
                    let name = format!("vstore#{}", self.stores);
                    self.stores += 1;
                    let ix = Var::new(format!("{name}#i"), index.ty());
                    out.push(Stmt::let_(&ix, self.mutate_expr(index)));
                    let vars: Vec<Var> = elems
                        .iter()
                        .enumerate()
                        .map(|(k, e)| Self::lane(&name, k as u8, e.ty()))
                        .collect();
                    for (v, e) in vars.iter().zip(elems) {
                        out.push(Stmt::let_(v, e));
                    }
                    let lanes = Expr::build_vector(vars.iter().map(Expr::var));
                    out.push(Stmt::vstore(buf, Expr::var(&ix), lanes));
                    for (k, v) in vars.iter().enumerate() {
                        out.push(Stmt::store(buf, Self::offset(&ix, k as u8), Expr::var(v)));
                    }
                }
                _ => out.push(self.mutate_stmt(s)),
            }
        }
        out
    }
}

impl Mutator for Split {
    fn mutate_expr(&mut self, e: &Expr) -> Expr {
        if let ExprNode::Extract { a, lane } = e.node() {
            if let ExprNode::Var(v) = a.node() {
                if let Some(&elem) = self.lanes.get(v.name()) {
                    return Expr::var(&Self::lane(v.name(), *lane, elem));
                }
            }
        }
        walk_mutate_expr(self, e)
    }

    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        match s.node() {
            StmtNode::Block(v) => {
                // (A block's split `let`s go out of scope with it.)
                let outer = self.lanes.clone();
                let b = Stmt::block(self.list(v));
                self.lanes = outer;
                b
            }
            _ => walk_mutate_stmt(self, s),
        }
    }
}

/// The lane count of a split vector statement's check, given its index (see the module
/// docs): refuses one [`split`] left whole.
pub(super) fn split_check(index: &Expr, what: &str) -> R<()> {
    match index.node() {
        ExprNode::Var(v) if is_split_name(v.name()) => Ok(()),
        _ => no(format!("a {what} in a form the lanes do not split")),
    }
}

impl V {
    /// The check of a split vector access of `lanes` lanes of `buf` at `index` (a `let`
    /// of [`split`]), in the interpreter's order: the first element in bounds, the index a
    /// multiple of `lanes`, the last lane in bounds; faulting lanes are reported with the
    /// interpreter's messages and leave the alive mask.
    pub(super) fn vector_check(
        &mut self,
        buf: &Var,
        index: &Expr,
        lanes: u8,
        what: &'static str,
    ) -> R<()> {
        split_check(index, what)?;
        if self.private(buf).is_some() {
            return no(format!("a {what} of private array `{}`", buf.name()));
        }
        let elem = buf.ty().elem().map(Type::Scalar);
        let t = self.buf_of(buf, elem.unwrap_or(Type::BOOL))?;
        let signed = Self::index_type(index)?;
        let (x, act, f) = (0, 1, 2);
        self.expr_top(index, x)?;
        self.active(act)?;
        self.check(index, x, act, f, t, what, signed)?;
        let low = self.imm_slot(u32::from(lanes - 1));
        let zero = self.imm_slot(0);
        self.a.vpand(YMM[f], YMM[x], ymmword_ptr(r15 + low))?;
        self.a.vpcmpeqd(YMM[f], YMM[f], ymmword_ptr(r15 + zero))?;
        self.a.vpandn(YMM[f], YMM[f], YMM[act])?;
        let site = Site::Align { what, mem: self.mem_of(t), lanes };
        self.fault_stub(x, f, act, rt::ERR_MISALIGNED, site, signed, None)?;
        self.a.vpaddd(YMM[x], YMM[x], ymmword_ptr(r15 + low))?;
        let ty = index.ty().scalar().unwrap_or(kiln_ir::Scalar::U32);
        let last = Expr::binary(BinOp::Add, index.clone(), Expr::int(ty, i128::from(lanes - 1)));
        self.check(&last, x, act, f, t, what, signed)
    }
}
