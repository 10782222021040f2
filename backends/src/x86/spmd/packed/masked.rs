//! Lane-varying `if`s in the packed loop (`packed.rs`): both sides run on every lane of the
//! block, under masks, and the stores of a side change only its lanes' elements.
//!
//! `ifstore.rs` already turns an `if` whose sides are the same stores into stores of
//! `select`s; what it leaves (sides with `let`s, assignments, stores of different
//! elements or counts, an `if` without `else`) comes here. The condition's lane mask,
//! and-ed with the enclosing one, is the `then` side's mask; the enclosing mask without it
//! the `else` side's. Under a mask, an assignment blends the new value into the variable's
//! register (`vpblendvb`), and a store is merged: the block's elements are loaded, the
//! value blended into them, and all stored back (there is no masked byte or word store).
//!
//! ## Why this is exact
//!
//! Per work-item, the interpreter runs the side its condition picks. Here every lane also
//! computes the other side's values, which shows nowhere: the class has no faults (accesses
//! at `global_id(0)` inside the span the driver checked, divisions by nonzero constants),
//! loads only read, and the values reach memory and variables only through the masks. A
//! lane's own statements run in its order, with the lanes of the block interleaved, as in
//! the 8-lane code. A merged store writes each element of the block: those of lanes under
//! the mask with their values, the others with what they held when loaded just before. Each
//! element belongs to one work-item of the block (every access is at `global_id(0)`), and a
//! work-item outside the mask does not write it in between, so it is left as it was: the
//! same memory, aliased buffers included (a buffer seen under two names holds what the
//! last merged store of either wrote, and each store reloads).

use iced_x86::code_asm::*;
use kiln_ir::{Expr, Stmt, Var};

use super::gen::{slot, Gen};
use super::Op;
use crate::x86::spmd::{R, XMM, YMM};

impl Gen<'_> {
    /// A lane-varying `if`: `then` under the condition's lanes of the enclosing mask,
    /// `otherwise` under the rest of it.
    pub(super) fn branch(&mut self, cond: &Expr, then: &Stmt, otherwise: Option<&Stmt>) -> R<()> {
        let c = self.expr(cond)?;
        let (rc, c) = self.reg(c)?;
        let m = if matches!(c, Op::Reg(_, true)) { rc } else { self.alloc()? };
        match self.mask {
            Some(outer) => self.v.a.vpand(YMM[m], YMM[rc], YMM[outer])?,
            None if m != rc => self.v.a.vmovdqa(YMM[m], YMM[rc])?,
            None => {}
        }
        let outer = self.mask.replace(m);
        self.block(then.stmts())?;
        if let Some(o) = otherwise {
            match outer {
                // outer & !cond
                Some(outer) => self.v.a.vpandn(YMM[m], YMM[m], YMM[outer])?,
                None => {
                    let ones = self.konst(u32::MAX);
                    self.v.a.vpxor(YMM[m], YMM[m], ymmword_ptr(r15 + slot(ones)))?;
                }
            }
            self.block(o.stmts())?;
        }
        self.mask = outer;
        self.free |= 1 << m;
        Ok(())
    }

    /// `buf[global_id(0)] = value` for the block: whole, or merged under the mask.
    pub(super) fn store(&mut self, buf: &Var, value: &Expr) -> R<()> {
        let o = self.expr(value)?;
        let (r, o) = self.reg(o)?;
        self.prefetch(buf)?;
        let (base, size, d) = self.element(buf, 0)?;
        let at = base + rbx * size + d;
        if self.w.wide8(value.ty()) {
            // The canonical words packed to their bytes (in range: no saturation), the two
            // halves' quadwords brought together.
            let p = if matches!(o, Op::Reg(_, true)) { r } else { self.alloc()? };
            if value.ty().scalar().is_some_and(|s| s.is_signed()) {
                self.v.a.vpacksswb(YMM[p], YMM[r], YMM[r])?;
            } else {
                self.v.a.vpackuswb(YMM[p], YMM[r], YMM[r])?;
            }
            self.v.a.vpermq(YMM[p], YMM[p], 8)?;
            if let Some(m) = self.mask {
                // The word mask packed the same way (all-ones words stay all-ones bytes).
                let (pm, old) = (self.alloc()?, self.alloc()?);
                self.v.a.vpacksswb(YMM[pm], YMM[m], YMM[m])?;
                self.v.a.vpermq(YMM[pm], YMM[pm], 8)?;
                self.v.a.vmovdqu(XMM[old], xmmword_ptr(at))?;
                self.v.a.vpblendvb(XMM[p], XMM[old], XMM[p], XMM[pm])?;
                self.free |= (1 << pm) | (1 << old);
            }
            self.v.a.vmovdqu(xmmword_ptr(at), XMM[p])?;
            self.free |= 1 << p;
        } else if let Some(m) = self.mask {
            let old = self.alloc()?;
            self.v.a.vmovdqu(YMM[old], ymmword_ptr(at))?;
            self.v.a.vpblendvb(YMM[old], YMM[old], YMM[r], YMM[m])?;
            self.v.a.vmovdqu(ymmword_ptr(at), YMM[old])?;
            self.free |= 1 << old;
        } else {
            self.v.a.vmovdqu(ymmword_ptr(at), YMM[r])?;
        }
        self.release(o);
        Ok(())
    }
}
