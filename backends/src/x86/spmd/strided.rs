//! Loads at a constant stride of the work-item id: `x[2 * i]`, `x[2 * i + 1]` (interleaved
//! pairs), `img[3 * i + k]`, the element accesses a `vload4(p, 4 * i)` splits into. The
//! lanes' elements lie in a span of `8 * s` elements from lane 0's, so when the whole span
//! is in bounds (one compare per batch) the load is `s` contiguous vector loads, each
//! permuted to the lanes it serves and blended, instead of a gather; otherwise (a span
//! running past the end, a negative index, after a fault) the checked gather as before,
//! so faults are exactly the interpreter's. 32-bit elements at strides 2 to 8, 8-bit ones
//! at strides 2 to 4 (`vpshufb` from one 16- or 32-byte load); 16-bit and 64-bit elements
//! keep their per-lane loads and gathers. Stores of 32-bit elements at strides 2 to 8 the
//! same way: with the span in bounds, one masked vector store per 8 elements of it.

use iced_x86::code_asm::*;
use kiln_ir::{BinOp, Expr, ExprNode, Imm, Scalar, Type};

use super::{Kind, R, V, XMM, YMM};

/// The kind of a [`V::const_slot`] key that is a `vpermps` index vector, the key's first
/// part its eight indices one byte each (lane k's in byte k), filled once per call.
pub(super) const CONST_STRIDE: u8 = 7;

/// The indices of stride `s`'s load permutation, one byte each (lane k's byte
/// `(s * k) % 8`), zero-extended to dwords when the slot is filled.
pub(super) fn perm_bytes(s: u64) -> u64 {
    (0..8u64).fold(0, |b, k| b | ((s * k) % 8) << (8 * k))
}

/// The lanes (bit k: lane k) whose element of stride `s` lies in the `j`th 8-element
/// vector of the span.
fn lanes_of(s: u32, j: u32) -> u32 {
    (0..8).filter(|k| s * k / 8 == j).fold(0, |m, k| m | 1 << k)
}

impl V {
    /// The stride `s` (2 to 8) of an `i32`/`u32` index `s * c + b`, `c` contiguous across
    /// the lanes (lane k's value lane 0's plus k) and `b` batch-uniform (or absent): then
    /// lane k's index is lane 0's plus `s * k`, wrapping as the lanes compute it.
    pub(super) fn stride_of(&self, index: &Expr) -> Option<u32> {
        self.any_stride(index).filter(|&s| s <= 8)
    }

    /// [`V::stride_of`] up to 16: groups of interleaved accesses (`loadgroup.rs`,
    /// `storegroup.rs`, `rows.rs`) reach strides 9 to 16 (a 4x4 matrix's 16 elements per
    /// work-item), where a lone strided access would read or write too many vectors.
    pub(super) fn any_stride(&self, index: &Expr) -> Option<u32> {
        if !matches!(index.ty(), Type::Scalar(Scalar::I32 | Scalar::U32)) {
            return None;
        }
        if let Some(d) = super::expr::desugar(index) {
            return self.any_stride(&d);
        }
        let contig = |e: &Expr| matches!(self.kind(e), Kind::Gid0 | Kind::Contig);
        let konst = |e: &Expr| match e.as_imm() {
            Some(Imm::Int(_, bits)) => Some(*bits as u32),
            _ => None,
        };
        let (op, a, b) = match index.node() {
            ExprNode::Binary { op, a, b } => (op, a, b),
            ExprNode::Var(v) => return self.find(v.name()).and_then(|b| b.stride),
            _ => return None,
        };
        let s = match op {
            BinOp::Mul => match (konst(a), konst(b)) {
                (Some(s), _) if contig(b) => s,
                (_, Some(s)) if contig(a) => s,
                _ => return None,
            },
            BinOp::Shl if contig(a) => match konst(b) {
                Some(c @ 1..=4) => 1 << c,
                _ => return None,
            },
            BinOp::Add if self.kind(b) == Kind::Uniform => self.any_stride(a)?,
            BinOp::Add if self.kind(a) == Kind::Uniform => self.any_stride(b)?,
            BinOp::Sub if self.kind(b) == Kind::Uniform => self.any_stride(a)?,
            _ => return None,
        };
        (2..=16).contains(&s).then_some(s)
    }

