//! Groups of interleaved loads: `s` consecutive loads (`s` 2 to 16) of 32-bit elements of
//! one buffer at `b + o .. b + o + s` (in any order), `b` of stride `s`, each bound by a
//! `let` or stored to a private array's element at a constant index: the element loads a
//! `vload4(p, 4 * i)` splits into (`vectors.rs`), `let re = x[2 * i]; let im = x[2 * i +
//! 1];`, a point's six coordinates, a 4x4 matrix copied into a private array by a short
//! loop (`m[e] = a[16 * i + e]`, the loop's copies: `short.rs`). Each alone is a strided
//! load (`strided.rs`: a span test and `s` permuted loads, or a gather past stride 8);
//! together they read the span of `8 * s` elements from lane 0's `b + o` under one test:
//! at strides 2 and 4 `s` vector loads and one transpose (unpacks within halves, swaps of
//! halves) into the members' places, at 3 and 5 to 8 per member the span's vectors
//! permuted (one index vector) and blended, at 9 to 16 row chunks and 8x8 transposes
//! (`rows.rs`), never reading past the span. Otherwise (the span not in bounds, after a
//! fault) each member's statement as before (a short loop's copies as they run), so faults
//! are the interpreter's. The indices must be unable to fault: the first member's index is
//! computed for the test before any load. Private elements are frame memory no global load
//! can reach, so writing them after all the group's loads shows nowhere.

use iced_x86::code_asm::*;
use kiln_ir::{Expr, ExprNode, Stmt, StmtNode, Type};

use super::storegroup::split_offset;
use super::strided::CONST_STRIDE;
use super::{Bound, Kind, Loc, R, V, YMM};

/// Where a group's member puts its value: a `let` it binds, or a private array's element
/// at a constant index in bounds (`m[5u32] = a[16 * i + 5]`, a short loop's copy), at that
/// frame offset.
#[derive(Clone, Copy)]
enum Target<'a> {
    Let(&'a kiln_ir::Var),
    Private(i32),
}

/// A group's member: its target, index, offset from the base and value (the load).
type Member<'a> = (Target<'a>, &'a Expr, u32, &'a Expr);

/// The code of a group's path for a span not in bounds, given the number of statements the
/// group takes: a short loop's copies as they run one by one (`short.rs`).
pub(super) type SlowCode<'c> = &'c mut dyn FnMut(&mut V, usize) -> R<()>;

impl V {
    /// If `stmts` starts with a group of interleaved loads (see the module docs), its code
    /// (its `let`s then in scope) and the number of statements it takes; `None` (no code)
    /// otherwise.
    pub(super) fn load_group(&mut self, stmts: &[Stmt]) -> R<Option<usize>> {
        self.load_group_then(stmts, None)
    }

