//! Groups of interleaved stores: `s` consecutive stores of one buffer at `b + o`,
//! `b + o + 1`, ..., `b + o + s - 1` (in any order), `b` of stride `s` (lane k's `b` lane 0's
//! plus `s * k`, see [`V::any_stride`]: up to 16), an array-of-structs output, `rgb[3 * i + k]`, or the
//! element stores a `vstore(out, 4 * i, v)` splits into (`vectors.rs`). Together they
//! write the span of `8 * s` elements from lane 0's `b + o` whole, so where that span is in
//! bounds (one compare per batch, the test of [`V::strided_store`], which fails for the
//! rest of the call after a fault: so where it passes every lane is alive, and only the
//! control mask says which lanes store) the lanes' values are transposed into the span's
//! order and written by `s` vector stores (32-bit elements, masked to the active lanes'
//! elements under a mask; past stride 8 each lane's row by 16-byte stores, `rows.rs`, only
//! with every lane active) or by one to three plain stores of the packed bytes (8-bit
//! elements at strides 2 to 4, 16-bit ones at stride 2: only with every lane active,
//! there being no byte-masked store). Anywhere else (a span past the end or below 0, a
//! fault before, a partial batch of narrow elements) the stores run one after another as
//! before, so faults and what was written before one are exactly the interpreter's.
//!
//! Why the order of the group cannot show: the values and indices are computed before
//! any store, which requires that they can neither fault nor read memory (a store could
//! change what a load reads); with the span in bounds no store faults, and the lanes'
//! elements are distinct (lane k's `b + o + j` is lane 0's `+ s * k + j`, no wrap below
//! the length), so every interleaving leaves the same memory.

use iced_x86::code_asm::*;
use kiln_ir::{BinOp, Expr, ExprNode, Imm, Stmt, StmtNode, Type};

use super::strided::CONST_STRIDE;
use super::{Kind, Loc, R, V, YMM};

/// The kind of a [`V::const_slot`] key that is a `vpshufb` mask of [`shuffle_bytes`] (the
/// key's first part: the stride, plus the element bits times 256), in both 16-byte halves.
pub(super) const CONST_SHUFFLE: u8 = 9;

/// The 16 bytes (in two qwords, low first) of the in-half `vpshufb` that interleaves the
/// packed values of [`V::narrow_group`]: byte `4 * k + l` (8-bit elements) or word
/// `4 * k + l` (16-bit ones) holds value `k` of the half's lane `l`; output element `q` is
/// lane `q / s`'s value `q % s`. Bytes past the output are zeroed (0x80).
pub(super) fn shuffle_bytes(key: u64) -> (u64, u64) {
    let (s, bits) = (key & 0xff, key >> 8);
    let size = bits / 8;
    let mut m = [0x80u8; 16];
    for (b, byte) in m.iter_mut().enumerate() {
        let (q, r) = (b as u64 / size, b as u64 % size);
        if q < 4 * s && q < 16 / size {
            *byte = (size * (4 * (q % s) + q / s) + r) as u8;
        }
    }
    let qword = |h: usize| (0..8).fold(0u64, |x, i| x | u64::from(m[8 * h + i]) << (8 * i));
    (qword(0), qword(1))
}

/// A group's store: its offset from the base, its index and its value.
struct Member<'a> {
    offset: u32,
    index: &'a Expr,
    value: &'a Expr,
}

/// `e` as `(b, o)`: `b + o` for an integer constant `o` (either side), else `(e, 0)`.
pub(super) fn split_offset(e: &Expr) -> (&Expr, u32) {
    if let ExprNode::Binary { op: BinOp::Add, a, b } = e.node() {
        match (a.as_imm(), b.as_imm()) {
            (_, Some(Imm::Int(_, o))) => return (a, *o as u32),
            (Some(Imm::Int(_, o)), _) => return (b, *o as u32),
            _ => {}
        }
    }
    (e, 0)
}

/// The names `e` reads.
pub(super) fn names_in<'a>(e: &'a Expr, out: &mut Vec<&'a str>) {
    match e.node() {
        ExprNode::Var(v) => out.push(v.name()),
        _ => e.children().into_iter().for_each(|c| names_in(c, out)),
    }
}

