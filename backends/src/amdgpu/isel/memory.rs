//! Kernel arguments, loads and stores of every element width (global, constant, generic,
//! local), private arrays, and `for` loops over 64-bit counters.
//!
//! Generic pointers can only be kernel parameters here; their accesses are `flat_*`
//! instructions on a full 64-bit address (the simulator resolves it to a buffer). Private
//! arrays of at most [`MAX_PRIVATE`] elements are promoted to registers, one VGPR (pair)
//! per element, with dynamic indices lowered to compare-and-select chains, as LLVM promotes
//! small allocas; larger ones live in scratch memory (each lane's private segment, `s7` its
//! offset), accessed with `scratch_*` instructions on a per-lane address.

use kiln_ir::{AddrSpace, BinOp, Expr, Kernel, Scalar, Stmt, Var};

use super::{is_wide, unsupported, Isel, Val};
use crate::amdgpu::mir::{LoopRange, Opnd, PReg, RegClass, SCRATCH_OFFSET_SGPR};
use crate::amdgpu::Error;

/// The largest private array kept in registers (larger ones go to scratch memory).
pub const MAX_PRIVATE: u32 = 4;

impl Isel<'_> {
    pub(super) fn entry(&mut self, k: &Kernel) -> Result<(), Error> {
        let mut off = 0u32;
        let mut copies = Vec::new();
        for p in k.params() {
            let (size, c) = if let Some(space) = p.ty().addr_space() {
                if !matches!(space, AddrSpace::Global | AddrSpace::Constant | AddrSpace::Generic) {
                    return unsupported(format!("parameter `{}` in {space:?} memory", p.name()));
                }
                (8, RegClass::S2)
            } else {
                let s = p.ty().scalar().unwrap_or(Scalar::I32);
                if is_wide(s) {
                    (8, RegClass::S2)
                } else {
                    (4, RegClass::S)
                }
            };
            off = off.next_multiple_of(size);
            self.f.param_offsets.push(off);
            let r = self.vreg(c);
            let op = if c == RegClass::S2 { "s_load_dwordx2" } else { "s_load_dword" };
            self.emit(op, vec![r.clone()], vec![Self::kernarg(), Opnd::Imm(off)]);
            if p.ty().is_ptr() {
                self.params.insert(p.clone(), (r, 0));
            } else if p.ty().scalar() == Some(Scalar::F64) {
                copies.push((p.clone(), r));
            } else {
                self.env.insert(p.clone(), Val { o: r, s: true });
            }
            off += size;
        }
        if off as u64 + 56 > crate::amdgpu::MAX_KERNARG_BYTES as u64 {
            let m = crate::limits::exceeded(
                "kernel argument bytes",
                off as u64 + 56,
                crate::amdgpu::MAX_KERNARG_BYTES as u64,
                "gfx9's s_load offset",
            );
            return Err(Error::Limit(m));
        }
        self.f.hidden_offset = off.next_multiple_of(8);
        self.f.kernarg_bytes = self.f.hidden_offset + 48;
        self.emit("s_mov_b32", vec![Opnd::M0], vec![Opnd::Imm(u32::MAX)]);
        self.emit("s_waitcnt", vec![], vec![Opnd::Text("lgkmcnt(0)")]);
        for (p, r) in copies {
            let d = self.v2();
            self.copy64(&d, &r);
            self.env.insert(p, Val { o: d, s: false });
        }
        Ok(())
    }

    /// Byte offset `index * size` (plus `base`), in SGPRs if `s`.
    pub(super) fn offset(
        &mut self,
        index: &Expr,
        size: u32,
        base: u32,
        s: bool,
    ) -> Result<Opnd, Error> {
        let mut i = self.expr(index)?;
        if index.ty().scalar().is_some_and(is_wide) {
            i = Val { o: super::lo(&i.o), s: i.s };
        }
        let o = if size == 1 {
            self.to(i, s)
        } else {
            let sh = Val { o: Opnd::Imm(size.trailing_zeros()), s: true };
            self.shift(s, "s_lshl_b32", "v_lshlrev_b32", i, sh)?
        };
        if base == 0 {
            return Ok(o.o);
        }
        let b = Val { o: Opnd::Imm(base), s: true };
        Ok(self.bin(s, "s_add_i32", "v_add_u32", b, o)?.o)
    }

    fn elem(buf: &Var) -> Scalar {
        buf.ty().elem().unwrap_or(Scalar::I32)
    }

    pub(super) fn load(&mut self, buf: &Var, index: &Expr, s: bool) -> Result<Val, Error> {
        let elem = Self::elem(buf);
        let size = elem.size_bytes() as u32;
        if self.privs.contains_key(buf) {
            return self.private_load(buf, index, s);
        }
        if let Some(&base) = self.scratch.get(buf) {
            let a = self.scratch_address(index, size, base)?;
            let op = match elem {
                Scalar::I8 => "scratch_load_sbyte",
                Scalar::U8 => "scratch_load_ubyte",
                Scalar::I16 => "scratch_load_sshort",
                Scalar::U16 | Scalar::F16 => "scratch_load_ushort",
                t if is_wide(t) => "scratch_load_dwordx2",
                _ => "scratch_load_dword",
            };
            let d = if is_wide(elem) { self.v2() } else { self.v() };
            self.emit(op, vec![d.clone()], vec![a, Opnd::Text("off")]);
            self.emit("s_waitcnt", vec![], vec![Opnd::Text("vmcnt(0)")]);
            let r = Val { o: d, s: false };
            return Ok(if is_wide(elem) { r } else { self.to(r, s) });
        }
        let space = buf.ty().addr_space();
        let uniform_index = !self.div.expr_divergent_in(index, &self.cur);
        let (lop, gop) = match elem {
            Scalar::I8 => ("ds_read_i8", "global_load_sbyte"),
            Scalar::U8 => ("ds_read_u8", "global_load_ubyte"),
            Scalar::I16 => ("ds_read_i16", "global_load_sshort"),
            Scalar::U16 | Scalar::F16 => ("ds_read_u16", "global_load_ushort"),
            t if is_wide(t) => ("ds_read_b64", "global_load_dwordx2"),
            _ => ("ds_read_b32", "global_load_dword"),
        };
        let d = if is_wide(elem) { self.v2() } else { self.v() };
        if space == Some(AddrSpace::Local) {
            let base = self.lds[buf];
            let a = self.offset(index, size, base, false)?;
            self.emit(lop, vec![d.clone()], vec![a]);
            self.emit("s_waitcnt", vec![], vec![Opnd::Text("lgkmcnt(0)")]);
        } else {
            let (base, _) = self.params.get(buf).cloned().ok_or_else(|| {
                Error::Unsupported(format!("load through `{}` ({:?} memory)", buf.name(), space))
            })?;
            let smem = self.smem_ok || space == Some(AddrSpace::Constant);
            if s && uniform_index && smem && size == 4 {
                let o = self.offset(index, size, 0, true)?;
                let d = self.s();
                self.emit("s_load_dword", vec![d.clone()], vec![base, o]);
                self.emit("s_waitcnt", vec![], vec![Opnd::Text("lgkmcnt(0)")]);
                return Ok(Val { o: d, s: true });
            }
            let o = self.offset(index, size, 0, false)?;
            if space == Some(AddrSpace::Generic) {
                let a = self.flat_address(&base, o);
                self.emit(flat(gop), vec![d.clone()], vec![a]);
                self.emit("s_waitcnt", vec![], vec![Opnd::Text("vmcnt(0) lgkmcnt(0)")]);
            } else {
                self.emit(gop, vec![d.clone()], vec![o, base]);
                self.emit("s_waitcnt", vec![], vec![Opnd::Text("vmcnt(0)")]);
            }
        }
        let r = Val { o: d, s: false };
        Ok(if is_wide(elem) { r } else { self.to(r, s) })
    }

    pub(super) fn store(&mut self, buf: &Var, index: &Expr, value: &Expr) -> Result<(), Error> {
        let x = self.expr(value)?;
        self.store_val(buf, index, x)
    }

    /// Stores the value `x` (already computed) to `buf[index]`.
    pub(super) fn store_val(&mut self, buf: &Var, index: &Expr, x: Val) -> Result<(), Error> {
        let elem = Self::elem(buf);
        let size = elem.size_bytes() as u32;
        if self.privs.contains_key(buf) {
            return self.private_store(buf, index, x);
        }
        if let Some(&base) = self.scratch.get(buf) {
            let x = if is_wide(elem) { self.w(x) } else { self.vgpr(x) };
            let a = self.scratch_address(index, size, base)?;
            let op = match size {
                1 => "scratch_store_byte",
                2 => "scratch_store_short",
                8 => "scratch_store_dwordx2",
                _ => "scratch_store_dword",
            };
            self.emit(op, vec![], vec![a, x, Opnd::Text("off")]);
            return Ok(());
        }
        let x = if is_wide(elem) { self.w(x) } else { self.vgpr(x) };
        let (lop, gop) = match size {
            1 => ("ds_write_b8", "global_store_byte"),
            2 => ("ds_write_b16", "global_store_short"),
            8 => ("ds_write_b64", "global_store_dwordx2"),
            _ => ("ds_write_b32", "global_store_dword"),
        };
        if buf.ty().addr_space() == Some(AddrSpace::Local) {
            let base = self.lds[buf];
            let a = self.offset(index, size, base, false)?;
            self.emit(lop, vec![], vec![a, x]);
        } else {
            let (base, _) = self
                .params
                .get(buf)
                .cloned()
                .ok_or_else(|| Error::Unsupported(format!("store through `{}`", buf.name())))?;
            let o = self.offset(index, size, 0, false)?;
            if buf.ty().addr_space() == Some(AddrSpace::Generic) {
                let a = self.flat_address(&base, o);
                self.emit(flat(gop), vec![], vec![a, x]);
            } else {
                self.emit(gop, vec![], vec![o, x, base]);
            }
        }
        Ok(())
    }

    /// The 64-bit address `base + off` (a generic pointer) in a VGPR pair.
    fn flat_address(&mut self, base: &Opnd, off: Opnd) -> Opnd {
        let h = self.vv("v_mov_b32", vec![super::hi(base)]);
        let d = self.v2();
        self.emit("v_add_co_u32", vec![super::lo(&d), Opnd::Vcc], vec![super::lo(base), off]);
        self.emit(
            "v_addc_co_u32",
            vec![super::hi(&d), Opnd::Vcc],
            vec![Opnd::Imm(0), h, Opnd::Vcc],
        );
        d
    }

    pub(super) fn alloc(&mut self, var: &Var, count: u32) -> Result<(), Error> {
        let elem = Self::elem(var);
        match var.ty().addr_space() {
            Some(AddrSpace::Local) => {
                let size = elem.size_bytes() as u32;
                // 16-byte aligned: `ds_read_b128` of a 4-lane vector needs it.
                let base = self.f.lds_bytes.next_multiple_of(16);
                let end = base as u64 + size as u64 * count as u64;
                if end > crate::amdgpu::MAX_LDS_BYTES as u64 {
                    return too_big(
                        var,
                        "LDS (local array) bytes",
                        end,
                        crate::amdgpu::MAX_LDS_BYTES,
                    );
                }
                self.lds.insert(var.clone(), base);
                self.f.lds_bytes = end as u32;
            }
            Some(AddrSpace::Private) if count <= MAX_PRIVATE => {
                // Private arrays start zeroed, as in the interpreter.
                let regs = (0..count)
                    .map(|_| {
                        if is_wide(elem) {
                            self.const64(0)
                        } else {
                            self.vv("v_mov_b32", vec![Opnd::Imm(0)])
                        }
                    })
                    .collect();
                self.privs.insert(var.clone(), regs);
            }
            Some(AddrSpace::Private) => {
                let size = elem.size_bytes() as u64;
                let base = self.f.scratch_bytes.next_multiple_of(8);
                let bytes = (size * count as u64).next_multiple_of(4);
                let end = base as u64 + bytes;
                if end > crate::amdgpu::MAX_SCRATCH_BYTES as u64 {
                    let what = "per-lane scratch (private array) bytes";
                    return too_big(var, what, end, crate::amdgpu::MAX_SCRATCH_BYTES);
                }
                let bytes = bytes as u32;
                self.f.scratch_bytes = end as u32;
                self.scratch.insert(var.clone(), base);
                self.zero_scratch(base, bytes / 4);
            }
            _ => return unsupported(format!("array `{}` in {:?} memory", var.name(), var.ty())),
        }
        Ok(())
    }

    /// The per-lane scratch address of `index` in the array at `base`.
    fn scratch_address(&mut self, index: &Expr, size: u32, base: u32) -> Result<Opnd, Error> {
        let o = self.offset(index, size, base, false)?;
        Ok(self.vv("v_add_u32", vec![Opnd::P(PReg::S(SCRATCH_OFFSET_SGPR)), o]))
    }

    /// Zeroes `words` dwords of scratch from `base` (private arrays start zeroed, as in the
    /// interpreter), in a uniform loop.
    fn zero_scratch(&mut self, base: u32, words: u32) {
        let a = self.vv("v_mov_b32", vec![Opnd::Imm(base)]);
        self.emit(
            "v_add_u32",
            vec![a.clone()],
            vec![Opnd::P(PReg::S(SCRATCH_OFFSET_SGPR)), a.clone()],
        );
        let zero = self.vv("v_mov_b32", vec![Opnd::Imm(0)]);
        let cnt = self.s();
        self.emit("s_mov_b32", vec![cnt.clone()], vec![Opnd::Imm(words)]);
        let head = self.label();
        let start = self.f.insts.len();
        self.place(head);
        self.emit("scratch_store_dword", vec![], vec![a.clone(), zero, Opnd::Text("off")]);
        self.emit("v_add_u32", vec![a.clone()], vec![Opnd::Imm(4), a]);
        self.emit("s_sub_u32", vec![cnt.clone()], vec![cnt.clone(), Opnd::Imm(1)]);
        self.emit("s_cmp_lg_u32", vec![], vec![cnt, Opnd::Imm(0)]);
        let end = self.f.insts.len();
        self.emit("s_cbranch_scc1", vec![], vec![Opnd::L(head)]);
        self.f.loops.push(LoopRange { head: start, end });
    }

    fn private_index(&mut self, index: &Expr) -> Result<Opnd, Error> {
        let i = self.expr(index)?;
        Ok(if index.ty().scalar().is_some_and(is_wide) { super::lo(&i.o) } else { self.vgpr(i) })
    }

    fn private_load(&mut self, buf: &Var, index: &Expr, s: bool) -> Result<Val, Error> {
        let wide = is_wide(Self::elem(buf));
        let i = self.private_index(index)?;
        let regs = self.privs[buf].clone();
        let mut r = regs[0].clone();
        for (k, e) in regs.iter().enumerate().skip(1) {
            let m = self.mm("v_cmp_eq_u32_e64", vec![Opnd::Imm(k as u32), i.clone()]);
            r = if wide {
                self.sel64(m, r, e.clone())
            } else {
                self.vv("v_cndmask_b32_e64", vec![r, e.clone(), m])
            };
        }
        let r = Val { o: r, s: false };
        Ok(if wide { r } else { self.to(r, s) })
    }

    fn private_store(&mut self, buf: &Var, index: &Expr, x: Val) -> Result<(), Error> {
        let wide = is_wide(Self::elem(buf));
        let i = self.private_index(index)?;
        let x = if wide { self.w(x) } else { self.vgpr(x) };
        let regs = self.privs[buf].clone();
        for (k, e) in regs.iter().enumerate() {
            let m = self.mm("v_cmp_eq_u32_e64", vec![Opnd::Imm(k as u32), i.clone()]);
            if wide {
                let (el, eh) = (super::lo(e), super::hi(e));
                let (xl, xh) = (super::lo(&x), super::hi(&x));
                self.emit("v_cndmask_b32_e64", vec![el.clone()], vec![el, xl, m.clone()]);
                self.emit("v_cndmask_b32_e64", vec![eh.clone()], vec![eh, xh, m]);
            } else {
                self.emit("v_cndmask_b32_e64", vec![e.clone()], vec![e.clone(), x.clone(), m]);
            }
        }
        Ok(())
    }

    /// A `for` loop over an i64/u64 counter (always in VGPR pairs).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn for64(
        &mut self,
        s: &Stmt,
        ty: Scalar,
        var: &Var,
        lo: &Expr,
        hi: &Expr,
        step: &Expr,
        body: &Stmt,
    ) -> Result<(), Error> {
        let uniform = self.div.branch_divergent(s) == Some(false);
        let lo = self.expr(lo)?;
        let hi = self.expr(hi)?;
        let hi = self.w(hi);
        let st = self.expr(step)?;
        let st = self.w(st);
        let iv = self.v2();
        self.copy64(&iv, &lo.o);
        let m = self.cmp64(ty, BinOp::Lt, &iv, &hi);
        let go = self.bool_from_mask(m);
        let go = self.to(go, uniform);
        let gr = if uniform { self.s() } else { self.v() };
        let mv = if uniform { "s_mov_b32" } else { "v_mov_b32" };
        self.emit(mv, vec![gr.clone()], vec![go.o]);
        let grv = Val { o: gr.clone(), s: uniform };
        self.env.insert(var.clone(), Val { o: iv.clone(), s: false });
        self.lower_loop(
            uniform,
            |_| Ok(grv.clone()),
            |me| {
                me.stmt(body)?;
                // go = (hi - iv) >u step; iv += step (no wrap-around past hi)
                let diff = me.sub64(&hi, &iv);
                let m = me.cmp64(Scalar::U64, BinOp::Gt, &diff, &st);
                let g = me.bool_from_mask(m);
                let g = me.to(g, uniform);
                me.emit(mv, vec![gr.clone()], vec![g.o]);
                let n = me.add64(&iv, &st);
                me.copy64(&iv, &n);
                Ok(())
            },
        )
    }
}

/// The `flat_*` form of a `global_*` memory instruction.
fn flat(global: &'static str) -> &'static str {
    match global {
        "global_load_sbyte" => "flat_load_sbyte",
        "global_load_ubyte" => "flat_load_ubyte",
        "global_load_sshort" => "flat_load_sshort",
        "global_load_ushort" => "flat_load_ushort",
        "global_load_dwordx2" => "flat_load_dwordx2",
        "global_load_dword" => "flat_load_dword",
        "global_store_byte" => "flat_store_byte",
        "global_store_short" => "flat_store_short",
        "global_store_dwordx2" => "flat_store_dwordx2",
        _ => "flat_store_dword",
    }
}

/// A size limit exceeded by the array `var`: refused, never truncated.
fn too_big(var: &Var, what: &str, need: u64, limit: u32) -> Result<(), Error> {
    let m = crate::limits::exceeded(what, need, limit as u64, "gfx9's");
    Err(Error::Limit(format!("array `{}`: {m}", var.name())))
}
