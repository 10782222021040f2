//! SPMD over 8 AVX2 lanes, for a deliberately small class of kernels: straight-line
//! elementwise code where every work-item touches only element `global_id(0)` of each buffer.
//!
//! A kernel qualifies when its body is only `let`s and stores, its values are `f32`, `i32`
//! or `u32` (`+ - *`, and `/` on f32), its operands are scalar parameters, constants,
//! `global_id(0)` and those `let`s, and every load and store indexes a global buffer with
//! exactly `global_id(0)` (directly or through a `let` of it). Then eight consecutive
//! work-items of a row run at once, every value in one YMM register per 8 lanes (uniform
//! values are broadcast), loads and stores as unaligned 8-wide moves.
//!
//! Why this is exact, not just usually right: each work-item touches element `global_id(0)`
//! only, so two lanes of a batch never touch the same element, and work-items sharing an
//! element (same `x`, other rows) still run in the interpreter's order (rows in order); f32
//! lane arithmetic is the same IEEE operation as the scalar one; integer lanes wrap at 32
//! bits as the scalar code does. There is no fault to report in the middle of a batch: the
//! driver runs a work-group this way only if `global_id(0)` of its last work-item is within
//! every accessed buffer (else the scalar code runs it and reports what the interpreter
//! reports), and nothing else in the class can fault.
//!
//! Everything else (branches, loops, barriers, atomics, arrays, other types or indices) runs
//! on the scalar code; so does every kernel on CPUs without AVX2.

use iced_x86::code_asm::*;
use kiln_ir::{BinOp, Builtin, Expr, ExprNode, Kernel, Scalar, StmtNode, Type, Var};

use super::gen::AsmResult;
use super::rt;

/// A qualifying kernel's vector code, before assembly.
pub(crate) struct Spmd {
    pub asm: CodeAssembler,
    /// Bytes of the vector frame (the lane-index constant, then one 32-byte slot per `let`).
    pub vframe_bytes: usize,
    /// Memory-table entries the code loads or stores (the driver checks their lengths).
    pub accessed: Vec<u32>,
}

/// The lane-index constant `[0, 1, ..., 7]` at the start of the vector frame.
pub(crate) const IOTA: [u32; 8] = [0, 1, 2, 3, 4, 5, 6, 7];

struct V {
    a: CodeAssembler,
    /// (name, vector slot offset) of each `let`; whether it is `global_id(0)`.
    lets: Vec<(String, i32, bool)>,
    next: i32,
    /// Scalar parameters: name, frame slot.
    params: Vec<(String, i32)>,
    /// Pointer parameters: name, table index.
    bufs: Vec<(String, u32)>,
    accessed: Vec<u32>,
}

fn lane_type(t: Type) -> bool {
    matches!(t.scalar(), Some(Scalar::F32 | Scalar::I32 | Scalar::U32))
}

impl V {
    fn let_of(&self, v: &Var) -> Option<&(String, i32, bool)> {
        self.lets.iter().rev().find(|(n, _, _)| n == v.name())
    }

    /// True if `e` is `global_id(0)` or a `let` of it.
    fn is_gid0(&self, e: &Expr) -> bool {
        match e.node() {
            ExprNode::Builtin { kind: Builtin::GlobalId, dim: 0 } => true,
            ExprNode::Var(v) => self.let_of(v).is_some_and(|l| l.2),
            _ => false,
        }
    }

    fn buf(&self, v: &Var) -> Option<u32> {
        self.bufs.iter().find(|(n, _)| n == v.name()).map(|b| b.1)
    }

