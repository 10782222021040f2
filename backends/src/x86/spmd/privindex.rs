//! Private arrays at indices that are not constants (`private.rs` has the arrays' layout
//! and the constant indices).
//!
//! The frame block of an array is lane-interleaved (element `j` of lane `k` at `off + 32
//! * j + 4 * k`; 64-bit elements two rows, lanes 0..3 then 4..7), so lane `k`'s element
//! `j` is lane `k` of row `j`:
//!
//! * a batch-uniform index `k` below the length (`for k in 1 .. 8 { let v = w[k]; }`, a
//!   scalar counter) is the row(s) at `off + 32 * k`: one vector load, or one store as at
//!   a constant index (blended with the old row under a control mask), whatever the
//!   length;
//! * at indices that differ per lane, a small array (its elements at most
//!   [`SELECT_ROWS`] rows: 8 of 32 bits, 4 of 64) is read by a select over its rows: row
//!   0, then for each further row `r` a blend of row `r` (from memory) where the index is
//!   `r` (`vpcmpeqd` against `r` broadcast, `vblendvps`), so each lane ends with its own
//!   element; and written by a blend into every row: the index of each inactive lane set
//!   to -1 (no row's number), then for each row `r` the value blended in where the index
//!   is `r` and the row stored whole;
//! * a larger array is read by a gather (`8 * index + lane`) and written by eight
//!   untested per-lane stores, each inactive lane's index turned into the array's *sink*
//!   element, one past its end (frame space of its own that nothing reads): no branch on
//!   the active lanes (which diverge in the loops that index such arrays per lane).
//!
//! Why two forms: the select and the blend cost two and four instructions a row, the
//! gather and the stores a fixed amount; and the rows the blend stores whole forward to
//! the select's row loads, where a row load after per-lane dword stores waits for them to
//! reach the cache (sort8's insertion sort on the development VM: main's gather and
//! tested per-lane stores 1.3-1.6 s, the gather and the sink stores 0.65-0.85 s, the
//! select and the blend 0.5-0.7 s; at 12 and 16 elements the select and the blend lose
//! to the gather and the sink stores).
//!
//! Faults are the existing ones: the indices are checked against the length in the
//! active lanes before any element is read or written (`V::check_private`), so the lowest
//! faulting lane is reported and leaves the batch, and the writes only touch the lanes
//! still active after it. A uniform index out of bounds takes that same checked path.
//! What inactive lanes read is never used, so the select and the gather's lanes are not
//! masked beyond that.

use iced_x86::code_asm::*;
use kiln_ir::{Expr, Scalar, Type};

use super::wide64::is_64;
use super::{Kind, Priv, R, V, XMM, YMM};

/// The most frame rows (32 bytes each) that an array's elements may take for the select
/// and the blend (measured on sort8-like loops: at 8 rows they match or beat the gather
/// and the stores, at 12 and 16 they lose).
const SELECT_ROWS: u32 = 8;

/// Frame rows per element of type `elem` (two for 64-bit elements).
pub(super) fn elem_rows(elem: Scalar) -> u32 {
    if is_64(Type::Scalar(elem)) {
        2
    } else {
        1
    }
}

/// True if accesses to `p` at lane-varying indices are selects and blends (else gathers
/// and sink stores).
pub(super) fn selects(p: &Priv) -> bool {
    p.count * elem_rows(p.elem) <= SELECT_ROWS
}

impl V {
    /// For a batch-uniform `index` into `p`: its value into `eax` (computed there if it
    /// is general-purpose-register arithmetic, else in `ymm{d}` and taken from lane 0),
    /// and where it is below the length, its row's byte offset from `p.off` into `rax`
    /// (falling through); else a jump to the returned label, where `ymm{d}` holds the
    /// index in every lane for the checked path. `None` where `index` is not uniform.
    pub(super) fn uniform_row(&mut self, p: &Priv, index: &Expr, d: usize) -> R<Option<CodeLabel>> {
        if self.kind(index) != Kind::Uniform {
            return Ok(None);
        }
        let in_eax = self.gpr_ok(index);
        if in_eax {
            self.gpr(index)?;
        } else {
            self.expr(index, d)?;
            self.a.vmovd(eax, XMM[d])?;
        }
        let slow = self.a.create_label();
        let mut fast = self.a.create_label();
        // (An `i32` index below 0 is a `u32` one above the length.)
        self.a.cmp(eax, p.count as i32)?;
        self.a.jb(fast)?;
        if in_eax {
            // (The lanes' check reads the index in every lane.)
            self.a.vmovd(XMM[d], eax)?;
            self.a.vpbroadcastd(YMM[d], XMM[d])?;
        }
        self.a.jmp(slow)?;
        self.bind(&mut fast)?;
        let shift = (32 * elem_rows(p.elem)).trailing_zeros();
        self.a.shl(eax, shift as i32)?;
        Ok(Some(slow))
    }

