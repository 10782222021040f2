//! The memory side of row-blocked loops (`blocked.rs`): each chunk's row segments read
//! into a blocked access's frame block (8x8 dword or 4x4 qword transposes) and written
//! back from it, the lines a batch ahead prefetched, and the loads of a buffer at exactly
//! the counter (`gamma[j]`, the same element for every lane) as broadcasts at the chunk's
//! counter plus the copy's iteration.
//!
//! Why prefetch: a batch's lanes walk rows `cols` elements apart, each a few lines long
//! (a 97-element row is six), so the hardware's stream prefetchers never train on one
//! before it ends, and every chunk waited for its lines (a row sum read 2.5 GB/s where a
//! plain loop over the same memory reads 9). The lanes' rows of the next batches are the
//! same walk shifted by the batch's span, `b_7 + b_1 - 2 b_0` elements for rows at a
//! constant stride; each chunk asks for its lanes' segments that many elements ahead
//! times [`AHEAD_BATCHES`]. A prefetch never faults (any address) and changes no value,
//! so bases that are not rows at a constant stride only lose the hint.
//!
//! Only the first loop over a row prefetches it ([`RowReads`]): a later loop over the same
//! buffer at the same base (a softmax's second and third pass over `x`) reads rows the
//! first left in cache, and its prefetches only spent load slots and pulled the batches
//! ahead into the first-level cache again, against the rows in use (a softmax's 1 KB rows:
//! 16 KB ahead per buffer). A store's rows first touched in a later loop (softmax's `y`)
//! are still prefetched: without it a layer norm ran at half the speed on the VM.

use iced_x86::code_asm::*;
use kiln_ir::{Expr, ExprNode, Stmt, Var};

use super::blocked::Block;
use super::{R, V, XMM, YMM};

/// How many batches ahead a chunk prefetches its lanes' row segments.
const AHEAD_BATCHES: i64 = 2;

/// What the row-blocked loops generated so far decided about prefetching.
#[derive(Debug, Default)]
pub(super) struct RowReads {
    /// Per loop (its body's address), whether each of its blocked accesses prefetches,
    /// so that a loop generated twice decides the same both times.
    loops: Vec<(usize, Vec<bool>)>,
    /// The rows (buffer, base) some loop already reads or writes.
    seen: Vec<(String, String)>,
}

impl V {
    /// Which of `blocks`, the blocked accesses of the loop over `body`, prefetch.
    pub(super) fn row_prefetch(&mut self, body: &[Stmt], blocks: &[Block]) -> Vec<bool> {
        let key = body.as_ptr() as usize;
        let rr = &mut self.row_reads;
        if let Some(l) = rr.loops.iter().find(|l| l.0 == key) {
            return l.1.clone();
        }
        let on: Vec<bool> =
            blocks.iter().map(|b| !rr.seen.iter().any(|s| s.0 == b.buf && s.1 == b.base)).collect();
        for b in blocks {
            rr.seen.push((b.buf.clone(), b.base.clone()));
        }
        rr.loops.push((key, on.clone()));
        on
    }

    /// Lane `l`'s base into `r10` (sign- or zero-extended).
    pub(super) fn base_lane(&mut self, slot: i32, l: i32, signed: bool) -> R<()> {
        if signed {
            self.a.movsxd(r10, dword_ptr(r15 + (slot + 4 * l)))?;
        } else {
            self.a.mov(r10d, dword_ptr(r15 + (slot + 4 * l)))?;
        }
        Ok(())
    }

    /// Lane `l`'s row element at the counter plus `delta` into `r10`, as an element index.
    fn row(&mut self, slot: i32, l: i32, cnt: i32, signed: bool) -> R<()> {
        self.base_lane(slot, l, signed)?;
        self.a.add(r10, qword_ptr(r15 + cnt))?;
        Ok(())
    }

    /// The 4x4 transposes within both 128-bit halves of `ymm0..ymm3` (using `ymm4..ymm7`):
    /// from rows `i | i + 4` to columns, or back.
    fn transpose4(&mut self) -> R<()> {
        let a = &mut self.a;
        a.vunpcklps(ymm4, ymm0, ymm1)?;
        a.vunpckhps(ymm5, ymm0, ymm1)?;
        a.vunpcklps(ymm6, ymm2, ymm3)?;
        a.vunpckhps(ymm7, ymm2, ymm3)?;
        a.vshufps(ymm0, ymm4, ymm6, 0x44)?;
        a.vshufps(ymm1, ymm4, ymm6, 0xee)?;
        a.vshufps(ymm2, ymm5, ymm7, 0x44)?;
        a.vshufps(ymm3, ymm5, ymm7, 0xee)?;
        Ok(())
    }

