//! Atomics on the lanes: the indices and operands are computed and checked in lanes, then
//! each active lane performs its operation in lane order, a scalar instruction, `lock`ed
//! on buffers (other threads may run other groups on the same buffer), not on local
//! arrays (one thread runs a group).
//!
//! Within a batch the lanes run one statement after another, so a work-item's second
//! atomic comes after every lane's first, where the interpreter runs each work-item's
//! atomics before the next work-item's. The outcome is the interpreter's when the order
//! cannot show: [`batch_order_problem`] accepts a kernel whose atomics on each memory
//! (every local array apart; all buffer parameters together, as they may alias) either
//! all discard their result and are integer operations of one commutative kind (`add` and
//! `sub`, or only `and`, `or`, `xor`, `min` or `max`, on one element type), or are a
//! single atomic statement outside every loop (run at most once per work-item, so in
//! work-item order). Atomics whose indices differ modulo a power of two (`m[2 * b]` and
//! `m[2 * b + 1]`: per-bin minima and maxima interleaved) never touch the same element, so
//! the rule applies to each set of those that may (where every atomic on the buffers has
//! one element type, so that equal indices are the same memory whatever parameters alias).
//! Other kernels run on the scalar code.

use std::collections::{BTreeMap, HashMap};

use iced_x86::code_asm::*;
use kiln_ir::{
    AtomicOp, BinOp, Expr, ExprNode, FuncKind, Imm, Kernel, Scalar, Stmt, StmtNode, Type, Var,
};

use super::{no, Bound, Kind, Loc, R, V};
use crate::x86::rt;

/// One atomic statement, as the ordering rule sees it.
struct Use {
    op: AtomicOp,
    elem: Option<Scalar>,
    result: bool,
    in_loop: bool,
    index: Option<Expr>,
}

/// Why the atomics of `k` would not give the interpreter's outcome in batch order (see the
/// module docs), or `None` if they do.
pub(super) fn batch_order_problem(k: &Kernel) -> Option<String> {
    // Ordered, so the reason names the same memory on every run (buffers first).
    let mut uses: BTreeMap<Option<String>, Vec<Use>> = BTreeMap::new();
    let locals: Vec<String> = local_arrays(k.body().stmts());
    collect(k.body().stmts(), false, &locals, &mut uses);
    let lets = super::hoist::once_lets(k, &super::hoist::decl_counts(k));
    for (mem, us) in &uses {
        let first = &us[0];
        let one_type = us.iter().all(|u| u.elem.is_some() && u.elem == first.elem);
        let classes: Vec<Vec<&Use>> =
            if one_type { disjoint_classes(us, &lets) } else { vec![us.iter().collect()] };
        if !classes.iter().all(|c| in_order(c)) {
            let what = match mem {
                Some(name) => format!("local array `{name}`"),
                None => "buffer parameters".to_string(),
            };
            return Some(format!(
                "atomics on {what} whose order between work-items would show (results used, \
                 several kinds, floats, or in a loop)"
            ));
        }
    }
    None
}

/// Whether the atomics `us` (which may touch the same elements) give the interpreter's
/// outcome in batch order: one commutative kind whose results are unused, or one statement
/// outside loops.
fn in_order(us: &[&Use]) -> bool {
    let group = |u: &Use| match u.op {
        AtomicOp::Add | AtomicOp::Sub => Some(0),
        AtomicOp::And => Some(1),
        AtomicOp::Or => Some(2),
        AtomicOp::Xor => Some(3),
        AtomicOp::Min => Some(4),
        AtomicOp::Max => Some(5),
        AtomicOp::Xchg | AtomicOp::CmpXchg => None,
    };
    let first = us[0];
    let commutative = us.iter().all(|u| {
        !u.result
            && u.elem.is_some_and(Scalar::is_int)
            && u.elem == first.elem
            && group(u).is_some()
            && group(u) == group(first)
    });
    commutative || us.len() == 1 && !first.in_loop
}