    /// Lane `k` of `ymm{d}` := element `ymm{d}[k]` of `p` (64-bit elements: into `ymm{d}`
    /// and `ymm{d+1}`), every lane's index in bounds or the lane inactive in the mask in
    /// `ymm{d+1}`; the temporaries are `ymm{d+1}`, `ymm{d+2}` (64-bit: up to `ymm{d+4}`).
    pub(super) fn read_lanes(&mut self, p: &Priv, d: usize) -> R<()> {
        let wide = is_64(Type::Scalar(p.elem));
        match (selects(p), wide) {
            (true, true) => self.select_private64(p, d),
            (true, false) => self.select_private(p, d),
            (false, true) => {
                self.lane_offsets(d)?;
                self.gather64(r15, p.off, d)
            }
            (false, false) => {
                self.lane_offsets(d)?;
                let (x, m, g) = (YMM[d], YMM[d + 1], YMM[d + 2]);
                self.a.vpxor(g, g, g)?;
                self.a.vgatherdps_3(g, ymmword_ptr(r15 + x * 4 + p.off), m)?;
                self.a.vmovaps(x, g)?;
                Ok(())
            }
        }
    }

    /// The checked indices in `ymm{idx}` as element offsets from `p.off` (`8 * index +
    /// lane`: dwords, or qwords for 64-bit elements), for a gather or per-lane stores.
    fn lane_offsets(&mut self, idx: usize) -> R<()> {
        self.a.vpslld(YMM[idx], YMM[idx], 3)?;
        self.a.vpaddd(YMM[idx], YMM[idx], ymmword_ptr(r15))?;
        Ok(())
    }

    /// [`V::read_lanes`] by the select, 32-bit elements.
    fn select_private(&mut self, p: &Priv, d: usize) -> R<()> {
        let (x, m, acc) = (YMM[d], YMM[d + 1], YMM[d + 2]);
        self.a.vmovups(acc, ymmword_ptr(r15 + p.off))?;
        for r in 1..p.count {
            let k = self.imm_slot(r);
            self.a.vpcmpeqd(m, x, ymmword_ptr(r15 + k))?;
            self.a.vblendvps(acc, acc, ymmword_ptr(r15 + (p.off + 32 * r as i32)), m)?;
        }
        self.a.vmovaps(x, acc)?;
        Ok(())
    }

    /// [`V::read_lanes`] by the select, 64-bit elements: into `ymm{d}` (lanes 0..3) and
    /// `ymm{d+1}` (4..7).
    fn select_private64(&mut self, p: &Priv, d: usize) -> R<()> {
        let (lo, hi, m) = (YMM[d + 2], YMM[d + 3], YMM[d + 4]);
        self.qword_halves(d, d + 1, d)?;
        self.a.vmovupd(lo, ymmword_ptr(r15 + p.off))?;
        self.a.vmovupd(hi, ymmword_ptr(r15 + (p.off + 32)))?;
        for r in 1..p.count {
            let k = self.const_slot((u64::from(r), 4));
            let row = p.off + 64 * r as i32;
            self.a.vpcmpeqq(m, YMM[d + 1], ymmword_ptr(r15 + k))?;
            self.a.vblendvpd(lo, lo, ymmword_ptr(r15 + row), m)?;
            self.a.vpcmpeqq(m, YMM[d], ymmword_ptr(r15 + k))?;
            self.a.vblendvpd(hi, hi, ymmword_ptr(r15 + (row + 32)), m)?;
        }
        self.a.vmovapd(YMM[d], lo)?;
        self.a.vmovapd(YMM[d + 1], hi)?;
        Ok(())
    }

