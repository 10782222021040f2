//! `let`s fixed for a call that can fault, computed by the first batch that reaches them and
//! reused by the others: batch-norm's `let s = gamma[q % c] / sqrt(variance[q % c] + eps)`
//! under `if p < hw && q < planes`, whose row (`q = global_id(1)`) is the call's. The
//! values `hoist.rs` and `function.rs` compute before the loop cannot fault; these can (a
//! load, a division by a parameter), so computing them before the loop would report a
//! fault no work-item makes (the guard may be false in every lane). Instead each has a flag
//! and a value slot in the vector frame: the flag is cleared where the call's fixed values
//! are computed (once per call, and again for each row the call runs), and the `let`
//! tests it: set, the value is loaded; clear, it is computed as any `let` is (its faults
//! reported as they always are), and, where some lane is active, that lane's value goes to
//! the slot, broadcast, and the flag is set.
//!
//! Exactness. The value is made of constants, scalar parameters, ids and sizes other than
//! those of dimension 0, `let`s of those declared once, integer `/` and `%`, and loads of
//! buffer parameters at such indices (not `global_id(0)`-dependent, not local or private
//! memory), so every work-item of the call that reaches it computes it from the same
//! operands. A fault depends on the operands only (an index and a buffer's length, a
//! divisor): the first computation did not fault, so no later one would. A load could read
//! another value only if the element changed in between, and a store to it between two
//! work-items' reads (by either, or by a third) is a race, whose result is undefined. A
//! work-item that reads twice could see its own store in between: so a value with a load
//! is taken only outside loops, where each work-item computes it once. Lanes off the mask
//! compute a `let` too (loads masked); the slot takes an active lane's value, and a batch
//! with no active lane there sets no flag. Kernels with barriers (names in the frame, code
//! resumed per batch) are left as they are.

use std::collections::HashSet;

use iced_x86::code_asm::*;
use kiln_ir::{
    walk_expr, AddrSpace, BinOp, Builtin, Expr, ExprNode, Kernel, Scalar, Stmt, StmtNode, Type,
    Var, Visitor,
};

use super::expr::desugar;
use super::hoist::decl_counts;
use super::{scalar, uniform, Kind, R, V};

/// What a value reads, for [`plan`]'s test.
struct Scope<'a> {
    /// Names whose value is the same wherever the call reads them.
    fixed: HashSet<String>,
    /// Buffer parameters (global or constant memory), loadable here.
    bufs: &'a HashSet<String>,
}

impl Scope<'_> {
    /// True if `e` is the same for the whole call, loads allowed where `loads`.
    fn fixed(&self, e: &Expr, loads: bool) -> bool {
        if let Some(d) = desugar(e) {
            return self.fixed(&d, loads);
        }
        match e.node() {
            ExprNode::Imm(_) => true,
            ExprNode::Var(v) => self.fixed.contains(v.name()),
            ExprNode::Builtin { kind: Builtin::GlobalId | Builtin::LocalId, dim: 0 } => false,
            ExprNode::Builtin { kind: Builtin::GroupId, dim: 0 } => false,
            ExprNode::Builtin { .. } => true,
            ExprNode::Load { buf, index } => {
                loads && self.bufs.contains(buf.name()) && self.fixed(index, loads)
            }
            ExprNode::Binary { op, a, b } => {
                !op.is_comparison() && self.fixed(a, loads) && self.fixed(b, loads)
            }
            ExprNode::Unary { .. } | ExprNode::Cast { .. } | ExprNode::Intrinsic { .. }
                if e.ty() != Type::BOOL =>
            {
                uniform::operands(e).iter().all(|x| x.ty() != Type::BOOL && self.fixed(x, loads))
            }
            _ => false,
        }
    }
}