impl V {
    /// [`split_offset`] of `e`, or, for a name bound by the last `let` of its name among
    /// `before` (the statements before in the same list: `-O`'s `let cse1: u32 = cse0 +
    /// 1;`), of that `let`'s value, where the value's names are `let`s (no `var`, which an
    /// assignment may have changed since) and none is bound again after it.
    pub(super) fn offset_form<'a>(&self, e: &'a Expr, before: &'a [Stmt]) -> (&'a Expr, u32) {
        let ExprNode::Var(x) = e.node() else { return split_offset(e) };
        // (The last binding of the name in the list, `let` or `var`.)
        let def = before.iter().enumerate().rev().find_map(|(d, st)| match st.node() {
            StmtNode::Let { var, value } | StmtNode::Decl { var, init: value }
                if var.name() == x.name() =>
            {
                Some((d, matches!(st.node(), StmtNode::Let { .. }), var, value))
            }
            _ => None,
        });
        let Some((d, true, var, value)) = def else { return (e, 0) };
        let (b, o) = split_offset(value);
        if var != x || o == 0 {
            return (e, 0);
        }
        let mut names = Vec::new();
        names_in(b, &mut names);
        let rebound = |n: &str| {
            before[d + 1..].iter().any(|st| match st.node() {
                StmtNode::Let { var, .. } | StmtNode::Decl { var, .. } => var.name() == n,
                _ => false,
            })
        };
        let lets = names.iter().all(|n| {
            !rebound(n)
                && self.find(n).is_some_and(|b| b.decl.is_none())
                && !self.div_vars.contains(*n)
        });
        if lets {
            (b, o)
        } else {
            (e, 0)
        }
    }
}

impl V {
    /// If `stmts` starts with a group of interleaved stores (see the module docs), its
    /// code and the number of statements it takes; `None` (no code) otherwise.
    pub(super) fn store_group(&mut self, stmts: &[Stmt], before: &[Stmt]) -> R<Option<usize>> {
        let Some((s, buf, members)) = self.group_of(stmts, before) else { return Ok(None) };
        let ty = members[0].value.ty();
        let narrow = super::narrow::narrow(ty);
        let t = self.buf_of(buf, ty)?;
        let first = members.iter().min_by_key(|m| m.offset).expect("a member").index;
        if narrow.is_some() {
            self.fwd_clear();
        } else {
            self.fwd_clear_table(t);
        }
        // The values into registers or slots first (they cannot fault or read memory).
        let mut ordered: Vec<&Member> = members.iter().collect();
        ordered.sort_by_key(|m| m.offset);
        let mut srcs = Vec::with_capacity(ordered.len());
        for m in &ordered {
            // (A `let` in a register or a slot is read from there.)
            let slot = match m.value.node() {
                ExprNode::Var(v) => self.find(v.name()).map(|b| b.loc),
                _ => None,
            };
            srcs.push(match (self.src_if_reg(m.value), slot) {
                (Some(r), _) if r >= super::TEMPS => Loc::Reg(r),
                (_, Some(Loc::Slot(off))) => Loc::Slot(off),
                _ => {
                    self.expr_top(m.value, 0)?;
                    let off = self.slot();
                    self.a.vmovups(ymmword_ptr(r15 + off), ymm0)?;
                    Loc::Slot(off)
                }
            });
        }
        // The span's test, as `strided_store`'s.
        let mut done = self.a.create_label();
        self.expr_top(first, 1)?;
        let mut slow = self.span_in_bounds(t, 8 * s, 1)?;
        match narrow {
            Some((bits, signed)) => self.narrow_group(t, s, bits, signed, &srcs, slow)?,
            None if s > 8 => self.dword_rows(t, s, &srcs, slow)?,
            None => self.dword_group(t, s, &srcs)?,
        }
        self.a.jmp(done)?;
        self.bind(&mut slow)?;
        for st in &stmts[..members.len()] {
            self.stmt(st)?;
        }
        self.bind(&mut done)?;
        Ok(Some(members.len()))
    }

