//! Counts straight into the buffer: a work-group histogram whose local bins are only zeroed,
//! counted with integer `atomic_add`/`atomic_sub` and added back into a global buffer.
//!
//! The shape, at the kernel's top level (`lid` a `let` of `local_id(0)`, or `local_id(0)`):
//!
//! ```text
//! local bins: u32[L];            // or i32
//! ...                            // `let`s of ids and constants (nothing that can fault)
//! bins[lid] = 0;
//! barrier(...);
//! ...                            // the middle: no barrier, no use of `hist`; `bins` only as
//!                                // atomic_add/sub(bins, i, v) with unused results, where
//!                                // i's form bounds it below L (`x & 255`, ...)
//! barrier(...);
//! atomic_add(hist, lid, bins[lid]);   // the last statement
//! ```
//!
//! is the same, when the launch's local size is `[L, 1, 1]` and `hist` has at least `L`
//! elements, as the kernel without `bins`, the zeroing, the barriers and the add-back, whose
//! middle adds to (subtracts from) `hist` directly. Why: each of the group's `L` work-items
//! zeroes and adds back a different bin, so every bin starts at 0 and `hist[b]` gains exactly
//! the group's additions to `bins[b]` (minus its subtractions), and 32-bit wrapping addition
//! is associative and commutative, so the grouping does not show in the bits; nothing reads
//! `bins` but the add-back or `hist` at all, so no work-item can see the difference. Neither
//! the zeroing, nor the add-back (`lid < L <= len(hist)`), nor the middle's counts (their
//! indices are below `L`) can fault, and the `let`s before the first barrier cannot, so the
//! errors are the middle's, met in the same work-item order with or without the barriers.
//! Any other launch runs the kernel as written.

use kiln_ir::{
    AddrSpace, AtomicOp, Builtin, Expr, ExprNode, FuncKind, Kernel, Mutator, Scalar, Stmt,
    StmtNode, Type, Var,
};
use kiln_passes::util::count_uses;

use iced_x86::code_asm::*;
use kiln_ir::BinOp;

use super::mem::index_max;
use super::{Kind, R, V};
use crate::x86::sums::{binds, count_stmts, sum_on};

impl V {
    /// True while generating a counting program: the only code generated with buffer
    /// lengths known ([`super::generate`]'s `known`, `hist`'s `L` bins).
    pub(super) fn counting(&self) -> bool {
        !self.known.is_empty()
    }

    /// True if `k`'s lanes can fault or run long (see [`super::expr::needs_alive`]), where
    /// an atomic on a buffer of known length at an index bounded below it is not checked
    /// ([`V::needs_check`]) and so cannot fault: a counting program's counts need no alive
    /// mask, which spares each batch its set-up and its end's test.
    pub(super) fn needs_alive(&self, k: &Kernel) -> bool {
        let names = super::expr::gid0_names(k.body().stmts());
        let unchecked = |args: &[Expr]| {
            let (Some(buf), Some(index)) = (args.first().and_then(Expr::as_var), args.get(1))
            else {
                return false;
            };
            let p = k.params().iter().position(|q| q == buf);
            let len = self.known.iter().find(|(q, _)| Some(*q) == p).map(|(_, len)| *len);
            matches!(index.ty(), Type::Scalar(Scalar::I32 | Scalar::U32))
                && matches!((len, index_max(index)), (Some(len), Some(m)) if m < u64::from(len))
        };
        super::expr::needs_alive_but(k.body().stmts(), &names, &unchecked)
    }

    /// True if each lane of `e`, a count's index, can be computed by scalar code
    /// ([`V::lane_index`]): loads of buffer elements at `global_id(0)` (32-bit, or 8/16-bit
    /// ones cast), through integer operations with a constant (`& 255`, `>> 24`, `% 16`,
    /// `* c`, ...). Such an index needs neither a vector nor eight extractions: a load per
    /// lane (`movzx r10d, byte [...]` for `x & 255` of a 32-bit `x`), which takes a load
    /// port instead of the two operations of a `vpextrd`.
    pub(super) fn lane_form(&self, e: &Expr) -> bool {
        if !matches!(e.ty(), Type::U32 | Type::I32) {
            return false;
        }
        match e.node() {
            ExprNode::Load { .. } => self.lane_load(e).is_some(),
            ExprNode::Cast { a, .. } => match a.ty() {
                Type::U32 | Type::I32 => self.lane_form(a),
                _ => self.lane_load(a).is_some(),
            },
            ExprNode::Binary { op, a, b } => match with_constant(*op, a, b) {
                Some((x, c)) => {
                    let pow2 = e.ty() == Type::U32 && c.is_power_of_two();
                    (*op != BinOp::Rem || pow2) && self.lane_form(x)
                }
                None => false,
            },
            _ => false,
        }
    }

