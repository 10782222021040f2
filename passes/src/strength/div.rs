//! Division by constants without a divide, where the dividend's range is known.
//!
//! `ptxas` lowers `div`/`rem` by an immediate with its generic division sequence (about
//! twenty instructions; NVVM strength-reduces before PTX, kiln's backend does not), and other
//! targets pay a divide. A generated convolution takes its flat reduction index apart
//! (`ic = k / 9`, `kh = k / 3 % 3`, ...) for every element its tile copies, so those
//! sequences outnumbered its FMAs. Here an `i32` division `a / d` or `a % d` by a constant
//! `d > 1` whose dividend is provably in `0 ..= max` becomes `a >> s` / `a & (d - 1)` for a
//! power of two, else `(a * m) >> s` with `m = 2^s / d + 1` (rounded down), `s` the least
//! with `2^s > max * d`, when `max * m` fits in `i32` (then the quotient is exact for every
//! `a` in range: `a * m / 2^s = a / d + a * e / (d * 2^s)` with `e = m * d - 2^s <= d`, and
//! `a * e < 2^s`), and `a % d = a - (a / d) * d`. A dividend that may be negative (where
//! `/` rounds toward zero and a shift toward minus infinity) is left alone.
//!
//! The range comes from the kernel itself: constants, work-item ids (bounded by
//! `#reqd_work_group_size`, which every launch must match), `for` counters and `let`s,
//! through `+`, `*`, `/`, `%`, shifts, `&`, `min`, `max`, `select` and integer casts;
//! anything else (a subtraction, a load, a parameter, a mutable variable) has no range.
//! `#nd_range` is only the range a kernel is meant for (`kiln run --global` may launch it
//! with another), so the pass does not read it; [`lower_divisions_at_range`] does, for a
//! kernel that is never launched otherwise (the generator's, whose every index assumes it).

use hashbrown::HashMap;
use kiln_ir::{
    walk_expr, walk_mutate_expr, walk_mutate_stmt_changed, BinOp, Builtin, Expr, ExprNode,
    Intrinsic, Kernel, Mutator, Stmt, StmtNode, Type, Var, Visitor,
};

/// `k` with its `i32` divisions by constants of bounded non-negative dividends rewritten as
/// shifts, masks and multiplications (see the module docs); `k` itself when none is.
pub fn lower_divisions(k: &Kernel) -> Kernel {
    lower(k, false)
}

/// [`lower_divisions`], also bounding work-item and work-group ids by `k`'s `#nd_range`:
/// exact only for launches with that range, so only for kernels launched with nothing else.
pub fn lower_divisions_at_range(k: &Kernel) -> Kernel {
    lower(k, true)
}

fn lower(k: &Kernel, at_range: bool) -> Kernel {
    // Most kernels divide by no constant (a generated GEMM's divisions are lowered already):
    // one read-only look spares them the ranges of every `let`.
    let mut find = FindDivision(false);
    find.visit_kernel(k);
    if !find.0 {
        return k.clone();
    }
    let attrs = k.attrs();
    let nd = attrs.nd_range.as_ref().filter(|_| at_range);
    let local =
        attrs.reqd_work_group_size.map(|l| l.to_vec()).or_else(|| nd.and_then(|r| r.local.clone()));
    let groups = nd.and_then(|r| {
        let local = local.as_ref()?;
        Some(r.global.iter().zip(local).map(|(g, l)| g.div_ceil((*l).max(1))).collect())
    });
    let mut m = Lower { bounds: HashMap::new(), local, groups };
    m.mutate_kernel(k)
}

/// Whether an `i32` division or remainder by a constant occurs.
struct FindDivision(bool);

impl Visitor for FindDivision {
    fn visit_expr(&mut self, e: &Expr) {
        if self.0 || !has_division(e) {
            return;
        }
        if let ExprNode::Binary { op: BinOp::Div | BinOp::Rem, a, b } = e.node() {
            if a.ty() == Type::I32 && as_const(b).is_some() {
                self.0 = true;
                return;
            }
        }
        walk_expr(self, e)
    }
}

/// Whether `e` has a division or remainder anywhere (O(1)): only those are rewritten.
fn has_division(e: &Expr) -> bool {
    e.has_binary(BinOp::Div) || e.has_binary(BinOp::Rem)
}

/// The constant value of an integer immediate.
fn as_const(e: &Expr) -> Option<i64> {
    e.as_imm()?.as_i128().and_then(|v| i64::try_from(v).ok())
}

fn c(v: i64) -> Expr {
    Expr::int(kiln_ir::Scalar::I32, v as i128)
}