/// The atomics `us` split into classes that may touch the same elements: two whose indices
/// differ modulo a power of two dividing both their strides never do (u32 arithmetic wraps
/// modulo 2^32, which such a modulus divides, so the residue is the element's).
fn disjoint_classes<'u>(us: &'u [Use], lets: &HashMap<String, Expr>) -> Vec<Vec<&'u Use>> {
    let res: Vec<(u32, u32)> =
        us.iter().map(|u| u.index.as_ref().map_or((1, 0), |e| residue(e, lets, 0))).collect();
    // Union-find over the pairs that may meet.
    let mut parent: Vec<usize> = (0..us.len()).collect();
    fn root(p: &mut [usize], mut i: usize) -> usize {
        while p[i] != i {
            i = p[i];
        }
        i
    }
    for i in 0..us.len() {
        for j in 0..i {
            let m = res[i].0.min(res[j].0);
            if res[i].1 % m == res[j].1 % m {
                let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                parent[a] = b;
            }
        }
    }
    let mut classes: BTreeMap<usize, Vec<&Use>> = BTreeMap::new();
    for (i, u) in us.iter().enumerate() {
        let r = root(&mut parent, i);
        classes.entry(r).or_default().push(u);
    }
    classes.into_values().collect()
}

/// `e`'s value modulo a power of two, as `(modulus, residue)` (`(1, 0)`: nothing known),
/// through `let`s declared once.
fn residue(e: &Expr, lets: &HashMap<String, Expr>, depth: u32) -> (u32, u32) {
    const UNKNOWN: (u32, u32) = (1, 0);
    if depth > 16 || !matches!(e.ty(), Type::Scalar(Scalar::U32 | Scalar::I32)) {
        return UNKNOWN;
    }
    let konst = |x: &Expr| match x.node() {
        ExprNode::Imm(Imm::Int(_, bits)) => Some(*bits as u32),
        _ => None,
    };
    // The largest power of two dividing `c` (2^31 for 0: any residue class holds it).
    let pow2 = |c: u32| if c == 0 { 1 << 31 } else { 1 << c.trailing_zeros() };
    let r = |x: &Expr| residue(x, lets, depth + 1);
    let add = |(m, a): (u32, u32), (n, b): (u32, u32), neg: bool| {
        let m = m.min(n);
        let sum = if neg { a.wrapping_sub(b) } else { a.wrapping_add(b) };
        (m, sum & (m - 1))
    };
    match e.node() {
        ExprNode::Imm(Imm::Int(_, bits)) => (1 << 31, (*bits as u32) & ((1 << 31) - 1)),
        ExprNode::Var(v) => lets.get(v.name()).map_or(UNKNOWN, &r),
        ExprNode::Binary { op: BinOp::Add, a, b } => add(r(a), r(b), false),
        ExprNode::Binary { op: BinOp::Sub, a, b } => add(r(a), r(b), true),
        ExprNode::Binary { op: BinOp::Mul, a, b } => match (konst(a), konst(b)) {
            (_, Some(c)) | (Some(c), _) => {
                let x = if konst(b).is_some() { a } else { b };
                let (m, res) = r(x);
                // (x mod m) * c modulo m * pow2(c), capped at 2^31.
                let m2 = (m as u64 * pow2(c) as u64).min(1 << 31) as u32;
                (m2, res.wrapping_mul(c) & (m2 - 1))
            }
            _ => UNKNOWN,
        },
        ExprNode::Binary { op: BinOp::Shl, a, b } => match konst(b) {
            Some(s) => {
                let c = 1u32 << (s & 31);
                let (m, res) = r(a);
                let m2 = (m as u64 * c as u64).min(1 << 31) as u32;
                (m2, res.wrapping_mul(c) & (m2 - 1))
            }
            None => UNKNOWN,
        },
        // `x | k` with `x` a multiple of a power of two above `k` is `x + k`.
        ExprNode::Binary { op: BinOp::Or, a, b } => {
            let (x, k) = match (konst(a), konst(b)) {
                (_, Some(k)) => (a, k),
                (Some(k), _) => (b, k),
                _ => return UNKNOWN,
            };
            let (m, res) = r(x);
            if res == 0 && k < m {
                (m, k)
            } else {
                UNKNOWN
            }
        }
        _ => UNKNOWN,
    }
}

fn local_arrays(stmts: &[Stmt]) -> Vec<String> {
    let mut out = Vec::new();
    for s in stmts {
        if let StmtNode::Alloc { var, .. } = s.node() {
            out.push(var.name().to_string());
        }
    }
    out
}