    /// A blocked load's chunk: the lanes' row segments (8 elements from the counter) into
    /// its block, one vector per iteration.
    pub(super) fn block_in(&mut self, bk: &Block, slot: i32, cnt: i32, signed: bool) -> R<()> {
        if bk.wide {
            return self.block_in64(bk, slot, cnt, signed);
        }
        let base = self.base(bk.table)?;
        self.span(bk)?;
        for h in 0..2 {
            for i in 0..4 {
                self.row(slot, i, cnt, signed)?;
                self.prefetch_row(base, 4, h == 0 && bk.prefetch)?;
                self.a.vmovups(XMM[i as usize], xmmword_ptr(base + r10 * 4 + 16 * h))?;
                self.row(slot, i + 4, cnt, signed)?;
                self.prefetch_row(base, 4, h == 0 && bk.prefetch)?;
                let y = YMM[i as usize];
                self.a.vinsertf128(y, y, xmmword_ptr(base + r10 * 4 + 16 * h), 1)?;
            }
            self.transpose4()?;
            for c in 0..4 {
                let off = bk.off + 32 * (4 * h + c);
                self.a.vmovups(ymmword_ptr(r15 + off), YMM[c as usize])?;
            }
        }
        Ok(())
    }

    /// A blocked store's chunk (the counter already past it): its block's eight vectors,
    /// one per iteration, written as the lanes' row segments.
    pub(super) fn block_out(&mut self, bk: &Block, slot: i32, cnt: i32, signed: bool) -> R<()> {
        let base = self.base(bk.table)?;
        self.span(bk)?;
        for h in 0..2 {
            for c in 0..4 {
                let off = bk.off + 32 * (4 * h + c);
                self.a.vmovups(YMM[c as usize], ymmword_ptr(r15 + off))?;
            }
            self.transpose4()?;
            for i in 0..4 {
                let disp = 16 * h - 32;
                self.row(slot, i, cnt, signed)?;
                self.prefetch_row(base, 4, h == 0 && bk.prefetch)?;
                self.a.vmovups(xmmword_ptr(base + r10 * 4 + disp), XMM[i as usize])?;
                self.row(slot, i + 4, cnt, signed)?;
                self.prefetch_row(base, 4, h == 0 && bk.prefetch)?;
                self.a.vextractf128(xmmword_ptr(base + r10 * 4 + disp), YMM[i as usize], 1)?;
            }
        }
        Ok(())
    }

    /// [`V::block_in`] of 64-bit elements: per group of four lanes and four iterations, the
    /// lanes' four-element row segments transposed as 4x4 qwords.
    fn block_in64(&mut self, bk: &Block, slot: i32, cnt: i32, signed: bool) -> R<()> {
        let base = self.base(bk.table)?;
        self.span(bk)?;
        for half in 0..2 {
            for h in 0..2 {
                for i in 0..4 {
                    self.row(slot, 4 * half + i, cnt, signed)?;
                    // (A lane's chunk is one 64-byte line of 64-bit elements.)
                    self.prefetch_row(base, 8, h == 0 && bk.prefetch)?;
                    self.a.vmovupd(YMM[i as usize], ymmword_ptr(base + r10 * 8 + 32 * h))?;
                }
                let a = &mut self.a;
                a.vunpcklpd(ymm4, ymm0, ymm1)?;
                a.vunpckhpd(ymm5, ymm0, ymm1)?;
                a.vunpcklpd(ymm6, ymm2, ymm3)?;
                a.vunpckhpd(ymm7, ymm2, ymm3)?;
                a.vperm2f128(ymm0, ymm4, ymm6, 0x20)?;
                a.vperm2f128(ymm1, ymm5, ymm7, 0x20)?;
                a.vperm2f128(ymm2, ymm4, ymm6, 0x31)?;
                a.vperm2f128(ymm3, ymm5, ymm7, 0x31)?;
                for c in 0..4 {
                    // Iteration 4h + c, lanes 4 * half ..
                    let off = bk.off + 64 * (4 * h + c) + 32 * half;
                    self.a.vmovupd(ymmword_ptr(r15 + off), YMM[c as usize])?;
                }
            }
        }
        Ok(())
    }