    /// The stride, buffer and stores of the group `stmts` starts with, if it does.
    fn group_of<'a>(
        &self,
        stmts: &'a [Stmt],
        before: &'a [Stmt],
    ) -> Option<(u32, &'a kiln_ir::Var, Vec<Member<'a>>)> {
        let StmtNode::Store { buf, index, .. } = stmts.first()?.node() else { return None };
        // (Not within a group of stores that load, which takes its members' values.)
        if !self.capture.is_empty()
            || self.blocking.is_some()
            || self.private(buf).is_some()
            || self.buf(buf).is_none()
        {
            return None;
        }
        let ty = buf.ty().elem().map(Type::Scalar)?;
        let bits = match super::narrow::narrow(ty) {
            Some((bits, _)) => bits,
            None if super::lane_type(ty) => 32,
            None => return None,
        };
        let (base, _) = self.offset_form(index, before);
        if self.kind(base) != Kind::Div {
            return None;
        }
        let s = self.any_stride(base)?;
        let fits = match bits {
            8 => s <= 4,
            16 => s == 2,
            _ => true,
        };
        if !fits || stmts.len() < s as usize {
            return None;
        }
        let mut members = Vec::with_capacity(s as usize);
        for st in &stmts[..s as usize] {
            let StmtNode::Store { buf: b, index, value } = st.node() else { return None };
            let (bs, offset) = self.offset_form(index, before);
            let quiet = |e: &Expr| super::packed::pure(e);
            if b != buf || bs != base || value.ty() != ty || !quiet(index) || !quiet(value) {
                return None;
            }
            if self.kind(index) != Kind::Div {
                return None;
            }
            members.push(Member { offset, index, value });
        }
        // The offsets are `o .. o + s` (as u32 values, no wrap), each once.
        let o = members.iter().map(|m| m.offset).min()?;
        let mut seen = 0u32;
        for m in &members {
            let d = m.offset.checked_sub(o)?;
            if d >= s || seen >> d & 1 != 0 {
                return None;
            }
            seen |= 1 << d;
        }
        o.checked_add(s)?;
        Some((s, buf, members))
    }

    /// `srcs[k]` (the values at offsets `o + k`) into `ymm{4 + k}` (`k` < 4).
    fn group_values(&mut self, srcs: &[Loc]) -> R<()> {
        for (k, src) in srcs.iter().enumerate() {
            match *src {
                Loc::Reg(r) => self.a.vmovaps(YMM[4 + k], YMM[r])?,
                Loc::Slot(off) => self.a.vmovups(YMM[4 + k], ymmword_ptr(r15 + off))?,
                Loc::Scalar(_) => return super::no("internal: a group value in a dword"),
            }
        }
        Ok(())
    }

    /// The span of 32-bit elements at lane 0's index `rax` of table `t`, in bounds: the
    /// values `srcs` transposed into its `s` vectors, each stored whole, or under a control
    /// mask masked to the active lanes' elements.
    pub(super) fn dword_group(&mut self, t: u32, s: u32, srcs: &[Loc]) -> R<()> {
        // The span's vectors into `ymm0 .. ymm{s-1}` where `s` is 2 or 4 (unpacks within
        // halves and a swap of halves); otherwise each vector built and stored in turn.
        let outs: Option<[usize; 4]> = match s {
            2 => {
                self.group_values(srcs)?;
                self.a.vunpcklps(ymm2, ymm4, ymm5)?;
                self.a.vunpckhps(ymm3, ymm4, ymm5)?;
                self.a.vperm2f128(ymm0, ymm2, ymm3, 0x20)?;
                self.a.vperm2f128(ymm1, ymm2, ymm3, 0x31)?;
                Some([0, 1, 0, 0])
            }
            4 => {
                self.group_values(srcs)?;
                self.a.vunpcklps(ymm0, ymm4, ymm5)?;
                self.a.vunpcklps(ymm1, ymm6, ymm7)?;
                self.a.vunpckhps(ymm2, ymm4, ymm5)?;
                self.a.vunpckhps(ymm3, ymm6, ymm7)?;
                self.a.vunpcklpd(ymm4, ymm0, ymm1)?;
                self.a.vunpckhpd(ymm5, ymm0, ymm1)?;
                self.a.vunpcklpd(ymm6, ymm2, ymm3)?;
                self.a.vunpckhpd(ymm7, ymm2, ymm3)?;
                self.a.vperm2f128(ymm0, ymm4, ymm5, 0x20)?;
                self.a.vperm2f128(ymm1, ymm6, ymm7, 0x20)?;
                self.a.vperm2f128(ymm2, ymm4, ymm5, 0x31)?;
                self.a.vperm2f128(ymm3, ymm6, ymm7, 0x31)?;
                Some([0, 1, 2, 3])
            }
            _ => None,
        };
        // (The span test passed: no lane has faulted, see the module docs.)
        let every = self.mask.is_none();
        if let Some(m) = self.mask {
            self.mask_to(m, 4)?;
        }
        let base = self.base(t)?;
        for j in 0..s {
            let x = match outs {
                Some(o) => YMM[o[j as usize]],
                None => {
                    self.dword_vector(s, j, srcs)?;
                    ymm6
                }
            };
            let m = ymmword_ptr(base + rax * 4 + (32 * j) as i32);
            if every {
                self.a.vmovups(m, x)?;
            } else {
                // Each position's lane's activity.
                let idx = (0..8u32).fold(0u64, |b, p| b | u64::from((8 * j + p) / s) << (8 * p));
                let idx = self.const_slot((idx, CONST_STRIDE));
                self.a.vmovups(ymm5, ymmword_ptr(r15 + idx))?;
                self.a.vpermps(ymm5, ymm5, ymm4)?;
                self.a.vmaskmovps(m, ymm5, x)?;
            }
        }
        Ok(())
    }

    /// The span of 32-bit elements at a stride `s` of 9 to 16 at lane 0's index `rax` of
    /// table `t`, in bounds: with every lane of the control mask active (else a jump to
    /// `slow`), each lane's values `srcs` stored as its row (`rows.rs`).
    pub(super) fn dword_rows(&mut self, t: u32, s: u32, srcs: &[Loc], slow: CodeLabel) -> R<()> {
        if let Some(m) = self.mask {
            self.mask_to(m, 2)?;
            self.a.vmovmskps(r11d, ymm2)?;
            self.a.cmp(r11d, 0xff)?;
            self.a.jne(slow)?;
        }
        let base = self.base(t)?;
        self.rows_store(base, s, |v, k, to| {
            match srcs[k as usize] {
                Loc::Reg(r) => v.a.vmovaps(to, YMM[r])?,
                Loc::Slot(off) => v.a.vmovups(to, ymmword_ptr(r15 + off))?,
                Loc::Scalar(_) => return super::no("internal: a group value in a dword"),
            }
            Ok(())
        })
    }

    /// The `j`th vector of a span at stride `s` into `ymm6` (`ymm7`, `ymm3` temporaries):
    /// each value's elements there permuted into place and blended.
    fn dword_vector(&mut self, s: u32, j: u32, srcs: &[Loc]) -> R<()> {
        let mut first = true;
        for (k, src) in srcs.iter().enumerate() {
            let k = k as u32;
            let pos: Vec<u32> = (0..8u32).filter(|p| (8 * j + p) % s == k).collect();
            if pos.is_empty() {
                continue;
            }
            let idx = pos.iter().fold(0u64, |b, &p| b | u64::from((8 * j + p) / s) << (8 * p));
            let bits = pos.iter().fold(0i32, |b, &p| b | 1 << p);
            let idx = self.const_slot((idx, CONST_STRIDE));
            self.a.vmovups(ymm3, ymmword_ptr(r15 + idx))?;
            let d = if first { ymm6 } else { ymm7 };
            match *src {
                Loc::Reg(r) => self.a.vpermps(d, ymm3, YMM[r])?,
                Loc::Slot(off) => self.a.vpermps(d, ymm3, ymmword_ptr(r15 + off))?,
                Loc::Scalar(_) => return super::no("internal: a group value in a dword"),
            }
            if !first {
                self.a.vblendps(ymm6, ymm6, ymm7, bits)?;
            }
            first = false;
        }
        Ok(())
    }

    /// The span of `bits`-bit elements at lane 0's index `rax` of table `t`, in bounds:
    /// with every lane of the control mask active (else a jump to `slow`), the values `srcs` packed (they are
    /// canonical, in the type's range: nothing saturates), interleaved by one `vpshufb`
    /// within each half (lanes 0-3, lanes 4-7) and stored (`8 * s` bytes or `16 * s`).
    pub(super) fn narrow_group(
        &mut self,
        t: u32,
        s: u32,
        bits: u32,
        signed: bool,
        srcs: &[Loc],
        slow: CodeLabel,
    ) -> R<()> {
        if let Some(m) = self.mask {
            self.mask_to(m, 2)?;
            self.a.vmovmskps(r11d, ymm2)?;
            self.a.cmp(r11d, 0xff)?;
            self.a.jne(slow)?;
        }
        self.group_values(srcs)?;
        let pack_d = |a: &mut CodeAssembler, d, x, y| -> R<()> {
            if signed {
                a.vpackssdw(d, x, y)?;
            } else {
                a.vpackusdw(d, x, y)?;
            }
            Ok(())
        };
        pack_d(&mut self.a, ymm0, ymm4, ymm5)?;
        if bits == 8 {
            // (Stride 2 packs its words with themselves; stride 3 its third value twice.)
            let y = match s {
                2 => ymm0,
                _ => {
                    let last = if s == 4 { ymm7 } else { ymm6 };
                    pack_d(&mut self.a, ymm1, ymm6, last)?;
                    ymm1
                }
            };
            if signed {
                self.a.vpacksswb(ymm0, ymm0, y)?;
            } else {
                self.a.vpackuswb(ymm0, ymm0, y)?;
            }
        }
        let mask = self.const_slot((u64::from(s) | u64::from(bits) << 8, CONST_SHUFFLE));
        self.a.vpshufb(ymm0, ymm0, ymmword_ptr(r15 + mask))?;
        let base = self.base(t)?;
        let at = |o: i32| base + rax * (bits / 8) as i32 + o;
        match (bits, s) {
            (8, 2) => {
                self.a.vpermq(ymm0, ymm0, 0b00_00_10_00)?;
                self.a.vmovdqu(xmmword_ptr(at(0)), xmm0)?;
            }
            (8, 3) => {
                let idx = [0u64, 1, 2, 4, 5, 6, 0, 0];
                let idx = idx.iter().enumerate().fold(0u64, |b, (p, &i)| b | i << (8 * p));
                let idx = self.const_slot((idx, CONST_STRIDE));
                self.a.vmovups(ymm1, ymmword_ptr(r15 + idx))?;
                self.a.vpermd(ymm0, ymm1, ymm0)?;
                self.a.vmovdqu(xmmword_ptr(at(0)), xmm0)?;
                self.a.vextracti128(xmm1, ymm0, 1)?;
                self.a.vmovq(qword_ptr(at(16)), xmm1)?;
            }
            _ => self.a.vmovdqu(ymmword_ptr(at(0)), ymm0)?,
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Byte `4 * k + l` of a half (8-bit) is value k of lane l: the shuffle's output byte
    /// `q` is lane `q / s`'s value `q % s`.
    #[test]
    fn shuffles_interleave_each_lanes_values() {
        for (s, bits) in [(2u64, 8u64), (3, 8), (4, 8), (2, 16)] {
            let (lo, hi) = shuffle_bytes(s | bits << 8);
            let m: Vec<u64> =
                (0..16).map(|b| (if b < 8 { lo } else { hi }) >> (8 * (b % 8)) & 0xff).collect();
            let size = bits / 8;
            let out = (4 * s * size).min(16);
            for b in 0..16u64 {
                if b >= out {
                    assert_eq!(m[b as usize], 0x80);
                    continue;
                }
                let (q, r) = (b / size, b % size);
                let src = m[b as usize];
                let (elem, rr) = (src / size, src % size);
                assert_eq!(rr, r);
                assert_eq!((elem % 4, elem / 4), (q / s, q % s), "s {s} bits {bits} byte {b}");
            }
        }
    }
}
