//! Expression generation: typed random expressions, loads with in-bounds indices.

use crate::expr::{BinOp, Builtin, Expr, Intrinsic, UnOp, Var};
use crate::types::{Scalar, Type};

use super::super::values::gen_imm;
use super::{Gen, MemKind, MemVar, Phase, ARITH, INTS};

impl Gen<'_, '_> {
    /// A random expression of type `ty` (an arithmetic type or bool) of depth at most `depth`;
    /// with `uni`, its value is the same for every work-item of a group.
    pub(super) fn expr(&mut self, ty: Scalar, depth: u32, uni: bool) -> Expr {
        if !self.cfg.repeat_subexprs {
            return self.new_expr(ty, depth, uni);
        }
        // One of the statement's earlier expressions of this type (a uniform one only where
        // the value must be uniform), a third of the time there is one.
        let fits: Vec<&Expr> = (self.pool.iter())
            .filter(|(e, u)| e.ty() == Type::Scalar(ty) && (*u || !uni))
            .map(|(e, _)| e)
            .collect();
        if !fits.is_empty() && self.c.below(3) == 0 {
            return fits[self.c.below(fits.len())].clone();
        }
        let e = self.new_expr(ty, depth, uni);
        self.pool.push((e.clone(), uni));
        e
    }

    /// [`Gen::expr`] built anew.
    fn new_expr(&mut self, ty: Scalar, depth: u32, uni: bool) -> Expr {
        if depth == 0 || self.c.below(4) == 0 {
            return self.leaf(ty, uni);
        }
        let d = depth - 1;
        if ty == Scalar::Bool {
            return self.bool_expr(d, uni);
        }
        let float = ty.is_float();
        let w: &[u32] =
            if float { &[6, 0, 0, 0, 1, 1, 3, 3, 3] } else { &[6, 2, 2, 2, 2, 1, 3, 2, 0] };
        match self.c.weighted(w) {
            0 => {
                let ops: &[BinOp] = if float {
                    &[BinOp::Add, BinOp::Sub, BinOp::Mul, BinOp::Div]
                } else {
                    &[BinOp::Add, BinOp::Sub, BinOp::Mul]
                };
                let op = self.pick(ops);
                Expr::binary(op, self.expr(ty, d, uni), self.expr(ty, d, uni))
            }
            1 => {
                // Never zero: an odd divisor.
                let op = self.pick(&[BinOp::Div, BinOp::Rem]);
                let a = self.expr(ty, d, uni);
                let b = self.expr(ty, d, uni) | Expr::int(ty, 1);
                Expr::binary(op, a, b)
            }
            2 => {
                let op = self.pick(&[BinOp::And, BinOp::Or, BinOp::Xor]);
                Expr::binary(op, self.expr(ty, d, uni), self.expr(ty, d, uni))
            }
            3 => {
                // Any amount: shifts take it modulo the width.
                let op = self.pick(&[BinOp::Shl, BinOp::Shr]);
                Expr::binary(op, self.expr(ty, d, uni), self.expr(ty, d, uni))
            }
            4 => {
                let op = if float { UnOp::Neg } else { self.pick(&[UnOp::Neg, UnOp::BitNot]) };
                Expr::unary(op, self.expr(ty, d, uni))
            }
            5 => Expr::select(
                self.expr(Scalar::Bool, d, uni),
                self.expr(ty, d, uni),
                self.expr(ty, d, uni),
            ),
            6 => self.cast_to(ty, d, uni),
            7 => {
                let op = if float {
                    self.pick(&[Intrinsic::Min, Intrinsic::Max, Intrinsic::Abs])
                } else {
                    let ops = [
                        Intrinsic::Min,
                        Intrinsic::Max,
                        Intrinsic::Abs,
                        Intrinsic::Mad,
                        Intrinsic::Add3,
                    ];
                    self.pick(&ops)
                };
                let args: Vec<Expr> = (0..op.arity()).map(|_| self.expr(ty, d, uni)).collect();
                Expr::intrinsic(op, args)
            }
            _ => {
                let mut ops = vec![
                    Intrinsic::Fma,
                    Intrinsic::Sqrt,
                    Intrinsic::Floor,
                    Intrinsic::Ceil,
                    Intrinsic::Trunc,
                ];
                if self.cfg.approx_intrinsics {
                    ops.extend([Intrinsic::Exp, Intrinsic::Log, Intrinsic::Sin, Intrinsic::Cos]);
                }
                let op = self.pick(&ops);
                let args: Vec<Expr> = (0..op.arity()).map(|_| self.expr(ty, d, uni)).collect();
                Expr::intrinsic(op, args)
            }
        }
    }

    pub(super) fn bool_expr(&mut self, d: u32, uni: bool) -> Expr {
        match self.c.weighted(&[5, 2, 2, 1, 1, 1]) {
            0 => {
                let mut types = ARITH.to_vec();
                types.push(Scalar::Bool);
                let ot = self.pick(&types);
                let op = if ot == Scalar::Bool {
                    self.pick(&[BinOp::Eq, BinOp::Ne])
                } else {
                    self.pick(&[BinOp::Eq, BinOp::Ne, BinOp::Lt, BinOp::Le, BinOp::Gt, BinOp::Ge])
                };
                Expr::binary(op, self.expr(ot, d, uni), self.expr(ot, d, uni))
            }
            1 => {
                let op = self.pick(&[BinOp::LogicAnd, BinOp::LogicOr]);
                Expr::binary(op, self.expr(Scalar::Bool, d, uni), self.expr(Scalar::Bool, d, uni))
            }
            2 => {
                let op = self.pick(&[BinOp::And, BinOp::Or, BinOp::Xor]);
                Expr::binary(op, self.expr(Scalar::Bool, d, uni), self.expr(Scalar::Bool, d, uni))
            }
            3 => Expr::unary(UnOp::Not, self.expr(Scalar::Bool, d, uni)),
            4 => Expr::select(
                self.expr(Scalar::Bool, d, uni),
                self.expr(Scalar::Bool, d, uni),
                self.expr(Scalar::Bool, d, uni),
            ),
            _ => self.cast_to(Scalar::Bool, d, uni),
        }
    }