    /// [`V::load_group`], where `slow` (if given) is the code for a span not in bounds
    /// (else each member's statement as before); with `slow` only groups of private
    /// elements (no `let`s: a copy's bindings end with it).
    pub(super) fn load_group_then(
        &mut self,
        stmts: &[Stmt],
        slow_code: Option<SlowCode>,
    ) -> R<Option<usize>> {
        let Some((s, buf, lets)) = self.load_group_of(stmts) else { return Ok(None) };
        let privates = lets.iter().filter(|l| matches!(l.0, Target::Private(_))).count();
        if slow_code.is_some() && privates < lets.len() {
            return Ok(None);
        }
        let t = self.buf_of(buf, lets[0].3.ty())?;
        let first = lets.iter().min_by_key(|l| l.2).expect("a member").1;
        if privates > 0 {
            // (As a private store does: see `forward.rs`.)
            self.fwd_clear();
        }
        // The members' places, in statement order: `let` registers while free, else slots;
        // a private element's row itself, or under a control mask a slot blended into the
        // row once the group has loaded (inactive lanes keep their elements).
        let mut places = Vec::with_capacity(lets.len());
        for l in &lets {
            places.push(match l.0 {
                Target::Private(at) if self.mask.is_none() => Loc::Slot(at),
                Target::Let(_) if self.let_reg_free(self.next_reg) => {
                    self.next_reg += 1;
                    Loc::Reg(self.next_reg - 1)
                }
                _ => Loc::Slot(self.slot()),
            });
        }
        let put = |v: &mut V, place: Loc, from: AsmRegisterYmm| -> R<()> {
            match place {
                Loc::Reg(r) => v.a.vmovaps(YMM[r], from)?,
                Loc::Slot(off) => v.a.vmovups(ymmword_ptr(r15 + off), from)?,
                Loc::Scalar(_) => return super::no("internal: a loaded `let` in a dword"),
            }
            Ok(())
        };
        let mut done = self.a.create_label();
        self.expr_top(first, 1)?;
        let mut slow = self.span_in_bounds(t, 8 * s, 1)?;
        let base = self.base(t)?;
        let o = lets.iter().map(|l| l.2).min().expect("a member");
        if s > 8 {
            self.rows_load(base, s, |v, k, from| {
                for (l, &place) in lets.iter().zip(&places) {
                    if l.2 - o == k {
                        put(v, place, from)?;
                    }
                }
                Ok(())
            })?;
        } else if matches!(s, 2 | 4) {
            self.transposed(base, s, &lets, &places, put)?;
        } else {
            // Value `k`: the span's vectors permuted to the lanes they hold it for, blended.
            for k in 0..s {
                self.offset_lanes(base, s, k)?;
                for (l, &place) in lets.iter().zip(&places) {
                    if l.2 - o == k {
                        put(self, place, ymm0)?;
                    }
                }
            }
        }
        if let Some(m) = self.mask {
            for (l, place) in lets.iter().zip(&places) {
                if let (Target::Private(at), Loc::Slot(off)) = (l.0, *place) {
                    self.mask_to(m, 2)?;
                    self.a.vmovups(ymm1, ymmword_ptr(r15 + at))?;
                    self.a.vblendvps(ymm0, ymm1, ymmword_ptr(r15 + off), ymm2)?;
                    self.a.vmovups(ymmword_ptr(r15 + at), ymm0)?;
                }
            }
        }
        self.a.jmp(done)?;
        self.bind(&mut slow)?;
        match slow_code {
            Some(code) => code(self, lets.len())?,
            None => {
                for ((l, &place), st) in lets.iter().zip(&places).zip(stmts) {
                    match l.0 {
                        Target::Let(_) => {
                            self.expr_top(l.3, 0)?;
                            put(self, place, ymm0)?;
                        }
                        Target::Private(_) => self.stmt(st)?,
                    }
                }
            }
        }
        self.bind(&mut done)?;
        for (l, place) in lets.iter().zip(places) {
            if let Target::Let(var) = l.0 {
                self.lets.push(Bound::new(var.name().to_string(), place, Kind::Div));
            }
        }
        Ok(Some(lets.len()))
    }

    /// Strides 2 and 4: the span's `s` vectors loaded and transposed (unpacks within
    /// halves, swaps of halves), each value put in its `let`'s place.
    fn transposed(
        &mut self,
        base: AsmRegister64,
        s: u32,
        lets: &[Member],
        places: &[Loc],
        put: impl Fn(&mut V, Loc, AsmRegisterYmm) -> R<()>,
    ) -> R<()> {
        let o = lets.iter().map(|l| l.2).min().expect("a member");
        for (j, &y) in YMM.iter().take(s as usize).enumerate() {
            self.a.vmovups(y, ymmword_ptr(base + rax * 4 + (32 * j) as i32))?;
        }
        // Value `k` (offset `o + k`) into `ymm{outs[k]}`.
        let outs: [usize; 4] = if s == 2 {
            self.a.vperm2f128(ymm2, ymm0, ymm1, 0x20)?;
            self.a.vperm2f128(ymm3, ymm0, ymm1, 0x31)?;
            self.a.vshufps(ymm0, ymm2, ymm3, 0b10_00_10_00)?;
            self.a.vshufps(ymm1, ymm2, ymm3, 0b11_01_11_01)?;
            [0, 1, 0, 0]
        } else {
            self.a.vperm2f128(ymm4, ymm0, ymm2, 0x20)?;
            self.a.vperm2f128(ymm5, ymm0, ymm2, 0x31)?;
            self.a.vperm2f128(ymm6, ymm1, ymm3, 0x20)?;
            self.a.vperm2f128(ymm7, ymm1, ymm3, 0x31)?;
            self.a.vunpcklps(ymm0, ymm4, ymm5)?;
            self.a.vunpcklps(ymm1, ymm6, ymm7)?;
            self.a.vunpckhps(ymm2, ymm4, ymm5)?;
            self.a.vunpckhps(ymm3, ymm6, ymm7)?;
            self.a.vunpcklpd(ymm4, ymm0, ymm1)?;
            self.a.vunpckhpd(ymm5, ymm0, ymm1)?;
            self.a.vunpcklpd(ymm6, ymm2, ymm3)?;
            self.a.vunpckhpd(ymm7, ymm2, ymm3)?;
            [4, 5, 6, 7]
        };
        for (l, &place) in lets.iter().zip(places) {
            put(self, place, YMM[outs[(l.2 - o) as usize]])?;
        }
        Ok(())
    }