/// The atomics of `stmts` by memory: `Some(name)` for a local array, `None` for the rest.
fn collect(
    stmts: &[Stmt],
    in_loop: bool,
    locals: &[String],
    uses: &mut BTreeMap<Option<String>, Vec<Use>>,
) {
    for s in stmts {
        match s.node() {
            StmtNode::Call { result, func, args } => {
                if let FuncKind::Atomic(op) = func.kind() {
                    let buf = args.first().and_then(Expr::as_var).map(|v| v.name().to_string());
                    let mem = buf.filter(|b| locals.contains(b));
                    let elem = args.last().and_then(|v| v.ty().scalar());
                    let index = args.get(1).cloned();
                    let u = Use { op, elem, result: result.is_some(), in_loop, index };
                    uses.entry(mem).or_default().push(u);
                }
            }
            StmtNode::If { then, otherwise, .. } => {
                collect(then.stmts(), in_loop, locals, uses);
                if let Some(o) = otherwise {
                    collect(o.stmts(), in_loop, locals, uses);
                }
            }
            StmtNode::For { body, .. } | StmtNode::While { body, .. } => {
                collect(body.stmts(), true, locals, uses)
            }
            StmtNode::Block(v) => collect(v, in_loop, locals, uses),
            _ => {}
        }
    }
}

