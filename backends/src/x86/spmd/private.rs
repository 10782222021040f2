//! Private arrays of the vector code: they live in the batch's vector frame, the eight
//! lanes of an element side by side (element `j` of lane `k` at `32 * j + 4 * k` from the
//! array's offset; `64 * j + 8 * k` for 64-bit elements), checked against their constant
//! length. Indices that are not constants: `privindex.rs`.
//!
//! An element at a constant index in bounds (what a short loop's copies leave, `short.rs`:
//! `m[5u32]`) is a fixed place of the frame whose eight lanes are one 32-byte row (two for
//! 64-bit elements): a plain vector load, and a vector store (blended with the row's old
//! lanes under a control mask or after a fault, so inactive lanes keep their elements).
//! No lane can fault there, so nothing is checked, and the values are the same as a
//! per-lane access's (each lane its own element, in its own place).

use iced_x86::code_asm::*;
use kiln_ir::{AddrSpace, Expr, Scalar, Stmt, StmtNode, Type, Var};

use super::privindex::{elem_rows, selects};
use super::wide64::is_64;
use super::{no, Kind, Priv, R, V, YMM};
use crate::x86::gen::{MemInfo, MemKind, Site};
use crate::x86::rt;

/// The largest private array on the lanes, in elements of 32-bit lanes (32 bytes each in
/// the frame; 64-bit elements take 64 bytes, so half as many fit).
const MAX_PRIVATE: u32 = 1024;

/// True if `s` declares a private array.
pub(super) fn has_private(s: &Stmt) -> bool {
    match s.node() {
        StmtNode::Alloc { var, .. } => matches!(var.ty(), Type::Ptr(AddrSpace::Private, _)),
        StmtNode::If { then, otherwise, .. } => {
            has_private(then) || otherwise.as_ref().is_some_and(has_private)
        }
        StmtNode::For { body, .. } | StmtNode::While { body, .. } => has_private(body),
        StmtNode::Block(v) => v.iter().any(has_private),
        _ => false,
    }
}

impl V {
    /// The private array `buf` names, if it names one.
    pub(super) fn private(&self, buf: &Var) -> Option<Priv> {
        self.privs.iter().rev().find(|p| p.name == buf.name()).cloned()
    }

    /// Declares a private array: its lanes in the vector frame, zeroed each time the
    /// declaration runs (as the interpreter does; inactive lanes cannot reach it).
    pub(super) fn alloc_private(&mut self, var: &Var, count: u32) -> R<()> {
        let elem = match var.ty() {
            Type::Ptr(_, e @ (Scalar::F32 | Scalar::I32 | Scalar::U32)) => e,
            // 8/16-bit and f16 elements as their 32-bit lane form (the frame is no one
            // else's memory).
            Type::Ptr(_, e) if super::narrow::narrow(Type::Scalar(e)).is_some() => e,
            // Two registers' lanes per element, as 64-bit values are computed.
            Type::Ptr(_, e) if is_64(Type::Scalar(e)) => e,
            t => return no(format!("array `{}` ({t})", var.name())),
        };
        let rows = elem_rows(elem);
        if count == 0 || count > MAX_PRIVATE / rows {
            return no(format!("private array `{}` of {count} elements", var.name()));
        }
        let off = self.next;
        let p =
            Priv { name: var.name().to_string(), elem, off, count, mem: self.mems.len() as u32 };
        // (An array that is scattered to has a sink element past its end: see
        // `privindex.rs`.)
        let sink = u32::from(!selects(&p));
        self.next += 32 * (rows * (count + sink)) as i32;
        self.mems.push(MemInfo {
            name: var.name().to_string(),
            elem,
            kind: MemKind::Private { off, count },
            param: None,
            local: None,
        });
        self.privs.push(p);
        let mut top = self.a.create_label();
        self.a.vpxor(ymm0, ymm0, ymm0)?;
        self.a.lea(rax, qword_ptr(r15 + off))?;
        self.a.mov(r10d, rows * count)?;
        self.bind(&mut top)?;
        self.a.vmovups(ymmword_ptr(rax), ymm0)?;
        self.a.add(rax, 32)?;
        self.a.dec(r10d)?;
        self.a.jne(top)?;
        Ok(())
    }

    /// Checks the indices in `ymm{idx}` against private array `p` in the lanes of
    /// `ymm{act}` (using `ymm{f}`): lanes out of bounds are reported and leave `act`.
    fn check_private(
        &mut self,
        p: &Priv,
        idx: usize,
        act: usize,
        f: usize,
        what: &'static str,
        signed: bool,
    ) -> R<()> {
        // index <u count  <=>  (index ^ sign) <=s ((count - 1) ^ sign)
        let sign = self.imm_slot(0x8000_0000);
        let lim = self.imm_slot((p.count - 1) ^ 0x8000_0000);
        self.a.vpxor(YMM[f], YMM[idx], ymmword_ptr(r15 + sign))?;
        self.a.vpcmpgtd(YMM[f], YMM[f], ymmword_ptr(r15 + lim))?;
        self.a.vpand(YMM[f], YMM[f], YMM[act])?;
        let site = Site::Access { what, mem: p.mem, signed };
        self.fault_stub(idx, f, act, rt::ERR_OOB, site, signed, None)
    }