    /// A jump to the returned label unless the `span` elements from lane 0's index (in
    /// `xmm{idx}`, zero-extended into `rax`) all lie in table `t`: the test against the
    /// table's length minus 8 (the whole-batch test's slot, which a fault sets to -1 for the
    /// rest of the call, so after one it always fails) less the span's elements past a
    /// batch's eight. Lane 0's index passes only below 2^31 - `span`, so no lane's index
    /// wraps, and a negative `i32` one never passes. (`r11` clobbered.)
    pub(super) fn span_in_bounds(&mut self, t: u32, span: u32, idx: usize) -> R<CodeLabel> {
        let slow = self.a.create_label();
        self.span_test_to(t, span, idx, slow)?;
        Ok(slow)
    }

    /// [`V::span_in_bounds`]'s test, jumping to `slow`.
    pub(super) fn span_test_to(&mut self, t: u32, span: u32, idx: usize, slow: CodeLabel) -> R<()> {
        let last8 = self.const_slot((u64::from(t), 5));
        self.a.vmovd(eax, XMM[idx])?;
        self.a.mov(r11, qword_ptr(r15 + last8))?;
        self.a.sub(r11, (span - 8) as i32)?;
        self.a.cmp(rax, r11)?;
        self.a.jg(slow)?;
        Ok(())
    }

    /// For a load of 32-bit elements of table `t` at stride `s` whose lanes' indices are in
    /// `ymm{d}`: when the span of `8 * s` elements from lane 0's index is in bounds, the
    /// lanes' elements into `ymm{d}` (`ymm{d+1}`, `ymm{d+2}` temporaries) and a jump to
    /// `done`; otherwise a jump to the returned label, where the checked gather follows.
    /// The test is against the table's length minus 8 (the whole-batch test's slot, which
    /// a fault sets to -1 for the rest of the call: then every batch takes the gather,
    /// which respects the lanes alive). Lane 0's index zero-extended passes only below
    /// 2^31 - 8s, so no lane's index wraps, and a negative `i32` one never passes.
    pub(super) fn strided_load(
        &mut self,
        t: u32,
        s: u32,
        d: usize,
        done: CodeLabel,
    ) -> R<CodeLabel> {
        let slow = self.span_in_bounds(t, 8 * s, d)?;
        let perm = self.const_slot((perm_bytes(u64::from(s)), CONST_STRIDE));
        let base = self.base(t)?;
        let (x, p, y) = (YMM[d], YMM[d + 1], YMM[d + 2]);
        self.a.vmovups(p, ymmword_ptr(r15 + perm))?;
        self.a.vpermps(x, p, ymmword_ptr(base + rax * 4))?;
        for j in 1..s {
            self.a.vpermps(y, p, ymmword_ptr(base + rax * 4 + (32 * j) as i32))?;
            self.a.vblendps(x, x, y, lanes_of(s, j) as i32)?;
        }
        self.a.jmp(done)?;
        Ok(slow)
    }
}

/// The kind of a [`V::const_slot`] key whose first part is eight bytes placed in the slot's
/// low qword (the rest zero): a `vpshufb` mask of [`byte_masks`].
pub(super) const CONST_BYTES: u8 = 8;

/// The `vpshufb` masks that gather the bytes at stride `s` (2 to 4) from a 32-byte span
/// into the low eight bytes of an `xmm`: from its low 16 bytes and from its high 16 bytes
/// (0x80: a zero byte), one byte per lane, as the keys of [`CONST_BYTES`] slots.
pub(super) fn byte_masks(s: u32) -> (u64, u64) {
    (0..8u32).fold((0, 0), |(lo, hi), k| {
        let o = u64::from(s * k);
        let (l, h) = if o < 16 { (o, 0x80) } else { (0x80, o - 16) };
        (lo | l << (8 * k), hi | h << (8 * k))
    })
}