impl V {
    /// `atomic_<op>(buf, index, [cmp,] value)` in the active lanes, in lane order; the old
    /// values become `result`'s lanes.
    pub(super) fn atomic(&mut self, op: AtomicOp, result: Option<&Var>, args: &[Expr]) -> R<()> {
        if let Some(why) = &self.atomic_problem {
            return no(why.clone());
        }
        let (Some(buf), Some(value)) = (args.first().and_then(Expr::as_var), args.last()) else {
            return no(format!("`{}` without its operands", op.name()));
        };
        let elem = value.ty();
        let t = self.buf_of(buf, elem)?;
        let index = &args[1];
        let signed = match index.ty() {
            Type::Scalar(Scalar::I32) => true,
            Type::Scalar(Scalar::U32) => false,
            t => return no(format!("an index of type {t}")),
        };
        let (o_idx, o_cmp, o_val) = (self.slot(), self.slot(), self.slot());
        let (o_mask, o_res) = (self.slot(), self.slot());
        // The operands in the interpreter's order (index, compared value, value), then the
        // bounds check.
        let mut operands = vec![(index, o_idx)];
        if op == AtomicOp::CmpXchg {
            operands.push((&args[2], o_cmp));
        }
        operands.push((value, o_val));
        // A constant value, when the lanes take it as an immediate, has no slot to fill
        // (nor effects).
        let imm = match value.node() {
            kiln_ir::ExprNode::Imm(kiln_ir::Imm::Int(_, bits))
                if matches!(op, AtomicOp::Add | AtomicOp::Sub)
                    && result.is_none()
                    && matches!(elem, Type::I32 | Type::U32) =>
            {
                Some(*bits as u32 as i32)
            }
            _ => None,
        };
        let vector = matches!(self.kind(index), Kind::Gid0 | Kind::Contig)
            && result.is_none()
            && matches!(elem, Type::I32 | Type::U32)
            && !matches!(op, AtomicOp::Xchg | AtomicOp::CmpXchg);
        let shared = self.mems.get(self.mem_of(t) as usize).is_none_or(|m| m.local.is_none());
        // Proven in bounds at `local_id(0)` plus a group value (pure arithmetic, no load
        // and no fault: its evaluation may come after the value's), no control mask, every
        // lane alive: one vector read-modify-write with the value in a register and lane
        // 0's index in `rax`.
        let mut value_done = false;
        if vector && self.mask.is_none() && self.proven_certain(index, t) {
            let fresh = self.fresh();
            self.expr_top(value, 0)?;
            if fresh && self.fresh() {
                return self.atomic_proven(
                    op,
                    elem == Type::I32,
                    t,
                    index,
                    [o_idx, o_val, o_mask],
                    shared,
                );
            }
            self.a.vmovups(ymmword_ptr(r15 + o_val), ymm0)?;
            value_done = true;
        }
        // The index computed last (the value an immediate): still in `ymm0` below.
        let index_last = imm.is_some() && !vector;
        // A counting program's counts at unchecked indices with every lane active take
        // their indices from registers (the lanes below extract them), where the slot's
        // store and its load back would only lengthen the batch's chain; indices of loads
        // at `global_id(0)` through operations with constants are computed by each lane
        // (`counted.rs`), not in a vector. (Nothing the lanes load is counted into: the
        // counted buffer is no other parameter's.)
        let in_reg = index_last
            && self.counting()
            && self.mask.is_none()
            && self.fresh()
            && !self.needs_check(index, t);
        let lane_index = (in_reg && self.lane_form(index)).then(|| index.clone());
        for (e, off) in operands {
            if off == o_val && (imm.is_some() && !vector || value_done) {
                continue;
            }
            if off == o_idx && lane_index.is_some() {
                continue;
            }
            self.expr_top(e, 0)?;
            if !(index_last && off == o_idx) {
                self.a.vmovups(ymmword_ptr(r15 + off), ymm0)?;
            }
        }
        if let Some(e) = &lane_index {
            self.prefetch_lanes(e)?;
        }
        let checked = self.needs_check(index, t);
        // (The index's evaluation, with no check in it, cannot have made `fresh` false.)
        let index_reg = in_reg && self.fresh();
        if index_last && !index_reg {
            self.a.vmovups(ymmword_ptr(r15 + o_idx), ymm0)?;
        }
        if checked {
            self.a.vmovups(ymm1, ymmword_ptr(r15 + o_idx))?;
        }
        // Every lane active, nothing to check: no mask (the lanes, `lock`ed or not, run
        // without testing it).
        let unmasked = !checked && self.mask.is_none() && self.fresh();
        if !unmasked {
            self.active(2)?;
            self.check(index, 1, 2, 3, t, op.name(), signed)?;
            self.a.vmovups(ymmword_ptr(r15 + o_mask), ymm2)?;
        }
        let base = self.base(t)?;
        let lanes = Lanes {
            op,
            float: elem == Type::F32,
            signed: elem == Type::I32,
            base,
            o: [o_idx, o_cmp, o_val, o_mask, o_res],
            result: result.is_some(),
            imm,
            index_reg,
            lane_index,
        };
        // Eight distinct elements side by side (a contiguous index), every lane active, an
        // integer operation whose result no one reads (`vector`): one vector
        // read-modify-write, where only this thread touches the memory (no order between
        // the lanes can show).
        let mut done = self.a.create_label();
        let mut per_lane = self.a.create_label();
        // Every lane active: no control mask, and no lane can have faulted yet (the check
        // above, if any, would have made this false).
        let all = self.mask.is_none() && self.fresh();
        if vector {
            if !all {
                self.a.vmovmskps(eax, ymm2)?;
                self.a.cmp(eax, 0xff)?;
                self.a.jne(per_lane)?;
            }
            if shared {
                self.a.test(byte_ptr(r12 + rt::OFF_ALONE), 1)?;
                self.a.je(per_lane)?;
            }
            // Every lane in bounds (checked above, lengths below 2^31): lane 0's index is
            // the first of eight in-bounds elements.
            self.a.movsxd(r10, dword_ptr(r15 + o_idx))?;
            let at = ymmword_ptr(base + r10 * 4);
            let val = ymmword_ptr(r15 + o_val);
            self.a.vmovdqu(ymm0, at)?;
            let a = &mut self.a;
            match (op, elem == Type::I32) {
                (AtomicOp::Add, _) => a.vpaddd(ymm0, ymm0, val)?,
                (AtomicOp::Sub, _) => a.vpsubd(ymm0, ymm0, val)?,
                (AtomicOp::And, _) => a.vpand(ymm0, ymm0, val)?,
                (AtomicOp::Or, _) => a.vpor(ymm0, ymm0, val)?,
                (AtomicOp::Xor, _) => a.vpxor(ymm0, ymm0, val)?,
                (AtomicOp::Min, true) => a.vpminsd(ymm0, ymm0, val)?,
                (AtomicOp::Min, false) => a.vpminud(ymm0, ymm0, val)?,
                (AtomicOp::Max, true) => a.vpmaxsd(ymm0, ymm0, val)?,
                _ => a.vpmaxud(ymm0, ymm0, val)?,
            }
            a.vmovdqu(at, ymm0)?;
            a.jmp(done)?;
            self.bind(&mut per_lane)?;
        }
        if shared {
            // Buffers are `lock`ed unless this thread runs the whole launch (then nothing
            // else touches them until it returns): two copies of the lanes, one test.
            let (mut locked, mut done) = (self.a.create_label(), self.a.create_label());
            self.a.test(byte_ptr(r12 + rt::OFF_ALONE), 1)?;
            self.a.je(locked)?;
            self.plain_lanes(&lanes, all)?;
            self.a.jmp(done)?;
            self.bind(&mut locked)?;
            self.atomic_lanes(&lanes, true, all)?;
            self.bind(&mut done)?;
        } else {
            // One thread runs a group: its local arrays are this thread's alone.
            self.plain_lanes(&lanes, all)?;
        }
        if vector {
            self.bind(&mut done)?;
        }
        if let Some(r) = result {
            let name = r.name().to_string();
            let loc = Loc::Slot(o_res);
            self.lets.push(Bound::new(name, loc, Kind::Div));
        }
        Ok(())
    }
}