    /// A load of private array `p` into `ymm{d}` (`ymm{d+1}`, `ymm{d+2}` temporaries; for
    /// 64-bit elements into `ymm{d}`, `ymm{d+1}`, with `ymm{d+2..=d+4}`).
    pub(super) fn load_private(&mut self, p: &Priv, index: &Expr, ty: Type, d: usize) -> R<()> {
        if Type::Scalar(p.elem) != ty {
            return no(format!("a load of `{}` as {ty}", p.name));
        }
        let signed = Self::index_type(index)?;
        let wide = is_64(ty);
        if let Some(at) = fixed(p, index) {
            return self.load_row(r15 + at, wide, d);
        }
        let slow = self.uniform_row(p, index, d)?;
        let mut done = self.a.create_label();
        if let Some(mut slow) = slow {
            self.load_row(r15 + rax + p.off, wide, d)?;
            self.a.jmp(done)?;
            self.bind(&mut slow)?;
        } else {
            self.expr(index, d)?;
        }
        self.active(d + 1)?;
        self.check_private(p, d, d + 1, d + 2, "load", signed)?;
        self.read_lanes(p, d)?;
        if slow.is_some() {
            self.bind(&mut done)?;
        }
        Ok(())
    }

    /// The element's row(s) at `row` into `ymm{d}` (64-bit: `ymm{d}`, `ymm{d+1}`).
    fn load_row(&mut self, row: AsmMemoryOperand, wide: bool, d: usize) -> R<()> {
        if wide {
            self.a.vmovupd(YMM[d], ymmword_ptr(row))?;
            self.a.vmovupd(YMM[d + 1], ymmword_ptr(row + 32))?;
        } else {
            self.a.vmovups(YMM[d], ymmword_ptr(row))?;
        }
        Ok(())
    }

    /// `p[index] = value` in the active lanes (each lane its own element).
    pub(super) fn store_private(&mut self, p: &Priv, index: &Expr, value: &Expr) -> R<()> {
        if Type::Scalar(p.elem) != value.ty() {
            return no(format!("a store of {} to `{}`", value.ty(), p.name));
        }
        let signed = Self::index_type(index)?;
        let wide = is_64(value.ty());
        let (i, a, f) = if wide { (2, 3, 4) } else { (1, 2, 3) };
        if let Some(at) = fixed(p, index) {
            self.value_top(value, wide)?;
            return self.store_row(r15 + at, wide);
        }
        let mut done = self.a.create_label();
        let uniform = self.kind(index) == Kind::Uniform && self.gpr_ok(index);
        if uniform {
            // (Computing the index cannot fault, so the value may come first.)
            self.value_top(value, wide)?;
            let Some(mut slow) = self.uniform_row(p, index, i)? else {
                return no("internal: a uniform index without its row");
            };
            self.store_row(r15 + rax + p.off, wide)?;
            self.a.jmp(done)?;
            self.bind(&mut slow)?;
        } else if !self.store_operands(index, value, i)? {
            self.expr_top(index, i)?;
        }
        self.active(a)?;
        self.check_private(p, i, a, f, "store", signed)?;
        self.write_lanes(p, a)?;
        if uniform {
            self.bind(&mut done)?;
        }
        Ok(())
    }

    /// A stored value into `ymm0` (64-bit: `ymm0`, `ymm1`).
    fn value_top(&mut self, value: &Expr, wide: bool) -> R<()> {
        if wide {
            self.expr64_top(value, 0)
        } else {
            self.expr_top(value, 0)
        }
    }

    /// The value in `ymm0` (`ymm0`, `ymm1` for a 64-bit one) stored to the element's
    /// row(s) at `row`: whole, or under a control mask blended with the old lanes (a
    /// 64-bit value's two rows with the mask widened). Lanes that faulted need no mask: a
    /// private element is its lane's alone, and a dead lane's is never read by anything
    /// that shows.
    fn store_row(&mut self, row: AsmMemoryOperand, wide: bool) -> R<()> {
        let masked = self.mask;
        if let Some(m) = masked {
            self.mask_to(m, 2)?;
        }
        if wide {
            if masked.is_some() {
                self.a.vpmovsxdq(ymm3, xmm2)?;
                self.a.vextracti128(xmm2, ymm2, 1)?;
                self.a.vpmovsxdq(ymm2, xmm2)?;
                self.a.vmovupd(ymm4, ymmword_ptr(row))?;
                self.a.vblendvpd(ymm0, ymm4, ymm0, ymm3)?;
                self.a.vmovupd(ymm4, ymmword_ptr(row + 32))?;
                self.a.vblendvpd(ymm1, ymm4, ymm1, ymm2)?;
            }
            self.a.vmovupd(ymmword_ptr(row), ymm0)?;
            self.a.vmovupd(ymmword_ptr(row + 32), ymm1)?;
        } else {
            if masked.is_some() {
                self.a.vmovups(ymm1, ymmword_ptr(row))?;
                self.a.vblendvps(ymm0, ymm1, ymm0, ymm2)?;
            }
            self.a.vmovups(ymmword_ptr(row), ymm0)?;
        }
        Ok(())
    }
}

/// The frame offset of `p[index]`'s row(s) if `index` is a constant in bounds.
pub(super) fn fixed(p: &Priv, index: &Expr) -> Option<i32> {
    let k = index.as_imm()?.as_i128()?;
    let bytes = 32 * elem_rows(p.elem) as i32;
    (0..i128::from(p.count)).contains(&k).then(|| p.off + bytes * k as i32)
}