    /// Where `bk` prefetches, its base's prefetch distance into `r11`.
    fn span(&mut self, bk: &Block) -> R<()> {
        if bk.prefetch {
            self.a.mov(r11, qword_ptr(r15 + bk.pf))?;
        }
        Ok(())
    }

    /// Where `on`: a prefetch of the element [`AHEAD_BATCHES`] batches ahead of lane's row
    /// element `r10` (elements of `scale` bytes in `base`; the batch's span in `r11`).
    fn prefetch_row(&mut self, base: AsmRegister64, scale: u32, on: bool) -> R<()> {
        if on {
            self.a.lea(rax, qword_ptr(r10 + r11))?;
            self.a.prefetcht0(byte_ptr(base + rax * scale))?;
        }
        Ok(())
    }

    /// Into frame slot `pf`: the span of the batch whose lanes' row bases (`u32`/`i32`
    /// lanes) are in `slot`, [`AHEAD_BATCHES`] times, in elements: `b_7 + b_1 - 2 b_0`
    /// (eight times the stride of rows at a constant stride). Any value is safe: only
    /// prefetches read it.
    pub(super) fn row_span(&mut self, slot: i32, pf: i32, signed: bool) -> R<()> {
        self.base_lane(slot, 7, signed)?;
        self.a.mov(rax, r10)?;
        self.base_lane(slot, 1, signed)?;
        self.a.add(rax, r10)?;
        self.base_lane(slot, 0, signed)?;
        self.a.sub(rax, r10)?;
        self.a.sub(rax, r10)?;
        self.a.imul_3(rax, rax, AHEAD_BATCHES as i32)?;
        self.a.mov(qword_ptr(r15 + pf), rax)?;
        Ok(())
    }

    /// Jumps to `other` unless buffers `ts` (32-bit elements) and `tl` (elements of `scale`
    /// bytes) are apart in memory, or with `same_ok` the same memory (equal bases).
    pub(super) fn tables_apart(
        &mut self,
        ts: u32,
        tl: u32,
        scale: u32,
        same_ok: bool,
        other: CodeLabel,
    ) -> R<()> {
        let mut apart = self.a.create_label();
        let (ts, tl) = (ts as i32 * 16, tl as i32 * 16);
        self.a.mov(rax, qword_ptr(r14 + tl))?;
        self.a.mov(r11, qword_ptr(r14 + ts))?;
        if same_ok {
            self.a.cmp(rax, r11)?;
            self.a.je(apart)?;
        }
        self.a.mov(r10, qword_ptr(r14 + (ts + 8)))?;
        self.a.lea(r10, qword_ptr(r11 + r10 * 4))?;
        self.a.cmp(rax, r10)?;
        self.a.jae(apart)?;
        self.a.mov(r10, qword_ptr(r14 + (tl + 8)))?;
        self.a.lea(r10, qword_ptr(rax + r10 * scale))?;
        self.a.cmp(r11, r10)?;
        self.a.jb(other)?;
        self.bind(&mut apart)
    }

    /// In a blocked loop's copy, a load of `buf` at exactly the counter that the loop
    /// checked once (`Blocking::bcast`): the copy's element broadcast into `ymm{d}`, with
    /// no check. False for any other load.
    pub(super) fn blocked_bcast(&mut self, buf: &Var, index: &Expr, d: usize) -> R<bool> {
        let Some(bk) = self.blocking.as_ref() else { return Ok(false) };
        let at_counter = matches!(index.node(), ExprNode::Var(v) if v.name() == bk.counter);
        let Some(&(_, table)) = bk.bcast.iter().find(|b| at_counter && b.0 == buf.name()) else {
            return Ok(false);
        };
        // (The counter stays at the chunk's first iteration unless the copies step it.)
        let (cnt, k) = (bk.cnt, if bk.stepped { 0 } else { bk.k });
        self.a.mov(rax, qword_ptr(r15 + cnt))?;
        let base = self.base(table)?;
        self.a.vbroadcastss(YMM[d], dword_ptr(base + rax * 4 + 4 * k))?;
        Ok(true)
    }
}