impl V {
    /// [`V::atomic`] of eight contiguous elements proven in bounds, every lane alive, the
    /// value in `ymm0`, no result: one vector read-modify-write where only this thread
    /// touches the memory (a local array, or a buffer when it runs the whole launch), else
    /// the eight lanes' `lock`ed operations in lane order (slots `o`: index, value, mask).
    fn atomic_proven(
        &mut self,
        op: AtomicOp,
        signed: bool,
        t: u32,
        index: &Expr,
        o: [i32; 3],
        shared: bool,
    ) -> R<()> {
        let [o_idx, o_val, o_mask] = o;
        if !self.lane0_to_eax(index, t)? {
            self.expr_top(index, 1)?;
            self.a.vmovd(eax, xmm1)?;
        }
        let base = self.base(t)?;
        let (mut locked, mut done) = (self.a.create_label(), self.a.create_label());
        if shared {
            self.a.test(byte_ptr(r12 + rt::OFF_ALONE), 1)?;
            self.a.je(locked)?;
        }
        // (Every lane's index is in bounds, below 2^31: `rax` is lane 0's, zero-extended.)
        let at = ymmword_ptr(base + rax * 4);
        let a = &mut self.a;
        a.vmovdqu(ymm1, at)?;
        match (op, signed) {
            (AtomicOp::Add, _) => a.vpaddd(ymm1, ymm1, ymm0)?,
            (AtomicOp::Sub, _) => a.vpsubd(ymm1, ymm1, ymm0)?,
            (AtomicOp::And, _) => a.vpand(ymm1, ymm1, ymm0)?,
            (AtomicOp::Or, _) => a.vpor(ymm1, ymm1, ymm0)?,
            (AtomicOp::Xor, _) => a.vpxor(ymm1, ymm1, ymm0)?,
            (AtomicOp::Min, true) => a.vpminsd(ymm1, ymm1, ymm0)?,
            (AtomicOp::Min, false) => a.vpminud(ymm1, ymm1, ymm0)?,
            (AtomicOp::Max, true) => a.vpmaxsd(ymm1, ymm1, ymm0)?,
            _ => a.vpmaxud(ymm1, ymm1, ymm0)?,
        }
        a.vmovdqu(at, ymm1)?;
        if shared {
            a.jmp(done)?;
            self.bind(&mut locked)?;
            self.a.vmovups(ymmword_ptr(r15 + o_val), ymm0)?;
            self.expr_top(index, 1)?;
            self.a.vmovups(ymmword_ptr(r15 + o_idx), ymm1)?;
            let ones = self.imm_slot(u32::MAX);
            self.a.vmovups(ymm2, ymmword_ptr(r15 + ones))?;
            self.a.vmovups(ymmword_ptr(r15 + o_mask), ymm2)?;
            let lanes = Lanes {
                op,
                float: false,
                signed,
                base,
                o: [o_idx, o_idx, o_val, o_mask, o_idx],
                result: false,
                imm: None,
                index_reg: false,
                lane_index: None,
            };
            self.atomic_lanes(&lanes, true, true)?;
            self.bind(&mut done)?;
        }
        Ok(())
    }
}

/// What the lanes of one atomic statement need: the operation, its element type, the base
/// register of its memory and the slots of (index, compared value, value, mask, result).
struct Lanes {
    op: AtomicOp,
    float: bool,
    signed: bool,
    base: AsmRegister64,
    o: [i32; 5],
    result: bool,
    /// The value when it is a constant (`atomic_add(bins, b, 1)`): an immediate operand.
    imm: Option<i32>,
    /// The indices are in `ymm0`, not in their slot (every lane active, see
    /// [`V::atomic`]).
    index_reg: bool,
    /// The index, computed by each lane ([`V::lane_index`]) instead (with `index_reg`).
    lane_index: Option<Expr>,
}

