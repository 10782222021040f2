//! Loads and stores of the vector code: unchecked at exactly `global_id(0)` (the driver
//! checks the span), else checked per lane and shaped by the index's [`Kind`]: one
//! broadcast element (uniform), a masked vector access (contiguous), a gather or per-lane
//! scalar stores in lane order (anything else). Private arrays: `private.rs`.

use iced_x86::code_asm::*;
use kiln_ir::{Expr, Imm, Scalar, Type, Var};

use super::{no, Kind, Stub, BASES, R, V, XMM, YMM};
use crate::x86::gen::{MemKind, Site};
use crate::x86::rt;

/// The largest value an `i32`/`u32` index can take in any lane, when its form bounds it
/// and it cannot be negative: a constant, `x & c` (`c` a constant, for `i32` a
/// nonnegative one), `u32` `x % c` (`c` a nonzero constant), `u32` `x >> c` (`c` a
/// constant, taken modulo 32 as the lanes shift), and casts from `u8`, `u16` and `bool`.
/// An access to a local array (its length fixed when the kernel is built) whose index is
/// bounded below the length needs no check: `histogram`'s `bins[data[i] & 255]`.
pub(super) fn index_max(e: &Expr) -> Option<u64> {
    use kiln_ir::{BinOp, ExprNode, Imm};
    let konst = |e: &Expr| match e.node() {
        ExprNode::Imm(Imm::Int(_, bits)) => Some(*bits as u32),
        _ => None,
    };
    let signed = match e.ty() {
        Type::Scalar(Scalar::I32) => true,
        Type::Scalar(Scalar::U32) => false,
        _ => return None,
    };
    let max = match e.node() {
        ExprNode::Imm(Imm::Int(_, bits)) => *bits as u32,
        ExprNode::Binary { op: BinOp::And, a, b } => {
            let bound = |x: &Expr| index_max(x).map(|m| m as u32);
            match (bound(a), bound(b)) {
                (Some(x), Some(y)) => x.min(y),
                (Some(x), None) | (None, Some(x)) => x,
                (None, None) => return None,
            }
        }
        ExprNode::Binary { op: BinOp::Rem, b, .. } if !signed => match konst(b) {
            Some(c) if c != 0 => c - 1,
            _ => return None,
        },
        ExprNode::Binary { op: BinOp::Shr, b, .. } if !signed => u32::MAX >> (konst(b)? & 31),
        ExprNode::Cast { a, .. } => match a.ty() {
            Type::Scalar(Scalar::U8) => 255,
            Type::Scalar(Scalar::U16) => 65535,
            Type::Scalar(Scalar::Bool) => 1,
            _ => return None,
        },
        _ => return None,
    };
    // (An `i32` at least 2^31 is negative.)
    (!signed || max < 0x8000_0000).then_some(u64::from(max))
}

impl V {
    /// Stores the low `size` bytes (4, 2 or 1) of `ymm0`'s lanes at the element indices in
    /// `ymm1`'s lanes from `base + off`, one lane after another for the lanes active in
    /// `ymm2`: where lanes collide, the last work-item wins, as in the interpreter.
    /// (With every lane active, the common case, the eight stores run untested, each
    /// lane's index and value taken from the registers: dword loads of a slot just written
    /// whole by a 32-byte store wait for that store to reach the cache instead of taking
    /// its value in flight, which cost a transpose's batch more than the extractions.)
    pub(super) fn store_lanes(&mut self, base: AsmRegister64, off: i32, size: u32) -> R<()> {
        self.a.vmovmskps(eax, ymm2)?;
        let (mut some, mut done) = (self.a.create_label(), self.a.create_label());
        self.a.cmp(eax, 0xff)?;
        self.a.jne(some)?;
        self.store_all_lanes(base, off, size)?;
        self.a.jmp(done)?;
        self.bind(&mut some)?;
        self.a.vmovups(ymmword_ptr(r15 + self.tmp_i), ymm1)?;
        self.a.vmovups(ymmword_ptr(r15 + self.tmp_v), ymm0)?;
        for lane in 0..8 {
            let mut skip = self.a.create_label();
            self.a.test(eax, 1 << lane)?;
            self.a.je(skip)?;
            self.a.movsxd(r10, dword_ptr(r15 + (self.tmp_i + 4 * lane)))?;
            self.a.mov(r11d, dword_ptr(r15 + (self.tmp_v + 4 * lane)))?;
            match size {
                4 => self.a.mov(dword_ptr(base + r10 * 4 + off), r11d)?,
                2 => self.a.mov(word_ptr(base + r10 * 2 + off), r11w)?,
                _ => self.a.mov(byte_ptr(base + r10 + off), r11b)?,
            }
            self.bind(&mut skip)?;
        }
        self.bind(&mut done)
    }