    /// True if `e` is in the class (see the module docs).
    fn qualifies(&self, e: &Expr) -> bool {
        if !lane_type(e.ty()) {
            return false;
        }
        match e.node() {
            ExprNode::Var(v) => {
                self.let_of(v).is_some() || self.params.iter().any(|(n, _)| n == v.name())
            }
            ExprNode::Imm(_) => true,
            ExprNode::Builtin { kind: Builtin::GlobalId, dim: 0 } => true,
            ExprNode::Binary { op, a, b } => {
                let float = a.ty() == Type::F32;
                (matches!(op, BinOp::Add | BinOp::Sub | BinOp::Mul) || (float && *op == BinOp::Div))
                    && self.qualifies(a)
                    && self.qualifies(b)
            }
            ExprNode::Load { buf, index } => self.buf(buf).is_some() && self.is_gid0(index),
            _ => false,
        }
    }

    /// Evaluates `e` (which qualifies) into `ymm0` for the lanes of the batch whose first
    /// `global_id(0)` is `[r12 + global_id] + ebx`.
    fn expr(&mut self, e: &Expr) -> AsmResult<()> {
        match e.node() {
            ExprNode::Var(v) => {
                if let Some(&(_, off, _)) = self.let_of(v) {
                    return self.a.vmovups(ymm0, ymmword_ptr(r15 + off));
                }
                let slot = self.params.iter().find(|(n, _)| n == v.name()).map_or(0, |p| p.1);
                self.a.vbroadcastss(ymm0, dword_ptr(r13 + slot))
            }
            ExprNode::Imm(i) => {
                let bits = rt::bits_of(kiln_ir::interp::scalar::cast(i.scalar(), *i));
                self.a.mov(eax, bits as u32)?;
                self.a.vmovd(xmm0, eax)?;
                self.a.vpbroadcastd(ymm0, xmm0)
            }
            ExprNode::Builtin { .. } => {
                self.gid0_eax()?;
                self.a.vmovd(xmm0, eax)?;
                self.a.vpbroadcastd(ymm0, xmm0)?;
                self.a.vpaddd(ymm0, ymm0, ymmword_ptr(r15))
            }
            ExprNode::Binary { op, a, b } => {
                self.expr(a)?;
                self.a.sub(rsp, 32)?;
                self.a.vmovups(ymmword_ptr(rsp), ymm0)?;
                self.expr(b)?;
                self.a.vmovaps(ymm1, ymm0)?;
                self.a.vmovups(ymm0, ymmword_ptr(rsp))?;
                self.a.add(rsp, 32)?;
                match (op, a.ty() == Type::F32) {
                    (BinOp::Add, true) => self.a.vaddps(ymm0, ymm0, ymm1),
                    (BinOp::Sub, true) => self.a.vsubps(ymm0, ymm0, ymm1),
                    (BinOp::Mul, true) => self.a.vmulps(ymm0, ymm0, ymm1),
                    (BinOp::Div, true) => self.a.vdivps(ymm0, ymm0, ymm1),
                    (BinOp::Add, false) => self.a.vpaddd(ymm0, ymm0, ymm1),
                    (BinOp::Sub, false) => self.a.vpsubd(ymm0, ymm0, ymm1),
                    _ => self.a.vpmulld(ymm0, ymm0, ymm1),
                }
            }
            ExprNode::Load { buf, .. } => {
                let t = self.buf(buf).unwrap_or(0);
                self.address(t)?;
                self.a.vmovups(ymm0, ymmword_ptr(rdx + rax * 4))
            }
            _ => Ok(()),
        }
    }

    /// `eax` = `global_id(0)` of the batch's first lane.
    fn gid0_eax(&mut self) -> AsmResult<()> {
        self.a.mov(eax, dword_ptr(r12 + rt::OFF_GLOBAL_ID))?;
        self.a.add(eax, ebx)
    }

    /// `rdx` = base of table entry `t`, `rax` = the batch's first `global_id(0)`.
    fn address(&mut self, t: u32) -> AsmResult<()> {
        if !self.accessed.contains(&t) {
            self.accessed.push(t);
        }
        self.gid0_eax()?;
        self.a.mov(rdx, qword_ptr(r14 + (t as i32 * 16)))
    }
}