    /// A load of a buffer's element at the batch's `global_id(0)`, which the batch reads
    /// unchecked (the driver checks the span): its table, element size and signedness.
    fn lane_load(&self, e: &Expr) -> Option<(u32, i32, bool)> {
        let ExprNode::Load { buf, index } = e.node() else { return None };
        if self.kind(index) != Kind::Gid0 || self.blocking.is_some() {
            return None;
        }
        let t = self.buf(buf)?;
        self.mems.get(self.mem_of(t) as usize)?.param?;
        match e.ty().scalar()? {
            Scalar::U32 | Scalar::I32 => Some((t, 4, false)),
            Scalar::U16 => Some((t, 2, false)),
            Scalar::I16 => Some((t, 2, true)),
            Scalar::U8 => Some((t, 1, false)),
            Scalar::I8 => Some((t, 1, true)),
            _ => None,
        }
    }

    /// Prefetches ahead what the loads of `e` ([`V::lane_form`]) stream, as the vector
    /// load would have (`expr.rs`, `PREFETCH_AHEAD`).
    pub(super) fn prefetch_lanes(&mut self, e: &Expr) -> R<()> {
        let mut x = e;
        loop {
            match x.node() {
                ExprNode::Cast { a, .. } => x = a,
                ExprNode::Binary { op, a, b } => match with_constant(*op, a, b) {
                    Some((y, _)) => x = y,
                    None => return Ok(()),
                },
                _ => break,
            }
        }
        if let Some((t, size, _)) = self.lane_load(x) {
            let b = self.element_base(t)?;
            let ahead = super::expr::PREFETCH_AHEAD;
            self.a.prefetcht0(byte_ptr(b + rbx * size + ahead))?;
        }
        Ok(())
    }

    /// Lane `lane`'s value of `e` ([`V::lane_form`]) into `r10d`, with the interpreter's
    /// 32-bit wrapping operations (shift counts modulo 32).
    pub(super) fn lane_index(&mut self, e: &Expr, lane: i32) -> R<()> {
        // A byte or word of a 32-bit element, loaded alone.
        if let ExprNode::Binary { op, a, b } = e.node() {
            let part = with_constant(*op, a, b).and_then(|(x, c)| Some((self.lane_load(x)?, c)));
            if let Some(((t, 4, _), c)) = part {
                let signed = e.ty() == Type::I32;
                let part = match (op, c) {
                    (BinOp::And, 0xff) => Some((0, 1, false)),
                    (BinOp::And, 0xffff) => Some((0, 2, false)),
                    (BinOp::Shr, 24) => Some((3, 1, signed)),
                    (BinOp::Shr, 16) => Some((2, 2, signed)),
                    _ => None,
                };
                if let Some((off, size, sx)) = part {
                    let b = self.element_base(t)?;
                    let at = b + rbx * 4 + (4 * lane + off);
                    match (size, sx) {
                        (1, false) => self.a.movzx(r10d, byte_ptr(at))?,
                        (1, true) => self.a.movsx(r10d, byte_ptr(at))?,
                        (_, false) => self.a.movzx(r10d, word_ptr(at))?,
                        (_, true) => self.a.movsx(r10d, word_ptr(at))?,
                    }
                    return Ok(());
                }
            }
        }
        match e.node() {
            ExprNode::Load { .. } => {
                let Some((t, size, signed)) = self.lane_load(e) else {
                    return super::no(format!("internal: `{e}` is no lane load"));
                };
                let b = self.element_base(t)?;
                match (size, signed) {
                    (4, _) => self.a.mov(r10d, dword_ptr(b + rbx * 4 + 4 * lane))?,
                    (2, false) => self.a.movzx(r10d, word_ptr(b + rbx * 2 + 2 * lane))?,
                    (2, true) => self.a.movsx(r10d, word_ptr(b + rbx * 2 + 2 * lane))?,
                    (_, false) => self.a.movzx(r10d, byte_ptr(b + rbx + lane))?,
                    (_, true) => self.a.movsx(r10d, byte_ptr(b + rbx + lane))?,
                }
            }
            // (32-bit to 32-bit: the same bits; from 8/16 bits: extended as loaded.)
            ExprNode::Cast { a, .. } => self.lane_index(a, lane)?,
            ExprNode::Binary { op, a, b } => {
                let Some((x, c)) = with_constant(*op, a, b) else {
                    return super::no(format!("internal: `{e}` is no lane index"));
                };
                self.lane_index(x, lane)?;
                let a = &mut self.a;
                let (c, n) = (c as i32, c & 31);
                match op {
                    BinOp::And => a.and(r10d, c)?,
                    BinOp::Or => a.or(r10d, c)?,
                    BinOp::Xor => a.xor(r10d, c)?,
                    BinOp::Add => a.add(r10d, c)?,
                    BinOp::Sub => a.sub(r10d, c)?,
                    BinOp::Mul => a.imul_3(r10d, r10d, c)?,
                    BinOp::Shl => a.shl(r10d, n)?,
                    BinOp::Shr if e.ty() == Type::I32 => a.sar(r10d, n)?,
                    BinOp::Shr => a.shr(r10d, n)?,
                    // (u32 by a power of two, see `lane_form`)
                    _ => a.and(r10d, c.wrapping_sub(1))?,
                }
            }
            _ => return super::no(format!("internal: `{e}` is no lane index")),
        }
        Ok(())
    }
}