impl V {
    /// The lanes' operations unlocked (see [`V::atomic_lanes`]), the active lanes in
    /// `ymm2`: without a test per lane when all eight are active (known to be with `all`).
    fn plain_lanes(&mut self, x: &Lanes, all: bool) -> R<()> {
        if all {
            return self.atomic_lanes(x, false, true);
        }
        let (mut some, mut done) = (self.a.create_label(), self.a.create_label());
        self.a.vmovmskps(eax, ymm2)?;
        self.a.cmp(eax, 0xff)?;
        self.a.jne(some)?;
        self.atomic_lanes(x, false, true)?;
        self.a.jmp(done)?;
        self.bind(&mut some)?;
        self.atomic_lanes(x, false, false)?;
        self.bind(&mut done)
    }

    /// Each active lane's operation, in lane order (with `full`, all eight): `lock`ed read-modify-writes with
    /// `locked`, else plain ones (same values, as only this thread touches the memory).
    fn atomic_lanes(&mut self, x: &Lanes, locked: bool, full: bool) -> R<()> {
        let [o_idx, o_cmp, o_val, o_mask, o_res] = x.o;
        let op = x.op;
        // Eight integer additions whose results no one reads (a histogram's counts): the
        // indices from registers. Read back one by one from the slot just stored, each
        // load waits for the 32-byte store (a store forwards to a load of its own size).
        let extract = full && matches!(op, AtomicOp::Add | AtomicOp::Sub) && !x.float && !x.result;
        let (low, wide) = if x.index_reg { (xmm0, ymm0) } else { (xmm1, ymm1) };
        if x.index_reg && !(extract && full) {
            return no("internal: lane indices in a register without their extraction");
        }
        if extract && x.lane_index.is_none() {
            if !x.index_reg {
                self.a.vmovdqu(ymm1, ymmword_ptr(r15 + o_idx))?;
            }
            self.a.vextracti128(xmm2, wide, 1)?;
        }
        for lane in 0..8 {
            let l = 4 * lane;
            let v = dword_ptr(r15 + (o_val + l));
            let mut skip = self.a.create_label();
            if !full {
                self.a.test(byte_ptr(r15 + (o_mask + l + 3)), 0x80)?;
                self.a.je(skip)?;
            }
            // In bounds, so below 2^31: sign or zero extension alike.
            if let Some(e) = &x.lane_index {
                self.lane_index(e, lane)?;
            } else if extract {
                let (x, k) = if lane < 4 { (low, lane) } else { (xmm2, lane - 4) };
                match k {
                    0 => self.a.vmovd(r10d, x)?,
                    _ => self.a.vpextrd(r10d, x, k as u32)?,
                }
            } else {
                self.a.movsxd(r10, dword_ptr(r15 + (o_idx + l)))?;
            }
            let at = dword_ptr(x.base + r10 * 4);
            let a = &mut self.a;
            match op {
                AtomicOp::Add | AtomicOp::Sub if !x.float && !x.result => {
                    // The old value is not wanted: a memory-destination add or sub.
                    match (op == AtomicOp::Add, locked, x.imm) {
                        (true, true, Some(i)) => a.lock().add(at, i)?,
                        (true, false, Some(i)) => a.add(at, i)?,
                        (false, true, Some(i)) => a.lock().sub(at, i)?,
                        (false, false, Some(i)) => a.sub(at, i)?,
                        (add, locked, None) => {
                            a.mov(r11d, v)?;
                            match (add, locked) {
                                (true, true) => a.lock().add(at, r11d)?,
                                (true, false) => a.add(at, r11d)?,
                                (false, true) => a.lock().sub(at, r11d)?,
                                (false, false) => a.sub(at, r11d)?,
                            }
                        }
                    }
                }
                AtomicOp::Add | AtomicOp::Sub if !x.float => {
                    a.mov(r11d, v)?;
                    if op == AtomicOp::Sub {
                        a.neg(r11d)?;
                    }
                    if locked {
                        a.lock().xadd(at, r11d)?;
                    } else {
                        a.xadd(at, r11d)?;
                    }
                    a.mov(eax, r11d)?;
                }
                AtomicOp::Xchg if locked => {
                    // `xchg` with memory is always locked.
                    a.mov(eax, v)?;
                    a.xchg(at, eax)?;
                }
                AtomicOp::Xchg => {
                    a.mov(r11d, v)?;
                    a.mov(eax, at)?;
                    a.mov(at, r11d)?;
                }
                // Unlocked, the value to `r11d` in one load: a memory-destination
                // operation where the old value is not wanted, or the old value read
                // (into `eax`, the result), compared with it and the winner written back
                // (a load fewer than comparing and moving from the slot, and no copy of
                // the old value, which only a compare-and-swap retry needs). (The value
                // extracted from a register instead made some runs several times slower
                // on an AMD host, as did the indices: the slots stay.)
                AtomicOp::And | AtomicOp::Or | AtomicOp::Xor if !locked && !x.result => {
                    a.mov(r11d, v)?;
                    match op {
                        AtomicOp::And => a.and(at, r11d)?,
                        AtomicOp::Or => a.or(at, r11d)?,
                        _ => a.xor(at, r11d)?,
                    }
                }
                AtomicOp::Min | AtomicOp::Max if !locked && !x.float => {
                    a.mov(r11d, v)?;
                    a.mov(eax, at)?;
                    a.cmp(eax, r11d)?;
                    match (op == AtomicOp::Min, x.signed) {
                        (true, true) => a.cmovl(r11d, eax)?,
                        (true, false) => a.cmovb(r11d, eax)?,
                        (false, true) => a.cmovg(r11d, eax)?,
                        (false, false) => a.cmova(r11d, eax)?,
                    }
                    a.mov(at, r11d)?;
                }
                AtomicOp::CmpXchg => {
                    a.mov(eax, dword_ptr(r15 + (o_cmp + l)))?;
                    a.mov(r11d, v)?;
                    if locked {
                        a.lock().cmpxchg(at, r11d)?;
                    } else {
                        a.cmpxchg(at, r11d)?;
                    }
                }
                _ => {
                    // eax the old value, r11d the new one: a compare-and-swap loop when
                    // locked, a plain read-modify-write when not.
                    let mut retry = a.create_label();
                    a.mov(eax, at)?;
                    a.nop()?;
                    a.set_label(&mut retry)?;
                    a.mov(r11d, eax)?;
                    match op {
                        AtomicOp::And => a.and(r11d, v)?,
                        AtomicOp::Or => a.or(r11d, v)?,
                        AtomicOp::Xor => a.xor(r11d, v)?,
                        AtomicOp::Min | AtomicOp::Max => {
                            a.cmp(r11d, v)?;
                            match (op == AtomicOp::Min, x.signed) {
                                (true, true) => a.cmovg(r11d, v)?,
                                (true, false) => a.cmova(r11d, v)?,
                                (false, true) => a.cmovl(r11d, v)?,
                                (false, false) => a.cmovb(r11d, v)?,
                            }
                        }
                        _ => {
                            // f32 add (old + value, as the interpreter adds).
                            a.vmovd(xmm0, eax)?;
                            a.vaddss(xmm0, xmm0, v)?;
                            a.vmovd(r11d, xmm0)?;
                        }
                    }
                    if locked {
                        // A min, max, and or or that leaves the value as read needs no
                        // write: the read is the operation's point in the order of the
                        // element's atomics (it returns the same old value), and
                        // work-items on other threads contending for one element (per-bin
                        // extremes on every core) no longer take the line for nothing.
                        let mut same = a.create_label();
                        let idempotent = matches!(
                            op,
                            AtomicOp::Min | AtomicOp::Max | AtomicOp::And | AtomicOp::Or
                        );
                        if idempotent {
                            a.cmp(r11d, eax)?;
                            a.je(same)?;
                        }
                        a.lock().cmpxchg(at, r11d)?;
                        a.jne(retry)?;
                        if idempotent {
                            a.set_label(&mut same)?;
                            a.nop()?;
                        }
                    } else {
                        a.mov(at, r11d)?;
                    }
                }
            }
            if x.result {
                self.a.mov(dword_ptr(r15 + (o_res + l)), eax)?;
            }
            if !full {
                self.bind(&mut skip)?;
            }
        }
        Ok(())
    }
}
