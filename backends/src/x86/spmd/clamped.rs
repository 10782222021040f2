//! Gathers whose indices are clamped (`min`/`max`): edge-replicating stencils such as a
//! blur's `src[yy * w + min(max(x as i32 + dx, 0), w as i32 - 1) as u32]`. Away from the
//! edges the clamp is the identity for the whole batch and the lanes' indices are
//! consecutive; only the batches at an edge need the gather. Which case a batch is in is
//! known only when it runs, so the test is made there, on the indices themselves: lane k's
//! index equal to lane 0's plus k in every lane makes the gather one masked vector load.
//! The test does not depend on the form of the index beyond the clamp that makes it
//! worth trying (a `min`/`max` of integers of consecutive lane values, `x + dx`, in the
//! index or a `let` it reads), so any bounds, uniform or not, and any base around the
//! clamp (`yy * w + ...`) are covered.

use iced_x86::code_asm::*;
use kiln_ir::{BinOp, Expr, ExprNode, Intrinsic, Scalar};

use super::{Kind, R, V, XMM, YMM};

impl V {
    /// Whether a gather's index contains a clamp of consecutive lane values (`min`/`max` of
    /// integers, one argument consecutive or itself such a clamp), inline or in a divergent
    /// `let` it reads: where the clamp is the identity for a batch, its indices may well
    /// be consecutive though their form does not show it. (Clamps of other values, a
    /// tile's `min(m0 + (lid >> 2), 299)`, never give consecutive lanes: no test for them.)
    pub(super) fn clamped(&self, index: &Expr) -> bool {
        if self.clamp_of_consecutive(index) {
            return true;
        }
        match index.node() {
            ExprNode::Intrinsic { args, .. } => args.iter().any(|a| self.clamped(a)),
            ExprNode::Binary { a, b, .. } => self.clamped(a) || self.clamped(b),
            ExprNode::Unary { a, .. } | ExprNode::Cast { a, .. } => self.clamped(a),
            ExprNode::Var(v) => self.find(v.name()).is_some_and(|b| b.clamped),
            _ => false,
        }
    }

    /// `min`/`max` of integers with an argument whose lanes are consecutive or that is
    /// such a clamp (through casts).
    fn clamp_of_consecutive(&self, e: &Expr) -> bool {
        match e.node() {
            ExprNode::Intrinsic { op: Intrinsic::Min | Intrinsic::Max, args }
                if args.iter().all(|a| a.ty().scalar().is_some_and(|s| s.is_int())) =>
            {
                args.iter().any(|a| self.consecutive(a) || self.clamp_of_consecutive(a))
            }
            ExprNode::Cast { a, .. } => self.clamp_of_consecutive(a),
            _ => false,
        }
    }

    /// Whether lane k's value is lane 0's plus k: a contiguous form ([`Kind`]), also through
    /// casts between 32-bit integers and plus or minus a uniform value (`x as i32 + dx`).
    fn consecutive(&self, e: &Expr) -> bool {
        let int32 = |e: &Expr| matches!(e.ty().scalar(), Some(Scalar::I32 | Scalar::U32));
        if matches!(self.kind(e), Kind::Gid0 | Kind::Contig) {
            return true;
        }
        match e.node() {
            ExprNode::Cast { a, .. } => int32(e) && int32(a) && self.consecutive(a),
            ExprNode::Binary { op: BinOp::Add, a, b } => {
                (self.consecutive(a) && self.kind(b) == Kind::Uniform)
                    || (self.kind(a) == Kind::Uniform && self.consecutive(b))
            }
            ExprNode::Binary { op: BinOp::Sub, a, b } => {
                self.consecutive(a) && self.kind(b) == Kind::Uniform
            }
            _ => false,
        }
    }

    /// Before a gather of f32/i32 elements of the table at `base` with indices in
    /// `ymm{d}` (already checked: every active lane's in bounds) under the mask in
    /// `ymm{d+1}`: where lane k's index is lane 0's plus k in all eight lanes, the masked
    /// vector load at lane 0's index into `ymm{d}` and a jump to `done`; otherwise on to
    /// the gather (`ymm{d+2}` clobbered).
    ///
    /// Why the load is the gather's result: active lanes read the same elements (same
    /// indices), inactive ones are zero in both (the gather's destination is zeroed, and a
    /// masked load gives zeros and never faults where the mask is clear). The address: an
    /// active lane k's index i_k is in bounds, below 2^31, and lane 0's is i_k - k as the
    /// lanes compute it (wrapping); sign-extended that is exactly i_k - k (at least -7, no
    /// wrap in 64 bits), so lane k's address is base + 4 * i_k even where lane 0 is
    /// inactive and its own index out of bounds.
    pub(super) fn consecutive_load(
        &mut self,
        base: AsmRegister64,
        d: usize,
        done: CodeLabel,
    ) -> R<()> {
        let (x, m, t) = (YMM[d], YMM[d + 1], YMM[d + 2]);
        let mut gather = self.a.create_label();
        self.a.vpbroadcastd(t, XMM[d])?;
        self.a.vpaddd(t, t, ymmword_ptr(r15))?;
        self.a.vpcmpeqd(t, t, x)?;
        self.a.vmovmskps(eax, t)?;
        self.a.cmp(eax, 0xff)?;
        self.a.jne(gather)?;
        self.a.vmovd(eax, XMM[d])?;
        self.a.movsxd(rax, eax)?;
        self.a.vmaskmovps(x, m, ymmword_ptr(base + rax * 4))?;
        self.a.jmp(done)?;
        self.bind(&mut gather)?;
        Ok(())
    }
}