struct Lower {
    /// The largest value of each immutable `i32` binding known to be non-negative.
    bounds: HashMap<Var, i64>,
    /// The work-group size, per dimension, where the kernel fixes it.
    local: Option<Vec<u32>>,
    /// The number of work-groups, per dimension, where the kernel fixes it.
    groups: Option<Vec<u32>>,
}

impl Lower {
    /// The largest value of `e` when it is an integer provably in `0 ..= max`.
    fn bound(&self, e: &Expr) -> Option<i64> {
        let dim_max = |sizes: &Option<Vec<u32>>, dim: u8| {
            let n = *sizes.as_ref()?.get(dim as usize)? as i64;
            (n >= 1).then_some(n - 1)
        };
        let b = match e.node() {
            ExprNode::Imm(_) if e.ty().is_int() => as_const(e).filter(|&v| v >= 0),
            ExprNode::Var(v) => self.bounds.get(v).copied(),
            ExprNode::Builtin { kind: Builtin::LocalId, dim } => dim_max(&self.local, *dim),
            ExprNode::Builtin { kind: Builtin::GroupId, dim } => dim_max(&self.groups, *dim),
            ExprNode::Cast { to, a } if to.is_int() && a.ty().is_int() => self.bound(a),
            ExprNode::Binary { op, a, b } => {
                let (x, y) = (self.bound(a)?, self.bound(b)?);
                match op {
                    BinOp::Add => x.checked_add(y),
                    BinOp::Mul => x.checked_mul(y),
                    BinOp::Div if as_const(b).is_some_and(|d| d > 0) => Some(x / y),
                    BinOp::Rem if as_const(b).is_some_and(|d| d > 0) => Some(x.min(y - 1)),
                    BinOp::Shr if as_const(b).is_some_and(|s| s < 32) => Some(x >> y),
                    BinOp::And => Some(x.min(y)),
                    _ => None,
                }
            }
            ExprNode::Select { a, b, .. } => Some(self.bound(a)?.max(self.bound(b)?)),
            ExprNode::Intrinsic { op: Intrinsic::Min, args } if args.len() == 2 => {
                Some(self.bound(&args[0])?.min(self.bound(&args[1])?))
            }
            ExprNode::Intrinsic { op: Intrinsic::Max, args } if args.len() == 2 => {
                Some(self.bound(&args[0])?.max(self.bound(&args[1])?))
            }
            _ => None,
        }?;
        // Past its type's (or `i32`'s) largest value a value may have wrapped.
        let top = e.ty().scalar()?.int_max()?.min(i32::MAX as i128);
        (b as i128 <= top).then_some(b)
    }
}

/// `a / d` (`rem`: `a % d`) for `a` in `0 ..= max` without a divide, when the multiplier
/// fits (see the module docs).
pub fn divide(a: &Expr, d: i64, max: i64, rem: bool) -> Option<Expr> {
    if d < 2 || max < 0 {
        return None;
    }
    if d.count_ones() == 1 {
        let s = d.trailing_zeros() as i64;
        return Some(if rem {
            Expr::binary(BinOp::And, a.clone(), c(d - 1))
        } else {
            Expr::binary(BinOp::Shr, a.clone(), c(s))
        });
    }
    let limit = max.checked_mul(d)?;
    let s = 64 - (limit as u64).leading_zeros() as i64; // 2^s > max * d
    if s > 31 {
        return None;
    }
    let m = (1i64 << s) / d + 1;
    if max.checked_mul(m)? > i32::MAX as i64 {
        return None;
    }
    let q = Expr::binary(BinOp::Shr, Expr::binary(BinOp::Mul, a.clone(), c(m)), c(s));
    Some(if rem {
        Expr::binary(BinOp::Sub, a.clone(), Expr::binary(BinOp::Mul, q, c(d)))
    } else {
        q
    })
}

impl Mutator for Lower {
    fn mutate_expr_changed(&mut self, e: &Expr) -> Option<Expr> {
        if !has_division(e) {
            return None;
        }
        let n = self.mutate_expr(e);
        (!n.ptr_eq(e)).then_some(n)
    }

    fn mutate_var_changed(&mut self, _: &Var) -> Option<Var> {
        None
    }