/// True if computing `e` costs more than the flag test and the load that replace it: a
/// division, `sqrt` or a transcendental, or two loads (one load at an index is about as
/// cheap as the test).
fn costly(e: &Expr) -> bool {
    struct Find {
        slow: bool,
        loads: usize,
    }
    impl Visitor for Find {
        fn visit_expr(&mut self, e: &Expr) {
            match e.node() {
                ExprNode::Load { .. } => self.loads += 1,
                ExprNode::Binary { op: BinOp::Div | BinOp::Rem, .. } => self.slow = true,
                ExprNode::Intrinsic { op, .. } => {
                    use kiln_ir::Intrinsic::{Cos, Exp, Log, Sin, Sqrt};
                    self.slow |= matches!(op, Sqrt | Exp | Log | Sin | Cos);
                }
                _ => {}
            }
            walk_expr(self, e)
        }
    }
    let mut f = Find { slow: false, loads: 0 };
    f.visit_expr(e);
    f.slow || f.loads >= 2
}

/// True for the types a memoized `let` may have (one 32-bit lane each).
fn memo_type(t: Type) -> bool {
    matches!(t, Type::Scalar(Scalar::F32 | Scalar::I32 | Scalar::U32))
}

/// The `let`s of `k` to compute once per call (statement addresses), in the order they are
/// declared. Only `let`s whose names are declared once are taken (and read): a name then
/// means one value wherever it is read.
pub(super) fn plan(k: &Kernel) -> Vec<usize> {
    let decls = decl_counts(k);
    let once = |n: &str| decls.get(n) == Some(&1);
    let bufs: HashSet<String> = k
        .params()
        .iter()
        .filter(|p| {
            matches!(p.ty().addr_space(), Some(AddrSpace::Global | AddrSpace::Constant))
                && once(p.name())
        })
        .map(|p| p.name().to_string())
        .collect();
    let fixed = k
        .params()
        .iter()
        .filter(|p| !p.ty().is_ptr() && once(p.name()))
        .map(|p| p.name().to_string())
        .collect();
    let mut scope = Scope { fixed, bufs: &bufs };
    let mut out = Vec::new();
    walk(k.body().stmts(), false, &once, &mut scope, &mut out);
    out
}

fn walk(
    stmts: &[Stmt],
    in_loop: bool,
    once: &dyn Fn(&str) -> bool,
    scope: &mut Scope,
    out: &mut Vec<usize>,
) {
    for s in stmts {
        match s.node() {
            StmtNode::Let { var, value }
                if once(var.name()) && !var.ty().is_vector() && scope.fixed(value, !in_loop) =>
            {
                scope.fixed.insert(var.name().to_string());
                if memo_type(var.ty()) && costly(value) {
                    out.push(s.addr());
                }
            }
            StmtNode::If { then, otherwise, .. } => {
                walk(then.stmts(), in_loop, once, scope, out);
                if let Some(o) = otherwise {
                    walk(o.stmts(), in_loop, once, scope, out);
                }
            }
            StmtNode::For { body, .. } | StmtNode::While { body, .. } => {
                walk(body.stmts(), true, once, scope, out)
            }
            StmtNode::Block(v) => walk(v, in_loop, once, scope, out),
            _ => {}
        }
    }
}

impl V {
    /// In the code run once per call (and per row): a flag and a value slot for each `let`
    /// of [`plan`] not hoisted already, the flag cleared.
    pub(super) fn memo_flags(&mut self, k: &Kernel) -> R<()> {
        for addr in plan(k) {
            if self.hoisted.iter().any(|h| h.0 == addr) {
                continue;
            }
            let (flag, slot) = (self.slot(), self.slot());
            self.a.mov(dword_ptr(r15 + flag), 0)?;
            self.memos.insert(addr, (flag, slot));
        }
        Ok(())
    }