/// The operand of `op` that is not a constant and the constant's 32 bits, for the
/// operations [`V::lane_index`] computes (a constant first only where `op` commutes).
fn with_constant<'e>(op: BinOp, a: &'e Expr, b: &'e Expr) -> Option<(&'e Expr, u32)> {
    let bits = |e: &Expr| match e.node() {
        ExprNode::Imm(kiln_ir::Imm::Int(_, bits)) => Some(*bits as u32),
        _ => None,
    };
    match op {
        BinOp::And | BinOp::Or | BinOp::Xor | BinOp::Add | BinOp::Mul => {
            bits(b).map(|c| (a, c)).or_else(|| bits(a).map(|c| (b, c)))
        }
        BinOp::Sub | BinOp::Shl | BinOp::Shr | BinOp::Rem => bits(b).map(|c| (a, c)),
        _ => None,
    }
}

/// A kernel that counts straight into a buffer (see the module docs): the rewritten kernel
/// and when it may run instead.
pub(crate) struct Counted {
    /// The kernel without the local bins, counting into `hist`.
    pub(crate) kernel: Kernel,
    /// The position of `hist` among the parameters.
    pub(crate) param: usize,
    /// The bins' count: the local size `[L, 1, 1]` and the least length of `hist`.
    pub(crate) bins: u32,
}