    /// [`V::store_lanes`] with every lane active: each lane's index and value straight
    /// from `ymm1` and `ymm0` (both clobbered), in lane order. Every active lane's index
    /// was checked (or is bounded by its form) to lie in `[0, len)`, `len` below 2^31, so
    /// its zero extension is its value.
    pub(super) fn store_all_lanes(&mut self, base: AsmRegister64, off: i32, size: u32) -> R<()> {
        for lane in 0..8u32 {
            let k = lane % 4;
            if lane == 4 {
                self.a.vextracti128(xmm1, ymm1, 1)?;
                self.a.vextracti128(xmm0, ymm0, 1)?;
            }
            if k == 0 {
                self.a.vmovd(r10d, xmm1)?;
            } else {
                self.a.vpextrd(r10d, xmm1, k)?;
            }
            match (size, k) {
                (4, 0) => self.a.vmovss(dword_ptr(base + r10 * 4 + off), xmm0)?,
                (4, _) => self.a.vextractps(dword_ptr(base + r10 * 4 + off), xmm0, k)?,
                (2, _) => self.a.vpextrw(word_ptr(base + r10 * 2 + off), xmm0, 2 * k)?,
                _ => self.a.vpextrb(byte_ptr(base + r10 + off), xmm0, 4 * k)?,
            }
        }
        Ok(())
    }

    /// The table index of buffer `buf`, whose elements must have type `ty`.
    pub(super) fn buf_of(&self, buf: &Var, ty: Type) -> R<u32> {
        match self.buf(buf) {
            Some(t) if buf.ty().elem().map(Type::Scalar) == Some(ty) => Ok(t),
            _ => no(format!("an access of `{}` ({})", buf.name(), buf.ty())),
        }
    }

    /// The position of table `t` among the tables with base registers.
    fn based_pos(&mut self, t: u32) -> usize {
        match self.based.iter().position(|&x| x == t) {
            Some(p) => p,
            None => {
                self.based.push(t);
                self.based.len() - 1
            }
        }
    }

    /// The base register of table `t` (checked accesses need one): its own, or for a table
    /// past the resident ones the last of [`BASES`], loaded here for this access.
    pub(super) fn base(&mut self, t: u32) -> R<AsmRegister64> {
        let pos = self.based_pos(t);
        if pos < self.resident_bases() {
            return Ok(BASES[pos]);
        }
        let r = BASES[BASES.len() - 1];
        self.a.mov(r, qword_ptr(r14 + (t as i32 * 16)))?;
        Ok(r)
    }

    /// The memory operand of buffer `t` at the batch's `global_id(0)` (unchecked: the
    /// driver checks the span).
    pub(super) fn element(&mut self, t: u32) -> R<AsmMemoryOperand> {
        Ok(ymmword_ptr(self.element_base(t)? + rbx * 4))
    }

    /// The base of buffer `t` for an unchecked access at the batch's `global_id(0)` (`rbx`):
    /// its base register, else `rax` loaded with it.
    pub(super) fn element_base(&mut self, t: u32) -> R<AsmRegister64> {
        if !self.accessed.contains(&t) {
            self.accessed.push(t);
        }
        let pos = self.based_pos(t);
        if pos < self.resident_bases() {
            return Ok(BASES[pos]);
        }
        self.a.mov(rax, qword_ptr(r14 + (t as i32 * 16)))?;
        Ok(rax)
    }