    /// The `let` at `addr` if [`V::memo_flags`] gave it a slot: bound from the slot where a
    /// batch of the call computed it, else computed (and kept where a lane is active).
    /// `false`: not such a `let`, no code.
    pub(super) fn memo_let(&mut self, addr: usize, var: &Var, value: &Expr) -> R<bool> {
        let Some(&(flag, slot)) = self.memos.get(&addr) else { return Ok(false) };
        let kind = self.kind(value);
        if kind == Kind::Uniform && scalar::int_type(var.ty()) && self.gpr_ok(value) {
            return Ok(false);
        }
        let mut compute = self.a.create_label();
        let mut done = self.a.create_label();
        self.a.cmp(dword_ptr(r15 + flag), 0)?;
        self.a.je(compute)?;
        self.a.vmovups(ymm0, ymmword_ptr(r15 + slot))?;
        self.a.jmp(done)?;
        self.bind(&mut compute)?;
        self.expr_top(value, 0)?;
        self.active(1)?;
        self.a.vmovmskps(eax, ymm1)?;
        self.a.test(eax, eax)?;
        self.a.je(done)?;
        self.a.bsf(eax, eax)?;
        self.a.vmovups(ymmword_ptr(r15 + slot), ymm0)?;
        self.a.mov(r10d, dword_ptr(r15 + slot + rax * 4))?;
        self.a.vmovd(xmm1, r10d)?;
        self.a.vpbroadcastd(ymm1, xmm1)?;
        self.a.vmovups(ymmword_ptr(r15 + slot), ymm1)?;
        self.a.mov(dword_ptr(r15 + flag), 1)?;
        self.bind(&mut done)?;
        self.bind_ymm0(var.name().to_string(), value, kind, None)?;
        Ok(true)
    }
}

/// The statements' addresses [`plan`] takes, for the tests.
#[cfg(test)]
fn planned(src: &str) -> Vec<String> {
    use std::collections::HashMap;
    let m = kiln_ir::parse_module(src).expect("parses");
    let k = &m.kernels[0];
    let addrs: HashMap<usize, String> = {
        fn names(stmts: &[Stmt], out: &mut HashMap<usize, String>) {
            for s in stmts {
                match s.node() {
                    StmtNode::Let { var, .. } => {
                        out.insert(s.addr(), var.name().to_string());
                    }
                    StmtNode::If { then, otherwise, .. } => {
                        names(then.stmts(), out);
                        if let Some(o) = otherwise {
                            names(o.stmts(), out);
                        }
                    }
                    StmtNode::For { body, .. } | StmtNode::While { body, .. } => {
                        names(body.stmts(), out)
                    }
                    StmtNode::Block(v) => names(v, out),
                    _ => {}
                }
            }
        }
        let mut out = HashMap::new();
        names(k.body().stmts(), &mut out);
        out
    };
    plan(k).iter().map(|a| addrs[a].clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::planned;

    #[test]
    fn fixed_lets_with_loads_and_divisions_outside_loops() {
        let src = "kernel k(x: ptr<global, f32>, y: ptr<global, f32>, g: ptr<global, f32>, c: u32, n: u32) {
            let p: u32 = global_id(0);
            let q: u32 = global_id(1);
            if p < n {
              let ch: u32 = q % c;
              let s: f32 = g[ch] / sqrt(g[ch + 1]);
              let t: f32 = x[p] * s;
              for j: u32 in 0 .. 4 {
                let u: f32 = g[j];
                let w: u32 = q / c;
                y[p + j] = t + u + w as f32;
              }
              y[p] = t;
            }
          }";
        // `t` reads the work-item's own element, `u` the loop counter; `w` divides in a
        // loop (no load: computed in every iteration alike).
        assert_eq!(planned(src), ["ch", "s", "w"]);
    }

    #[test]
    fn shadowed_and_private_names_are_not_taken() {
        let src = "kernel k(x: ptr<global, f32>, n: u32) {
            private a: f32[4];
            let q: u32 = global_id(1);
            a[0] = 1.0;
            if q < n {
              let v: f32 = a[0];
              let r: u32 = q % n;
              x[r] = v;
            } else {
              let r: u32 = q / n;
              x[r] = 0.0;
            }
          }";
        assert!(planned(src).is_empty());
    }
}
