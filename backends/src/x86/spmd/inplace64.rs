//! i64/u64 binary operations with one operand read where it already is: a constant from
//! its frame slot (one 32-byte slot of four qwords serves both halves), a name from its
//! `let` registers or its 64-byte slot. Computing such an operand into two temporaries
//! first costs two moves per use, and in a loop that is most of a popcount's work
//! (`x >> 1 & 0x5555555555555555`). Shifts by a constant are immediates (`vpsllq`,
//! `vpsrlq`; `i64 >>` from `vpsrad` and `vpsrlq` halves), products by a constant
//! `mul64const.rs`'s forms.
//!
//! Why this is exact: the operations are the same lane operations on the same values (an
//! operand of `+ & | ^ *` may come first or second, the integer operations commuting
//! exactly); a constant's count is taken modulo 64 as the interpreter takes it; and
//! neither a constant nor a name can fault, so computing the other operand alone keeps
//! the order of faults.

use iced_x86::code_asm::*;
use kiln_ir::{BinOp, Expr, Type};

use super::mul64const::{constant64, form};
use super::{Loc, R, V, YMM};

/// Where an operand read in place is.
#[derive(Clone, Copy)]
enum Opd {
    /// `let` registers: lanes 0..3 in `ymm{r}`, 4..7 in `ymm{r+1}`.
    Reg(usize),
    /// Vector frame offsets of lanes 0..3 and of lanes 4..7.
    Mem(i32, i32),
}

impl V {
    /// For i64/u64 `a op b`: the operand to compute and the one read in place (a constant,
    /// or a name in registers or a slot), if there is one (the second preferred; for
    /// shifts a constant count only).
    pub(super) fn split64<'e>(
        &self,
        op: BinOp,
        a: &'e Expr,
        b: &'e Expr,
    ) -> Option<(&'e Expr, &'e Expr)> {
        match op {
            BinOp::Shl | BinOp::Shr => constant64(b).map(|_| (a, b)),
            BinOp::Sub if self.in_place(b) => Some((a, b)),
            BinOp::Add | BinOp::And | BinOp::Or | BinOp::Xor | BinOp::Mul => {
                if self.in_place(b) {
                    Some((a, b))
                } else {
                    self.in_place(a).then_some((b, a))
                }
            }
            _ => None,
        }
    }

    /// True if `e` can be read where it is: a 64-bit integer constant or a name bound in
    /// registers or a slot.
    fn in_place(&self, e: &Expr) -> bool {
        constant64(e).is_some()
            || e.as_var()
                .and_then(|v| self.find(v.name()))
                .is_some_and(|b| matches!(b.loc, Loc::Reg(_) | Loc::Slot(_)))
    }

    fn opd64(&mut self, e: &Expr) -> Option<Opd> {
        if let Some(c) = constant64(e) {
            let off = self.const_slot((c, 4));
            return Some(Opd::Mem(off, off));
        }
        match self.find(e.as_var()?.name())?.loc {
            Loc::Reg(r) => Some(Opd::Reg(r)),
            Loc::Slot(off) => Some(Opd::Mem(off, off + 32)),
            Loc::Scalar(_) => None,
        }
    }

    /// i64/u64 `x op o` into `ymm{d}`, `ymm{d+1}` (`ymm{d+2}`, `ymm{d+3}` temporaries), `o`
    /// read in place ([`V::split64`]).
    pub(super) fn binary64_in_place(
        &mut self,
        e: &Expr,
        op: BinOp,
        x: &Expr,
        o: &Expr,
        d: usize,
    ) -> R<()> {
        let Some(opd) = self.opd64(o) else {
            return super::no(format!("internal: `{o}` is not in place"));
        };
        let signed = e.ty() == Type::I64;
        self.expr64(x, d)?;
        let (t, u) = (YMM[d + 2], YMM[d + 3]);
        // (The count modulo 64, as the interpreter takes it.)
        let n = constant64(o).map_or(0, |c| (c & 63) as u32);
        let by_const =
            (op == BinOp::Mul).then(|| constant64(o).and_then(|c| Some((form(x, c)?, c))));
        for h in 0..2 {
            let p = YMM[d + h];
            macro_rules! with_q {
                ($q:expr) => {{
                    let q = $q;
                    match op {
                        BinOp::Add => self.a.vpaddq(p, p, q)?,
                        BinOp::Sub => self.a.vpsubq(p, p, q)?,
                        BinOp::And => self.a.vpand(p, p, q)?,
                        BinOp::Or => self.a.vpor(p, p, q)?,
                        BinOp::Xor => self.a.vpxor(p, p, q)?,
                        _ => {
                            // Wrapping: lo*lo + ((hi_p*lo_q + lo_p*hi_q) << 32).
                            self.a.vpsrlq(t, p, 32)?;
                            self.a.vpmuludq(t, t, q)?;
                            self.a.vmovdqu(u, q)?;
                            self.a.vpsrlq(u, u, 32)?;
                            self.a.vpmuludq(u, u, p)?;
                            self.a.vpaddq(t, t, u)?;
                            self.a.vpsllq(t, t, 32)?;
                            self.a.vpmuludq(p, p, q)?;
                            self.a.vpaddq(p, p, t)?;
                        }
                    }
                }};
            }
            match (op, opd) {
                (BinOp::Shl, _) => self.a.vpsllq(p, p, n)?,
                (BinOp::Shr, _) if !signed => self.a.vpsrlq(p, p, n)?,
                (BinOp::Shr, _) => self.sar64(p, n, t)?,
                (BinOp::Mul, Opd::Mem(off, _)) if matches!(by_const, Some(Some(_))) => {
                    let (f, c) = by_const.flatten().expect("a constant form");
                    self.mul64_const(f, c, p, ymmword_ptr(r15 + off), t, u)?
                }
                (_, Opd::Reg(r)) => with_q!(YMM[r + h]),
                (_, Opd::Mem(lo, hi)) => with_q!(ymmword_ptr(r15 + if h == 0 { lo } else { hi })),
            }
        }
        Ok(())
    }

    /// `p = p >> n` on four i64 lanes, `n` < 64 (`t` a temporary): AVX2 has no `vpsraq`,
    /// so the low dword comes from the logical shift and the high one from the dwords'
    /// arithmetic shift (`n` ≤ 32), or, further, the low dword is the high one's arithmetic
    /// shift by `n - 32` and the high one the sign.
    fn sar64(&mut self, p: AsmRegisterYmm, n: u32, t: AsmRegisterYmm) -> R<()> {
        if n == 0 {
            return Ok(());
        }
        if n <= 32 {
            self.a.vpsrad(t, p, n)?;
            self.a.vpsrlq(p, p, n)?;
        } else {
            self.a.vpsrad(t, p, 31)?;
            self.a.vpsrad(p, p, n - 32)?;
            self.a.vpsrlq(p, p, 32)?;
        }
        self.a.vpblendd(p, p, t, 0xaa)?;
        Ok(())
    }
}