/// The vector code for `k` if it qualifies; `param_slots` are the scalar frame's parameter
/// slots (the vector code reads scalar parameters from the scalar frame).
///
/// The function takes (ctx, scalar frame, vector frame) and runs one row of a work-group:
/// `global_id(0)` from `ctx.global_id[0]` for `ctx.local_size[0]` work-items (a multiple of 8).
pub(crate) fn generate(k: &Kernel, param_slots: &[Option<i32>]) -> AsmResult<Option<Spmd>> {
    let mut v = V {
        a: CodeAssembler::new(64)?,
        lets: Vec::new(),
        next: 32,
        params: Vec::new(),
        bufs: Vec::new(),
        accessed: Vec::new(),
    };
    let mut table = 0;
    for (p, slot) in k.params().iter().zip(param_slots) {
        match (p.ty(), slot) {
            (Type::Ptr(_, Scalar::F32 | Scalar::I32 | Scalar::U32), _) => {
                v.bufs.push((p.name().to_string(), table));
                table += 1;
            }
            (Type::Ptr(..), _) => table += 1,
            (_, Some(s)) if lane_type(p.ty()) => v.params.push((p.name().to_string(), *s)),
            _ => {}
        }
    }
    // Check the whole body first (no code for kernels that do not qualify).
    let mut probe = V { a: CodeAssembler::new(64)?, lets: Vec::new(), ..v };
    for s in k.body().stmts() {
        match s.node() {
            StmtNode::Let { var, value } if probe.qualifies(value) => {
                let gid = probe.is_gid0(value);
                probe.lets.push((var.name().to_string(), 0, gid));
            }
            StmtNode::Store { buf, index, value }
                if probe.buf(buf).is_some()
                    && probe.is_gid0(index)
                    && probe.qualifies(value)
                    && Some(value.ty()) == buf.ty().elem().map(Type::Scalar) => {}
            _ => return Ok(None),
        }
    }
    let mut v = V { lets: Vec::new(), ..probe };
    let a = &mut v.a;
    a.push(rbp)?;
    a.mov(rbp, rsp)?;
    a.push(rbx)?;
    a.push(r12)?;
    a.push(r13)?;
    a.push(r14)?;
    a.push(r15)?;
    a.and(rsp, -32)?;
    a.mov(r12, rdi)?;
    a.mov(r13, rsi)?;
    a.mov(r15, rdx)?;
    a.mov(r14, qword_ptr(r12 + rt::OFF_MEMS))?;
    a.xor(ebx, ebx)?;
    let mut top = a.create_label();
    a.set_label(&mut top)?;
    a.nop()?;
    for s in k.body().stmts() {
        match s.node() {
            StmtNode::Let { var, value } => {
                v.expr(value)?;
                let off = v.next;
                v.next += 32;
                v.a.vmovups(ymmword_ptr(r15 + off), ymm0)?;
                let gid = v.is_gid0(value);
                v.lets.push((var.name().to_string(), off, gid));
            }
            StmtNode::Store { buf, value, .. } => {
                v.expr(value)?;
                let t = v.buf(buf).unwrap_or(0);
                v.address(t)?;
                v.a.vmovups(ymmword_ptr(rdx + rax * 4), ymm0)?;
            }
            _ => {}
        }
    }
    let a = &mut v.a;
    a.add(ebx, 8)?;
    a.cmp(rbx, qword_ptr(r12 + rt::OFF_LOCAL_SIZE))?;
    a.jb(top)?;
    a.vzeroupper()?;
    a.lea(rsp, qword_ptr(rbp - 40))?;
    a.pop(r15)?;
    a.pop(r14)?;
    a.pop(r13)?;
    a.pop(r12)?;
    a.pop(rbx)?;
    a.pop(rbp)?;
    a.ret()?;
    Ok(Some(Spmd { asm: v.a, vframe_bytes: v.next as usize, accessed: v.accessed }))
}