    /// Into `ymm0` (`ymm1`, `ymm2` temporaries), the lanes' elements at offset `k` of the
    /// span of stride `s` at `base + rax * 4`: lane `l`'s element `s * l + k` lies in the
    /// span's vector `(s * l + k) / 8` at position `(s * l + k) % 8`, and `vpermps` reads
    /// only an index's low three bits, so one index vector serves every vector of the span.
    /// Only the span's own vectors are read (never past its end, unlike a strided load
    /// from `b + o + k`).
    fn offset_lanes(&mut self, base: AsmRegister64, s: u32, k: u32) -> R<()> {
        let at = |l: u32| s * l + k;
        let idx = (0..8u32).fold(0u64, |b, l| b | u64::from(at(l) % 8) << (8 * l));
        let idx = self.const_slot((idx, CONST_STRIDE));
        self.a.vmovups(ymm1, ymmword_ptr(r15 + idx))?;
        let (first, last) = (at(0) / 8, at(7) / 8);
        for j in first..=last {
            let m = ymmword_ptr(base + rax * 4 + (32 * j) as i32);
            if j == first {
                self.a.vpermps(ymm0, ymm1, m)?;
            } else {
                let lanes = (0..8u32).filter(|&l| at(l) / 8 == j).fold(0, |b, l| b | 1 << l);
                self.a.vpermps(ymm2, ymm1, m)?;
                self.a.vblendps(ymm0, ymm0, ymm2, lanes)?;
            }
        }
        Ok(())
    }

    /// The stride, buffer and members (target, index, offset, value) of the group `stmts`
    /// starts with, if it does.
    fn load_group_of<'a>(
        &self,
        stmts: &'a [Stmt],
    ) -> Option<(u32, &'a kiln_ir::Var, Vec<Member<'a>>)> {
        let load = |st: &'a Stmt| {
            let (target, value) = match st.node() {
                StmtNode::Let { var, value } => (Target::Let(var), value),
                StmtNode::Store { buf, index, value } => {
                    let p = self.private(buf)?;
                    if Type::Scalar(p.elem) != value.ty() {
                        return None;
                    }
                    (Target::Private(super::private::fixed(&p, index)?), value)
                }
                _ => return None,
            };
            match value.node() {
                ExprNode::Load { buf, index } => Some((target, buf, index, value)),
                _ => None,
            }
        };
        let (_, buf, index, _) = load(stmts.first()?)?;
        if self.blocking.is_some() || self.private(buf).is_some() || self.buf(buf).is_none() {
            return None;
        }
        let ty = buf.ty().elem().map(Type::Scalar)?;
        if !super::lane_type(ty) {
            return None;
        }
        let (base, _) = split_offset(index);
        if self.kind(base) != Kind::Div {
            return None;
        }
        let s = self.any_stride(base)?;
        if stmts.len() < s as usize || !super::packed::pure(index) {
            return None;
        }
        let mut lets = Vec::with_capacity(s as usize);
        for st in &stmts[..s as usize] {
            let (target, b, index, value) = load(st)?;
            let (bs, offset) = split_offset(index);
            let hoisted = self.hoisted.iter().any(|h| h.0 == st.addr());
            if b != buf
                || bs != base
                || value.ty() != ty
                || hoisted
                || self.kind(index) != Kind::Div
            {
                return None;
            }
            lets.push((target, index, offset, value));
        }
        // The offsets are `o .. o + s` (as u32 values, no wrap), each once; the base names
        // none of the group's `let`s (the first index is computed before any is bound); no
        // two members write one private element (the group writes them in another order).
        let o = lets.iter().map(|l| l.2).min()?;
        let mut seen = 0u32;
        for (n, l) in lets.iter().enumerate() {
            let d = l.2.checked_sub(o)?;
            if d >= s || seen >> d & 1 != 0 {
                return None;
            }
            match l.0 {
                Target::Let(var) if names(base, var.name()) => return None,
                Target::Private(at)
                    if lets[..n].iter().any(|m| matches!(m.0, Target::Private(a) if a == at)) =>
                {
                    return None
                }
                _ => {}
            }
            seen |= 1 << d;
        }
        o.checked_add(s)?;
        Some((s, buf, lets))
    }
}

/// True if `e` reads a variable named `name`.
fn names(e: &Expr, name: &str) -> bool {
    match e.node() {
        ExprNode::Var(v) => v.name() == name,
        _ => e.children().into_iter().any(|c| names(c, name)),
    }
}
