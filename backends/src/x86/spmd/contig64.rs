//! Loads and stores of 64-bit elements (f64, i64, u64) at `global_id(0)` plus a
//! batch-uniform value (`Kind::Contig`: lane k's index is lane 0's + k): two 4-lane halves
//! of consecutive qwords, as at exactly `global_id(0)`, instead of two gathers or eight
//! per-lane stores (`ewma`'s `x[t * m + i]`, with `offsetvars.rs`).
//!
//! Under no control mask, where the batch's span is in bounds (a proof, or one compare of
//! lane 0's index with the length minus 8, as for 32-bit elements: `mem.rs`'s
//! [`V::span_test`]), two plain vector accesses. Otherwise (a mask, or a span not proven in
//! bounds) the lanes' check reports the lowest faulting lane as the interpreter does and
//! leaves the access to the lanes in bounds, then two masked accesses (`vmaskmovpd`) at
//! lane 0's index sign-extended: for every lane in bounds that is its own index, also
//! where the batch's indices wrap around 2^32 (lengths are below 2^31, so such a lane's
//! index is lane 0's minus 2^32 plus k), and masked-off lanes touch no memory. The elements
//! of a batch are distinct, so the order of its stores cannot show.

use iced_x86::code_asm::*;
use kiln_ir::Expr;

use super::{R, V, XMM, YMM};

impl V {
    /// A load of the 64-bit `buf[index]` (table `t`), `index` contiguous, into `ymm{d}`,
    /// `ymm{d+1}` (`ymm{d+2}`, `ymm{d+3}` temporaries).
    pub(super) fn contig_load64(&mut self, t: u32, index: &Expr, d: usize) -> R<()> {
        let signed = Self::index_type(index)?;
        self.expr(index, d)?;
        let mut done = self.a.create_label();
        let fast = self.mask.is_none();
        if fast {
            let slow = self.span_test(index, t, d)?;
            let base = self.base(t)?;
            self.a.vmovupd(YMM[d], ymmword_ptr(base + rax * 8))?;
            self.a.vmovupd(YMM[d + 1], ymmword_ptr(base + rax * 8 + 32))?;
            let Some(mut slow) = slow else { return Ok(()) };
            self.a.jmp(done)?;
            self.bind(&mut slow)?;
        }
        self.active(d + 1)?;
        self.check(index, d, d + 1, d + 2, t, "load", signed)?;
        let base = self.base(t)?;
        self.lane0_index(d)?;
        self.qword_halves(d + 1, d + 2, d + 3)?;
        self.a.vmaskmovpd(YMM[d], YMM[d + 2], ymmword_ptr(base + rax * 8))?;
        self.a.vmaskmovpd(YMM[d + 1], YMM[d + 3], ymmword_ptr(base + rax * 8 + 32))?;
        if fast {
            self.bind(&mut done)?;
        }
        Ok(())
    }

    /// A store of `ymm0`, `ymm1` (a 64-bit value's lanes) at the contiguous `index` of table
    /// `t`, whose lanes are in `ymm2` (`ymm3`, `ymm4` temporaries).
    pub(super) fn contig_store64(&mut self, t: u32, index: &Expr) -> R<()> {
        let signed = Self::index_type(index)?;
        let mut done = self.a.create_label();
        let fast = self.mask.is_none();
        if fast {
            let slow = self.span_test(index, t, 2)?;
            let base = self.base(t)?;
            self.a.vmovupd(ymmword_ptr(base + rax * 8), ymm0)?;
            self.a.vmovupd(ymmword_ptr(base + rax * 8 + 32), ymm1)?;
            let Some(mut slow) = slow else { return Ok(()) };
            self.a.jmp(done)?;
            self.bind(&mut slow)?;
        }
        self.active(3)?;
        self.check(index, 2, 3, 4, t, "store", signed)?;
        let base = self.base(t)?;
        self.lane0_index(2)?;
        self.qword_halves(3, 4, 3)?;
        self.a.vmaskmovpd(ymmword_ptr(base + rax * 8), ymm4, ymm0)?;
        self.a.vmaskmovpd(ymmword_ptr(base + rax * 8 + 32), ymm3, ymm1)?;
        if fast {
            self.bind(&mut done)?;
        }
        Ok(())
    }

    /// Lane 0's index (in `ymm{idx}`), sign-extended, into `rax`.
    fn lane0_index(&mut self, idx: usize) -> R<()> {
        self.a.vmovd(eax, XMM[idx])?;
        self.a.movsxd(rax, eax)?;
        Ok(())
    }
}