    /// `e as ty` from a random other type (bool and f16 included).
    pub(super) fn cast_to(&mut self, ty: Scalar, d: u32, uni: bool) -> Expr {
        let mut from: Vec<Scalar> = ARITH.iter().copied().filter(|&t| t != ty).collect();
        if ty != Scalar::Bool {
            from.push(Scalar::Bool);
        }
        if self.cfg.f16 {
            from.push(Scalar::F16);
        }
        let src = self.pick(&from);
        let e = if src == Scalar::F16 {
            self.storage_expr(Scalar::F16, d, uni)
        } else {
            self.expr(src, d, uni)
        };
        e.cast(ty)
    }

    /// A value of storage-only float type `ty` (f16, bf16): a load of one or a cast to it.
    pub(super) fn storage_expr(&mut self, ty: Scalar, d: u32, uni: bool) -> Expr {
        if self.c.chance(40) {
            if let Some(l) = self.load(ty, d, uni) {
                return l;
            }
        }
        let src = self.pick(&ARITH);
        self.expr(src, d, uni).cast(ty)
    }

    pub(super) fn leaf(&mut self, ty: Scalar, uni: bool) -> Expr {
        match self.c.weighted(&[3, 4, 1, 3]) {
            0 => Expr::imm(gen_imm(self.c, ty)),
            1 => {
                let vars: Vec<Var> = self
                    .scope
                    .iter()
                    .filter(|b| b.var.ty() == Type::Scalar(ty) && (b.uniform || !uni))
                    .map(|b| b.var.clone())
                    .collect();
                if vars.is_empty() {
                    return Expr::imm(gen_imm(self.c, ty));
                }
                vars[self.c.below(vars.len())].expr()
            }
            2 => {
                let kinds: &[Builtin] = if uni {
                    &[
                        Builtin::GroupId,
                        Builtin::GlobalSize,
                        Builtin::LocalSize,
                        Builtin::NumGroups,
                        Builtin::GlobalOffset,
                    ]
                } else {
                    &Builtin::ALL
                };
                let kind = self.pick(kinds);
                let b = Expr::builtin(kind, self.c.below(3) as u8);
                if ty == Scalar::U32 {
                    b
                } else {
                    b.cast(ty)
                }
            }
            _ => {
                // An element of type `ty`, or an f16 element cast to it.
                if let Some(l) = self.load(ty, 1, uni) {
                    return l;
                }
                if self.cfg.f16 && ty != Scalar::Bool {
                    if let Some(l) = self.load(Scalar::F16, 1, uni) {
                        return l.cast(ty);
                    }
                }
                Expr::imm(gen_imm(self.c, ty))
            }
        }
    }

    pub(super) fn readable(&self, m: &MemVar, uni: bool) -> bool {
        match m.kind {
            MemKind::Input => true,
            _ if uni => false,
            MemKind::Counter { .. } => false,
            _ => true,
        }
    }

    /// A load of an element of type `elem` from readable memory, if there is any.
    pub(super) fn load(&mut self, elem: Scalar, d: u32, uni: bool) -> Option<Expr> {
        let cands: Vec<MemVar> = self
            .mems
            .iter()
            .filter(|m| m.elem() == elem && self.readable(m, uni))
            .cloned()
            .collect();
        if cands.is_empty() {
            return None;
        }
        let m = cands[self.c.below(cands.len())].clone();
        let index = self.read_index(&m, d, uni);
        Some(m.var.load(index))
    }

    pub(super) fn read_index(&mut self, m: &MemVar, d: u32, uni: bool) -> Expr {
        match m.kind {
            MemKind::Out { k } => self.own_index(false, k, d),
            MemKind::Local { k, id } if self.phases[id] == Phase::Own => self.own_index(true, k, d),
            _ => self.any_index(m.len, d, uni),
        }
    }

    /// `(e as u32) % len`.
    pub(super) fn any_index(&mut self, len: u32, d: u32, uni: bool) -> Expr {
        if self.c.chance(20) {
            return Expr::u32(self.c.below(len as usize) as u32);
        }
        let t = self.pick(&INTS);
        let e = self.expr(t, d.min(2), uni);
        let e = if t == Scalar::U32 { e } else { e.cast(Scalar::U32) };
        e % Expr::u32(len)
    }

    /// `lin * k + (e as u32) % k` (or `llin` for local arrays).
    pub(super) fn own_index(&mut self, local: bool, k: u32, d: u32) -> Expr {
        let base = if local { self.llin.clone() } else { self.lin.clone() };
        let base = base.map_or_else(|| Expr::u32(0), |v| v.expr());
        if k == 1 {
            return base;
        }
        let j = self.any_index(k, d, false);
        base * Expr::u32(k) + j
    }
}