    fn mutate_expr(&mut self, e: &Expr) -> Expr {
        if !has_division(e) {
            return e.clone();
        }
        let out = walk_mutate_expr(self, e);
        if let ExprNode::Binary { op: op @ (BinOp::Div | BinOp::Rem), a, b } = out.node() {
            if a.ty() == Type::I32 {
                if let (Some(d), Some(max)) = (as_const(b), self.bound(a)) {
                    if let Some(x) = divide(a, d, max, *op == BinOp::Rem) {
                        return x;
                    }
                }
            }
        }
        out
    }

    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        self.mutate_stmt_changed(s).unwrap_or_else(|| s.clone())
    }

    fn mutate_stmt_changed(&mut self, s: &Stmt) -> Option<Stmt> {
        // Names are bound again only once their scope has ended, so each binding, in
        // program order, replaces what an earlier one of its name said.
        match s.node() {
            StmtNode::Let { var, value } if var.ty() == Type::I32 => {
                match self.bound(value) {
                    Some(b) => self.bounds.insert(var.clone(), b),
                    None => self.bounds.remove(var),
                };
            }
            // The counter takes `lo, lo + step, ...` below `hi` (`step` is positive).
            StmtNode::For { var, lo, hi, .. } if var.ty() == Type::I32 => {
                match (self.bound(lo), self.bound(hi)) {
                    (Some(_), Some(h)) if h >= 1 => self.bounds.insert(var.clone(), h - 1),
                    _ => self.bounds.remove(var),
                };
            }
            StmtNode::Let { var, .. }
            | StmtNode::For { var, .. }
            | StmtNode::Decl { var, .. }
            | StmtNode::Alloc { var, .. }
            | StmtNode::Call { result: Some(var), .. } => {
                self.bounds.remove(var);
            }
            _ => {}
        }
        walk_mutate_stmt_changed(self, s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_ir::{Imm, Scalar};

    /// `e` (constants, `a`, binary operators) at `a = v`, as the interpreter computes it.
    fn eval(e: &Expr, v: i64) -> i64 {
        fn go(e: &Expr, v: i64) -> Imm {
            match e.node() {
                ExprNode::Imm(i) => *i,
                ExprNode::Var(_) => Imm::int(Scalar::I32, v as i128),
                ExprNode::Binary { op, a, b } => {
                    kiln_ir::eval::binary(*op, go(a, v), go(b, v)).unwrap()
                }
                _ => panic!("unexpected `{e}`"),
            }
        }
        go(e, v).as_i128().unwrap() as i64
    }

    /// Every quotient and remainder over the whole range, for divisors a generated
    /// convolution meets (filter taps, channels, sizes) and a few awkward ones.
    #[test]
    fn divisions_are_exact_over_their_range() {
        let a = Var::new("a", Type::I32);
        for d in [2, 3, 5, 6, 7, 9, 12, 25, 49, 64, 100, 196, 641, 3136] {
            for max in [0, 1, 100, 4607, 9215, 20000] {
                for rem in [false, true] {
                    let Some(e) = divide(&a.expr(), d, max, rem) else {
                        assert!(d.count_ones() != 1, "{d}");
                        continue;
                    };
                    for v in 0..=max {
                        let want = if rem { v % d } else { v / d };
                        let op = if rem { "%" } else { "/" };
                        assert_eq!(eval(&e, v), want, "{v} {op} {d} (max {max}): {e}");
                    }
                }
            }
        }
        // Too large a range for an i32 multiplier: left alone.
        assert!(divide(&a.expr(), 3, 1 << 20, false).is_none());
    }

    /// Only dividends of known range are rewritten: a work-item id (the work-group size
    /// bounds it) is; a loaded value, a difference that may be negative, a mutable variable,
    /// a value narrowed to a type it may not fit, or a shift by a variable amount is not.
    #[test]
    fn only_bounded_dividends_are_rewritten() {
        let src = "kernel k(x: ptr<global, i32>) #reqd_work_group_size(64, 1, 1) {
            let i: i32 = x[0];
            let l: i32 = local_id(0) as i32;
            x[1] = i / 3;
            x[2] = l / 3;
            x[3] = (l - 1) / 3;
            x[4] = l % 6;
            x[5] = l % 8;
            var w: i32 = l;
            x[6] = w / 3;
            x[7] = ((l * 4) as i8) as i32 / 3;
            x[8] = (255 >> (l & 7)) / 3;
        }";
        let m = kiln_ir::parse_file("k.kir", src).unwrap();
        let k = lower_divisions(&m.module.kernels[0]).to_string();
        assert!(k.contains("x[1] = i / 3;"), "{k}");
        assert!(k.contains("x[3] = (l - 1) / 3;"), "{k}");
        assert!(!k.contains("l / 3") && !k.contains("l % 6") && !k.contains("l % 8"), "{k}");
        assert!(k.contains("l & 7"), "{k}");
        assert!(k.contains("x[6] = w / 3;"), "{k}");
        assert!(k.contains("as i32 / 3;"), "{k}");
        assert!(k.contains(")) / 3;"), "{k}");
    }
}