impl V {
    /// [`V::strided_load`] for 8-bit elements at stride `s` (2 to 4): the span (16 bytes
    /// for stride 2, else 32, all in bounds or the checked per-lane loads at the returned
    /// label) loaded whole, its lanes' bytes picked by `vpshufb` and extended to dwords as
    /// `signed` says.
    pub(super) fn strided_bytes(
        &mut self,
        t: u32,
        s: u32,
        signed: bool,
        d: usize,
        done: CodeLabel,
    ) -> R<CodeLabel> {
        let span: u32 = if s == 2 { 16 } else { 32 };
        let slow = self.span_in_bounds(t, span, d)?;
        let (lo, hi) = byte_masks(s);
        let lo = self.const_slot((lo, CONST_BYTES));
        let hi = self.const_slot((hi, CONST_BYTES));
        let base = self.base(t)?;
        let (x, y, z) = (XMM[d], XMM[d + 1], XMM[d + 2]);
        if span == 16 {
            self.a.vmovdqu(x, xmmword_ptr(base + rax))?;
            self.a.vpshufb(x, x, xmmword_ptr(r15 + lo))?;
        } else {
            self.a.vmovdqu(YMM[d + 1], ymmword_ptr(base + rax))?;
            self.a.vextracti128(z, YMM[d + 1], 1)?;
            self.a.vpshufb(y, y, xmmword_ptr(r15 + lo))?;
            self.a.vpshufb(z, z, xmmword_ptr(r15 + hi))?;
            self.a.vpor(x, y, z)?;
        }
        if signed {
            self.a.vpmovsxbd(YMM[d], x)?;
        } else {
            self.a.vpmovzxbd(YMM[d], x)?;
        }
        self.a.jmp(done)?;
        Ok(slow)
    }
}

/// For a store at stride `s`, the `j`th 8-element vector of the span: the `vpermps`
/// indices that bring each lane's value to its element's position there (a position no
/// lane writes takes lane 0's, masked off), and the positions written (bit p: position p).
fn store_perm(s: u32, j: u32) -> (u64, u32) {
    (0..8u32).filter(|k| s * k / 8 == j).fold((0, 0), |(idx, pos), k| {
        let p = s * k - 8 * j;
        (idx | u64::from(k) << (8 * p), pos | 1 << p)
    })
}

impl V {
    /// For a store of 32-bit `ymm0` at stride `s` whose lanes' indices are in `ymm1`: when
    /// the span of `8 * s` elements from lane 0's index is in bounds (the test of
    /// [`V::strided_load`]), each of its `s` vectors written by one `vmaskmovps` of the
    /// lanes' values permuted to their positions, masked to the positions of lanes active
    /// (and alive) now, and a jump to `done`; otherwise a jump to the returned label,
    /// where the checked per-lane stores follow. The lanes' elements are distinct and in
    /// bounds, so no order between them can show. (`ymm1` to `ymm3` clobbered.)
    pub(super) fn strided_store(&mut self, t: u32, s: u32, done: CodeLabel) -> R<CodeLabel> {
        let slow = self.span_in_bounds(t, 8 * s, 1)?;
        self.active(2)?;
        let base = self.base(t)?;
        for j in 0..s {
            let (idx, pos) = store_perm(s, j);
            let idx = self.const_slot((idx, CONST_STRIDE));
            let pos = self.const_slot((u64::from(pos), super::CONST_LANES));
            self.a.vmovups(ymm3, ymmword_ptr(r15 + idx))?;
            self.a.vpermps(ymm1, ymm3, ymm0)?;
            self.a.vpermps(ymm3, ymm3, ymm2)?;
            self.a.vpand(ymm3, ymm3, ymmword_ptr(r15 + pos))?;
            self.a.vmaskmovps(ymmword_ptr(base + rax * 4 + (32 * j) as i32), ymm3, ymm1)?;
        }
        self.a.jmp(done)?;
        Ok(slow)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_lane_served_once() {
        for s in 2..=8 {
            let all: u32 = (0..s).map(|j| lanes_of(s, j)).sum();
            assert_eq!(all, 0xff, "stride {s}");
            for k in 0..8u64 {
                let pos = perm_bytes(u64::from(s)) >> (8 * k) & 0xff;
                assert_eq!(pos, (u64::from(s) * k) % 8);
            }
        }
    }

    #[test]
    fn store_perms_place_every_lane_once() {
        for s in 2..=8u32 {
            let mut seen = 0u32;
            for j in 0..s {
                let (idx, pos) = store_perm(s, j);
                for p in 0..8u32 {
                    if pos >> p & 1 != 0 {
                        let k = (idx >> (8 * p) & 0xff) as u32;
                        assert_eq!(s * k, 8 * j + p);
                        seen |= 1 << k;
                    }
                }
            }
            assert_eq!(seen, 0xff);
        }
    }

    #[test]
    fn byte_masks_pick_each_lanes_byte_from_one_half() {
        for s in 2..=4u32 {
            let (lo, hi) = byte_masks(s);
            for k in 0..8u32 {
                let (l, h) = (lo >> (8 * k) & 0xff, hi >> (8 * k) & 0xff);
                let o = u64::from(s * k);
                assert!(if o < 16 { l == o && h == 0x80 } else { l == 0x80 && h == o - 16 });
            }
        }
    }
}