/// The kernel of `k` that counts straight into its buffer, if `k` has the shape.
pub(crate) fn counted(k: &Kernel) -> Option<Counted> {
    let StmtNode::Block(stmts) = k.body().node() else { return None };
    // The add-back, last.
    let (last, rest) = stmts.split_last()?;
    let StmtNode::Call { result: None, func, args } = last.node() else { return None };
    if !matches!(func.kind(), FuncKind::Atomic(AtomicOp::Add)) || args.len() != 3 {
        return None;
    }
    let hist = args[0].as_var()?.clone();
    let ExprNode::Load { buf: bins, index } = args[2].node() else { return None };
    let Type::Ptr(AddrSpace::Local, elem @ (Scalar::I32 | Scalar::U32)) = bins.ty() else {
        return None;
    };
    if hist.ty() != Type::Ptr(AddrSpace::Global, elem) {
        return None;
    }
    let param = k.params().iter().position(|p| *p == hist)?;
    let barriers: Vec<usize> =
        (0..rest.len()).filter(|&i| rest[i].barrier_fence().is_some()).collect();
    let [b1, b2] = barriers[..] else { return None };
    if b2 + 1 != rest.len() || count_stmts(k.body(), &|s: &Stmt| s.barrier_fence().is_some()) != 2 {
        return None;
    }
    // Before the first barrier: the bins' declaration, `let`s that cannot fault and the
    // zeroing; nothing else.
    let mut lids: Vec<Var> = Vec::new();
    let (mut count_l, mut zeroed) = (None, false);
    for s in &rest[..b1] {
        match s.node() {
            StmtNode::Alloc { var, count } if var == bins => count_l = Some(*count),
            StmtNode::Alloc { .. } => {}
            StmtNode::Let { var, value } if harmless(value) => {
                if is_local_id(value) {
                    lids.push(var.clone());
                }
            }
            StmtNode::Store { buf, index: i, value }
                if buf == bins && !zeroed && is_lid(i, &lids) =>
            {
                zeroed = is_zero(value);
                if !zeroed {
                    return None;
                }
            }
            _ => return None,
        }
    }
    let l = count_l?;
    if !zeroed || !is_lid(&args[1], &lids) || !is_lid(index, &lids) {
        return None;
    }
    // A name bound twice could mean different things at the two places.
    for v in lids.iter().chain([bins, &hist]) {
        if count_stmts(k.body(), &|s| binds(s, v.name())) + usize::from(*v == hist) != 1 {
            return None;
        }
    }
    // The middle: `hist` not at all, `bins` only as the target of counts whose indices are
    // bounded below `L` (each such count is one reference to `bins`, so any other reference,
    // in an index or a value included, makes the numbers differ).
    let middle = &rest[b1 + 1..b2];
    let bounded = |s: &Stmt| {
        sum_on(s, bins.name()).is_some_and(|a| index_max(&a[1]).is_some_and(|m| m < u64::from(l)))
    };
    let counts: usize = middle.iter().map(|s| count_stmts(s, &bounded)).sum();
    if count_uses(middle, hist.name()) != 0 || count_uses(middle, bins.name()) != counts {
        return None;
    }
    let mut body: Vec<Stmt> = rest[..b1]
        .iter()
        .filter(|s| matches!(s.node(), StmtNode::Let { .. } | StmtNode::Alloc { .. }))
        .filter(|s| !matches!(s.node(), StmtNode::Alloc { var, .. } if var == bins))
        .cloned()
        .collect();
    let mut to_hist = Rename { from: bins.clone(), to: hist };
    body.extend(middle.iter().map(|s| to_hist.mutate_stmt(s)));
    // The `let`s that only the zeroing and the add-back used (`lid`) go with them: the
    // kernel was optimized before this, and nothing optimizes it again.
    for i in (0..body.len()).rev() {
        if let StmtNode::Let { var, .. } = body[i].node() {
            if count_uses(&body[i + 1..], var.name()) == 0 {
                body.remove(i);
            }
        }
    }
    Some(Counted { kernel: k.with_body(Stmt::block(body)), param, bins: l })
}

/// True if `e` is the constant 0 (perhaps cast: `0 as u32`).
fn is_zero(e: &Expr) -> bool {
    match e.node() {
        ExprNode::Cast { a, .. } => is_zero(a),
        _ => e.as_imm().is_some_and(|v| v.is_zero()),
    }
}

fn is_local_id(e: &Expr) -> bool {
    matches!(e.node(), ExprNode::Builtin { kind: Builtin::LocalId, dim: 0 })
}

fn is_lid(e: &Expr, lids: &[Var]) -> bool {
    is_local_id(e) || e.as_var().is_some_and(|v| lids.contains(v))
}

/// True if `e` is an id, a size or a constant (it cannot fault).
fn harmless(e: &Expr) -> bool {
    matches!(e.node(), ExprNode::Builtin { .. } | ExprNode::Imm(_))
}

/// Renames the bins to the buffer in the middle (where they are only atomics' targets).
struct Rename {
    from: Var,
    to: Var,
}

impl Mutator for Rename {
    fn mutate_var(&mut self, v: &Var) -> Var {
        if *v == self.from {
            self.to.clone()
        } else {
            v.clone()
        }
    }
}