    /// `ymm{idx}` := its lanes where `ymm{act}` is set, `fill` (a frame slot) elsewhere
    /// (`ymm{t}` a temporary).
    fn inactive_to(&mut self, idx: usize, act: usize, t: usize, fill: i32) -> R<()> {
        self.a.vmovups(YMM[t], ymmword_ptr(r15 + fill))?;
        self.a.vblendvps(YMM[idx], YMM[t], YMM[idx], YMM[act])?;
        Ok(())
    }

    /// `p[index] = value` in the lanes of the mask in `ymm{act}`, each lane at its own
    /// index (checked: in bounds in every lane of `act`), from the registers that
    /// `store_private` leaves: the value in `ymm0` (64-bit: `ymm0`, `ymm1`), the indices
    /// in `ymm{act-1}`; the registers from `act` up are temporaries.
    pub(super) fn write_lanes(&mut self, p: &Priv, act: usize) -> R<()> {
        if selects(p) {
            self.blend_private(p, act)
        } else {
            self.scatter_private(p, act)
        }
    }

    /// [`V::write_lanes`] by a blend into every row.
    fn blend_private(&mut self, p: &Priv, act: usize) -> R<()> {
        let idx = act - 1;
        let (t, row) = (YMM[act + 1], YMM[act + 2]);
        let none = self.imm_slot(u32::MAX);
        self.inactive_to(idx, act, act + 1, none)?;
        if !is_64(Type::Scalar(p.elem)) {
            for r in 0..p.count {
                let k = self.imm_slot(r);
                let at = p.off + 32 * r as i32;
                self.a.vpcmpeqd(t, YMM[idx], ymmword_ptr(r15 + k))?;
                self.a.vmovups(row, ymmword_ptr(r15 + at))?;
                self.a.vblendvps(row, row, ymm0, t)?;
                self.a.vmovups(ymmword_ptr(r15 + at), row)?;
            }
            return Ok(());
        }
        // Lanes 0..3's indices into `act` (no longer needed), 4..7's in place.
        self.qword_halves(idx, act, idx)?;
        for r in 0..p.count {
            let k = self.const_slot((u64::from(r), 4));
            for (half, (ix, v)) in [(act, ymm0), (idx, ymm1)].into_iter().enumerate() {
                let at = p.off + 64 * r as i32 + 32 * half as i32;
                self.a.vpcmpeqq(t, YMM[ix], ymmword_ptr(r15 + k))?;
                self.a.vmovupd(row, ymmword_ptr(r15 + at))?;
                self.a.vblendvpd(row, row, v, t)?;
                self.a.vmovupd(ymmword_ptr(r15 + at), row)?;
            }
        }
        Ok(())
    }

    /// [`V::write_lanes`] by per-lane stores: each lane's element stored by itself, the
    /// inactive lanes' to the sink element (`p.count`), in lane order with no test.
    fn scatter_private(&mut self, p: &Priv, act: usize) -> R<()> {
        let idx = act - 1;
        let sink = self.imm_slot(p.count);
        self.inactive_to(idx, act, act + 1, sink)?;
        self.lane_offsets(idx)?;
        if !is_64(Type::Scalar(p.elem)) {
            return self.store_all_lanes(r15, p.off, 4);
        }
        for lane in 0..8u32 {
            let k = lane % 4;
            let v = if lane < 4 { xmm0 } else { xmm1 };
            if lane == 4 {
                self.a.vextracti128(XMM[idx], YMM[idx], 1)?;
            }
            if lane % 4 == 2 {
                // The value's upper two qwords of its register.
                self.a.vextracti128(v, YMM[lane as usize / 4], 1)?;
            }
            if k == 0 {
                self.a.vmovd(r10d, XMM[idx])?;
            } else {
                self.a.vpextrd(r10d, XMM[idx], k)?;
            }
            let at = qword_ptr(r15 + r10 * 8 + p.off);
            if lane % 2 == 0 {
                self.a.vmovq(at, v)?;
            } else {
                self.a.vpextrq(at, v, 1)?;
            }
        }
        Ok(())
    }
}