    /// The memory-table position of table `t` (for the fault site).
    pub(super) fn mem_of(&self, t: u32) -> u32 {
        self.mems.iter().position(|m| matches!(m.kind, MemKind::Table(x) if x == t)).unwrap_or(0)
            as u32
    }

    /// Records a fault site and the stub that reports lanes `f` (indices in `idx`, access
    /// mask `act`): a branch to it if any lane of `f` is set, or, given `back`, an
    /// unconditional jump that resumes at `back`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fault_stub(
        &mut self,
        idx: usize,
        f: usize,
        act: usize,
        code: u64,
        site: Site,
        signed: bool,
        back: Option<CodeLabel>,
    ) -> R<()> {
        if !self.may_fault {
            return no("internal: a checked access in code without an alive mask");
        }
        self.sites.push(site);
        let site = self.sites.len() as u64 - 1;
        let stub = self.a.create_label();
        match back {
            Some(back) => {
                self.a.jmp(stub)?;
                self.stubs.push((stub, Stub::Fault { idx, f, act, code, site, signed, back }));
            }
            None => {
                let mut back = self.a.create_label();
                self.a.vptest(YMM[f], YMM[f])?;
                self.a.jne(stub)?;
                self.bind(&mut back)?;
                self.stubs.push((stub, Stub::Fault { idx, f, act, code, site, signed, back }));
            }
        }
        Ok(())
    }

    /// False if every lane's `index` into table `t` is known to be in bounds here: the
    /// region's proof holds for the access (`proven.rs`), or every value `index` can take
    /// is below the length of a local array (see [`index_max`]) or the least length of a
    /// buffer that every launch of the code has (`V::known`).
    pub(super) fn needs_check(&self, index: &Expr, t: u32) -> bool {
        if self.proven_certain(index, t) || self.guarded(index as *const Expr as usize, t) {
            return false;
        }
        let m = self.mems.get(self.mem_of(t) as usize);
        let known = |p| self.known.iter().find(|k| k.0 == p).map(|k| k.1);
        let len = m.and_then(|m| m.local.map(|l| l.1).or_else(|| m.param.and_then(known)));
        !matches!((len, index_max(index)), (Some(count), Some(max)) if max < u64::from(count))
    }

    /// Checks the indices in `ymm{idx}` (the lanes of `index`) against table `t`'s length
    /// in the lanes of `ymm{act}` (using `ymm{f}`); faulting lanes are reported and leave
    /// `act`. No code where [`V::needs_check`] says every lane is in bounds.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn check(
        &mut self,
        index: &Expr,
        idx: usize,
        act: usize,
        f: usize,
        t: u32,
        what: &'static str,
        signed: bool,
    ) -> R<()> {
        if !self.needs_check(index, t) {
            return Ok(());
        }
        // index <u len  <=>  (index ^ sign) <=s ((len - 1) ^ sign), for 1 <= len < 2^31
        // (the driver runs the vector code only then).
        let sign = self.imm_slot(0x8000_0000);
        let lenx = self.const_slot((t as u64, 3));
        self.a.vpxor(YMM[f], YMM[idx], ymmword_ptr(r15 + sign))?;
        self.a.vpcmpgtd(YMM[f], YMM[f], ymmword_ptr(r15 + lenx))?;
        self.a.vpand(YMM[f], YMM[f], YMM[act])?;
        let site = Site::Access { what, mem: self.mem_of(t), signed };
        self.fault_stub(idx, f, act, rt::ERR_OOB, site, signed, None)
    }

    /// The index expression's signedness, if it is a 32-bit integer.
    pub(super) fn index_type(index: &Expr) -> R<bool> {
        match index.ty() {
            Type::Scalar(kiln_ir::Scalar::I32) => Ok(true),
            Type::Scalar(kiln_ir::Scalar::U32) => Ok(false),
            t => no(format!("an index of type {t}")),
        }
    }

    /// A checked load of `buf[index]` into `ymm{d}` (`ymm{d+1}`, `ymm{d+2}` temporaries).
    pub(super) fn load(&mut self, buf: &Var, index: &Expr, ty: Type, d: usize) -> R<()> {
        if self.blocked_bcast(buf, index, d)? {
            return Ok(());
        }
        let t = self.buf_of(buf, ty)?;
        let signed = Self::index_type(index)?;
        let kind = self.kind(index);
        // (Under a mask too: every lane's element is in bounds, and what inactive lanes
        // load is never read.)
        if kind == Kind::Contig {
            let width = self.known_lanes().map(|l| lanes_width(l, false));
            if let Some(k) = self.const_disp(index, t) {
                let bytes = match width {
                    Some(w @ (1 | 2 | 4)) => 4 * w,
                    _ => 32,
                };
                if self.fwd_load(t, k, bytes, d)? {
                    return Ok(());
                }
            }
            if let Some(m) = self.lane0_operand(index, t)? {
                // Under a mask known now, only the elements up to its last lane: a narrower
                // load that a store of those lanes just before forwards to (an 8-lane load
                // over two stores, or over a masked one, waits for them to reach the cache:
                // most of a tree reduction's last rounds).
                match width {
                    Some(1) => self.a.vmovss(XMM[d], dword_ptr(m))?,
                    Some(2) => self.a.vmovq(XMM[d], qword_ptr(m))?,
                    Some(4) => self.a.vmovups(XMM[d], xmmword_ptr(m))?,
                    _ => self.a.vmovups(YMM[d], ymmword_ptr(m))?,
                }
                return Ok(());
            }
        }
        // A constant index of a value forwarded in a register (`forward.rs`: a reduction's
        // `tile[0]` after its last round): that element broadcast from there.
        if let (Kind::Uniform, Some(Imm::Int(_, bits))) = (kind, index.as_imm()) {
            let k = *bits as u32;
            if u64::from(k) * 4 <= i32::MAX as u64
                && !self.needs_check(index, t)
                && self.fwd_load(t, k as i32 * 4, 4, d)?
            {
                self.a.vbroadcastss(YMM[d], XMM[d])?;
                return Ok(());
            }
        }
        // A constant index needing no check (a short loop's copy's `w[3u32]`, `short.rs`):
        // one broadcast from its address.
        if let (Kind::Uniform, Some(Imm::Int(_, bits))) = (kind, index.as_imm()) {
            let k = *bits as u32;
            if u64::from(k) * 4 <= i32::MAX as u64 && !self.needs_check(index, t) {
                let base = self.base(t)?;
                self.a.vbroadcastss(YMM[d], dword_ptr(base + k as i32 * 4))?;
                return Ok(());
            }
        }
        // A batch-uniform index of general-purpose-register arithmetic (a constant,
        // `group_id(0)`) straight into `eax`, with no lanes unless a check needs them.
        let in_eax = kind == Kind::Uniform && self.gpr_ok(index);
        let mut done = self.a.create_label();
        let fast = kind == Kind::Contig && self.mask.is_none();
        // A contiguous load that no proof covers at `u + g` with `u` scalar arithmetic
        // (`lane0.rs`): lane 0's index by scalar code and the span's one compare; the
        // lanes' indices only where the span is not in bounds, for the checked access.
        let lane0 = fast && !self.proof_covers(index, t) && self.lane0_scalar(index)?;
        if lane0 {
            let mut slow = self.lane0_span_test(t)?;
            let base = self.base(t)?;
            self.a.vmovups(YMM[d], ymmword_ptr(base + rax * 4))?;
            self.a.jmp(done)?;
            self.bind(&mut slow)?;
        }
        if in_eax {
            self.gpr(index)?;
        } else {
            self.expr(index, d)?;
        }
        // (Under a mask too, as above: with the span in bounds no lane faults, and what
        // inactive lanes load is never read.)
        let strided = match kind {
            Kind::Div if !in_eax && ty.scalar().is_some_and(|s| s.bits() == 32) => {
                self.stride_of(index)
            }
            _ => None,
        };
        if let Some(s) = strided {
            let mut slow = self.strided_load(t, s, d, done)?;
            self.bind(&mut slow)?;
        }
        if fast && !lane0 {
            let slow = self.span_test(index, t, d)?;
            let base = self.base(t)?;
            self.a.vmovups(YMM[d], ymmword_ptr(base + rax * 4))?;
            let Some(mut slow) = slow else { return Ok(()) };
            self.a.jmp(done)?;
            self.bind(&mut slow)?;
        }
        let uniform = kind == Kind::Uniform;
        // (Consecutive indices tested per batch: `clamped.rs`.)
        let clamped = kind == Kind::Div && strided.is_none() && self.clamped(index);
        if uniform {
            // One element for every lane: with its index (lane 0's, the lanes' one) below
            // the table's length, one scalar compare (an `i32` index below 0 is a `u32` one
            // above it), loaded whichever lanes are active (inactive ones never read it);
            // otherwise the lanes' check below, which reports the lowest active lane.
            let base = self.base(t)?;
            if !in_eax {
                self.a.vmovd(eax, XMM[d])?;
            }
            if !self.needs_check(index, t) {
                self.a.vbroadcastss(YMM[d], dword_ptr(base + rax * 4))?;
                return Ok(());
            }
            let mut slow = self.a.create_label();
            self.a.cmp(rax, qword_ptr(r14 + (t as i32 * 16 + 8)))?;
            self.a.jae(slow)?;
            self.a.vbroadcastss(YMM[d], dword_ptr(base + rax * 4))?;
            self.a.jmp(done)?;
            self.bind(&mut slow)?;
            if in_eax {
                // (The lanes' check reads the index in every lane.)
                self.a.vmovd(XMM[d], eax)?;
                self.a.vpbroadcastd(YMM[d], XMM[d])?;
            }
        }
        self.active(d + 1)?;
        self.check(index, d, d + 1, d + 2, t, "load", signed)?;
        let base = self.base(t)?;
        let (x, m, g) = (YMM[d], YMM[d + 1], YMM[d + 2]);
        match kind {
            Kind::Uniform => {
                // One element for all lanes (in bounds if any lane is active).
                let mut skip = self.a.create_label();
                self.a.vpxor(g, g, g)?;
                self.a.vmovmskps(eax, m)?;
                self.a.test(eax, eax)?;
                self.a.je(skip)?;
                self.a.vmovd(eax, XMM[d])?;
                self.a.movsxd(rax, eax)?;
                self.a.vbroadcastss(g, dword_ptr(base + rax * 4))?;
                self.bind(&mut skip)?;
                self.a.vmovaps(x, g)?;
            }
            Kind::Gid0 | Kind::Contig => {
                self.a.vmovd(eax, XMM[d])?;
                self.a.movsxd(rax, eax)?;
                self.a.vmaskmovps(x, m, ymmword_ptr(base + rax * 4))?;
            }
            Kind::Div => {
                if clamped {
                    self.consecutive_load(base, d, done)?;
                }
                self.a.vpxor(g, g, g)?;
                self.a.vgatherdps_3(g, ymmword_ptr(base + x * 4), m)?;
                self.a.vmovaps(x, g)?;
            }
        }
        if fast || uniform || strided.is_some() || clamped {
            // (`fast` covers `lane0`'s jump.)
            self.bind(&mut done)?;
        }
        Ok(())
    }

    /// Before a whole-batch access at the contiguous `index` in `ymm{idx}` (lane 0's index
    /// into `rax`): `None` where the batch's span is certainly in bounds, else the label to
    /// jump to where it is not (a proof's flag, or [`V::whole_batch_in_bounds`]'s compare).
    pub(super) fn span_test(&mut self, index: &Expr, t: u32, idx: usize) -> R<Option<CodeLabel>> {
        Ok(match self.proven_test(index, t, idx)? {
            Some(slow) => slow,
            None => Some(self.whole_batch_in_bounds(idx, t)?),
        })
    }

    /// For a contiguous access under no control mask (indices in `ymm{idx}`, lane k's
    /// lane 0's + k): with every lane of the batch alive and lane 0's index (in `rax`,
    /// zero-extended) at most the length of table `t` minus 8, every lane's index is in
    /// bounds and the access is a plain vector one; otherwise a jump to the returned label,
    /// where the checked, masked access follows. (Lengths are below 2^31, so an index
    /// passing the test does not wrap in the lanes, and a negative `i32` one, as a u32 at
    /// least 2^31, never passes.) No test of the alive lanes: a fault sets every table's
    /// length minus 8 to -1 for the rest of the call (see [`V::stubs`]), which a fault
    /// ends at its batch's end, so after one this test always fails.
    fn whole_batch_in_bounds(&mut self, idx: usize, t: u32) -> R<CodeLabel> {
        self.a.vmovd(eax, XMM[idx])?;
        self.lane0_span_test(t)
    }

    /// [`V::whole_batch_in_bounds`]'s test with lane 0's index already in `rax`
    /// (zero-extended).
    fn lane0_span_test(&mut self, t: u32) -> R<CodeLabel> {
        let slow = self.a.create_label();
        let last8 = self.const_slot((t as u64, 5));
        self.a.cmp(rax, qword_ptr(r15 + last8))?;
        self.a.jg(slow)?;
        Ok(slow)
    }

    /// `buf[index] = value` in the active lanes.
    pub(super) fn store(&mut self, buf: &Var, index: &Expr, value: &Expr) -> R<()> {
        if self.private(buf).is_some()
            || super::narrow::narrow(value.ty()).is_some()
            || super::wide64::is_64(value.ty())
            || self.blocking.is_some()
        {
            // (Stores of other widths keep no forwarded value: see `forward.rs`.)
            self.fwd_clear();
        }
        if let Some(off) = self.blocked_slot(buf, index, true) {
            // One iteration of a blocked loop's chunk: written after the chunk.
            self.expr_top(value, 0)?;
            self.a.vmovups(ymmword_ptr(r15 + off), ymm0)?;
            return Ok(());
        }
        if let Some(p) = self.private(buf) {
            return self.store_private(&p, index, value);
        }
        if super::narrow::narrow(value.ty()).is_some() {
            return self.narrow_store(buf, index, value);
        }
        if super::wide64::is_64(value.ty()) {
            return self.store64(buf, index, value);
        }
        let t = self.buf_of(buf, value.ty())?;
        if self.kind(index) == Kind::Gid0 {
            self.fwd_clear();
            return self.store_gid0(t, value);
        }
        let signed = Self::index_type(index)?;
        let kind = self.kind(index);
        let indexed = self.store_operands(index, value, 1)?;
        if kind == Kind::Contig && !indexed {
            let disp = self.const_disp(index, t);
            if let Some(m) = self.lane0_operand(index, t)? {
                // Under a mask known now whose lanes are the first 1, 2 or 4 and all alive:
                // a plain store of those lanes, which later loads of them are forwarded
                // from (never from a masked store).
                let alive = !self.may_fault || self.fresh();
                let narrow = self.known_lanes().filter(|_| alive).map(|l| lanes_width(l, true));
                let bytes = match (self.mask, narrow) {
                    (None, _) => {
                        self.a.vmovups(ymmword_ptr(m), ymm0)?;
                        Some(32)
                    }
                    (Some(_), Some(1)) => {
                        self.a.vmovss(dword_ptr(m), xmm0)?;
                        Some(4)
                    }
                    (Some(_), Some(2)) => {
                        self.a.vmovq(qword_ptr(m), xmm0)?;
                        Some(8)
                    }
                    (Some(_), Some(4)) => {
                        self.a.vmovups(xmmword_ptr(m), xmm0)?;
                        Some(16)
                    }
                    (Some(_), _) => {
                        self.active(2)?;
                        self.a.vmaskmovps(ymmword_ptr(m), ymm2, ymm0)?;
                        None
                    }
                };
                // (At a constant displacement the value stays forwarded; a masked store
                // forgets what it overlaps, one from `rax` everything of its table.)
                match (disp, bytes) {
                    (Some(k), Some(b)) => self.fwd_stored(t, k, b, true)?,
                    (Some(k), None) => self.fwd_stored(t, k, 32, false)?,
                    (None, _) => self.fwd_clear(),
                }
                return Ok(());
            }
        }
        // (Any other store to a table: nothing of it stays forwarded.)
        self.fwd_clear_table(t);
        // (As in `load`: a uniform index of general-purpose-register arithmetic in `eax`.)
        let in_eax = kind == Kind::Uniform && !indexed && self.gpr_ok(index);
        if in_eax {
            self.gpr(index)?;
        } else if !indexed {
            self.expr_top(index, 1)?;
        }
        let mut done = self.a.create_label();
        // (Under a mask too: the stores are masked to the active lanes' elements.)
        let strided = if kind == Kind::Div { self.stride_of(index) } else { None };
        if let Some(s) = strided {
            let mut slow = self.strided_store(t, s, done)?;
            self.bind(&mut slow)?;
        }
        let fast = kind == Kind::Contig && self.mask.is_none();
        if fast {
            let slow = self.span_test(index, t, 1)?;
            let base = self.base(t)?;
            self.a.vmovups(ymmword_ptr(base + rax * 4), ymm0)?;
            let Some(mut slow) = slow else { return Ok(()) };
            self.a.jmp(done)?;
            self.bind(&mut slow)?;
        }
        let uniform = kind == Kind::Uniform;
        if uniform {
            // One element for every lane: with its index (lane 0's) below the table's
            // length, one scalar compare, the last active lane's value stored there (lane
            // 0's for a uniform value with every lane active); otherwise the lanes' check
            // below, which reports the lowest active lane.
            let base = self.base(t)?;
            let mut slow = self.a.create_label();
            if !in_eax {
                self.a.vmovd(eax, xmm1)?;
            }
            if self.needs_check(index, t) {
                self.a.cmp(rax, qword_ptr(r14 + (t as i32 * 16 + 8)))?;
                self.a.jae(slow)?;
            }
            let alive = !self.may_fault || self.fresh();
            let every = self.mask.is_none() && alive;
            // Under a mask known now, with every lane alive, the last active lane is the
            // mask's last (a reduction's `if lid == 0 { out[group_id(0)] = tile[0]; }`).
            let last = self.known_lanes().filter(|_| alive).map(|l| 7 - l.leading_zeros());
            if every && self.kind(value) == Kind::Uniform {
                self.a.vmovd(r11d, xmm0)?;
            } else if let Some(k) = last {
                match k {
                    0 => self.a.vmovd(r11d, xmm0)?,
                    1..=3 => self.a.vpextrd(r11d, xmm0, k)?,
                    _ => {
                        self.a.vextracti128(xmm2, ymm0, 1)?;
                        self.a.vpextrd(r11d, xmm2, k - 4)?;
                    }
                }
            } else {
                self.active(2)?;
                self.a.vmovups(ymmword_ptr(r15 + self.tmp_v), ymm0)?;
                self.a.vmovmskps(r10d, ymm2)?;
                self.a.test(r10d, r10d)?;
                self.a.je(done)?;
                self.a.bsr(r10d, r10d)?;
                self.a.mov(r11d, dword_ptr(r15 + r10 * 4 + self.tmp_v))?;
            }
            self.a.mov(dword_ptr(base + rax * 4), r11d)?;
            self.a.jmp(done)?;
            self.bind(&mut slow)?;
            if in_eax {
                // (The lanes' check reads the index in every lane.)
                self.a.vmovd(xmm1, eax)?;
                self.a.vpbroadcastd(ymm1, xmm1)?;
            }
        }
        self.active(2)?;
        self.check(index, 1, 2, 3, t, "store", signed)?;
        let base = self.base(t)?;
        if kind == Kind::Contig {
            self.a.vmovd(eax, xmm1)?;
            self.a.movsxd(rax, eax)?;
            self.a.vmaskmovps(ymmword_ptr(base + rax * 4), ymm2, ymm0)?;
            if fast {
                self.bind(&mut done)?;
            }
            return Ok(());
        }
        if uniform {
            self.store_last_lane(base)?;
            return self.bind(&mut done);
        }
        self.store_lanes(base, 0, 4)?;
        if strided.is_some() {
            self.bind(&mut done)?;
        }
        Ok(())
    }

    /// A store at a batch-uniform index (`ymm1`) of `ymm0`'s lanes active in `ymm2`: every
    /// lane writes the same element, so what stays is the last active lane's value, as the
    /// interpreter's last work-item wins; one store of that lane's value at its index.
    fn store_last_lane(&mut self, base: AsmRegister64) -> R<()> {
        let mut skip = self.a.create_label();
        let a = &mut self.a;
        a.vmovups(ymmword_ptr(r15 + self.tmp_i), ymm1)?;
        a.vmovups(ymmword_ptr(r15 + self.tmp_v), ymm0)?;
        a.vmovmskps(eax, ymm2)?;
        a.test(eax, eax)?;
        a.je(skip)?;
        a.bsr(eax, eax)?;
        a.movsxd(r10, dword_ptr(r15 + rax * 4 + self.tmp_i))?;
        a.mov(r11d, dword_ptr(r15 + rax * 4 + self.tmp_v))?;
        a.mov(dword_ptr(base + r10 * 4), r11d)?;
        self.bind(&mut skip)
    }

    /// A store at exactly `global_id(0)`: unchecked (the driver checks the span), masked
    /// when not every lane is active.
    fn store_gid0(&mut self, t: u32, value: &Expr) -> R<()> {
        let r = match self.src_if_reg(value) {
            Some(r) => r,
            None => {
                self.expr_top(value, 0)?;
                0
            }
        };
        let m = self.element(t)?;
        // (Where every lane is certainly alive, the active mask would be all ones.)
        if self.mask.is_none() && (!self.may_fault || self.fresh()) {
            self.a.vmovups(m, YMM[r])?;
        } else {
            let k = if r == 1 { 2 } else { 1 };
            self.active(k)?;
            self.a.vmaskmovps(m, YMM[k], YMM[r])?;
        }
        Ok(())
    }

    /// The register `e` already lives in, if it is a `let` in a register or `global_id(0)`.
    pub(super) fn src_if_reg(&self, e: &Expr) -> Option<usize> {
        match e.node() {
            kiln_ir::ExprNode::Var(v) => match self.find(v.name()) {
                Some(b) => match b.loc {
                    super::Loc::Reg(r) => Some(r),
                    super::Loc::Slot(_) | super::Loc::Scalar(_) => None,
                },
                None => None,
            },
            kiln_ir::ExprNode::Builtin { kind: kiln_ir::Builtin::GlobalId, dim: 0 } => {
                Some(super::GID)
            }
            _ => None,
        }
    }

    /// Computes a store's value into `ymm0` (`ymm0`, `ymm1` where `wide` is 2: an f64)
    /// and, where the index and the value can both fault, its index into `ymm{wide}`
    /// first, as the interpreter evaluates a store's index before its value (its bounds
    /// check comes after both). True if the index is computed; else the caller computes it
    /// after the value, as before (with only one of them able to fault, the order cannot
    /// show: most stores).
    pub(super) fn store_operands(&mut self, index: &Expr, value: &Expr, wide: usize) -> R<bool> {
        let ordered = self.in_order(index, value);
        if ordered {
            self.expr_top(index, 0)?;
        }
        let at = usize::from(ordered);
        if wide == 2 {
            self.expr64_top(value, at)?;
        } else {
            self.expr_top(value, at)?;
        }
        if ordered {
            // The index to the register after the value's: the registers rotated down by one.
            self.a.vmovaps(YMM[wide + 1], ymm0)?;
            for r in 0..=wide {
                self.a.vmovaps(YMM[r], YMM[r + 1])?;
            }
        }
        Ok(ordered)
    }
}

/// The elements (1, 2, 4 or 8) a contiguous access of 32-bit lanes touches for the lanes
/// `lanes` (bit k: lane k): for a load (`exact` false), those up to the last lane (what the
/// others load is never read); for a store (`exact`), 8 unless the lanes are exactly the
/// first 1, 2 or 4 (a store must not write the others).
fn lanes_width(lanes: u8, exact: bool) -> u32 {
    let upto = 8 - lanes.leading_zeros();
    let width = match upto {
        0 | 1 => 1,
        2 => 2,
        3 | 4 => 4,
        _ => 8,
    };
    if exact && u32::from(lanes) != (1u32 << width) - 1 {
        8
    } else {
        width
    }
}
