//! Division of index arithmetic by constants, without a divide.
//!
//! `ptxas` lowers `div`/`rem` by an immediate with its generic division sequence (about
//! twenty instructions; NVVM strength-reduces before PTX, kiln's backend does not). A
//! generated convolution takes its flat reduction index apart (`ic = k / 9`, `kh = k / 3 % 3`,
//! ...) for every element its tile copies, so those sequences outnumbered its FMAs. Here an
//! `i32` division `a / d` or `a % d` by a constant `d > 1` whose dividend is provably in
//! `0 ..= max` becomes `a >> s` / `a & (d - 1)` for a power of two, else
//! `(a * m) >> s` with `m = 2^s / d + 1` (rounded down), `s` the least with
//! `2^s > max * d`, when `max * m` fits in `i32` (then the quotient is exact for every
//! `a` in range: `a * m / 2^s = a / d + a * e / (d * 2^s)` with `e = m * d - 2^s <= d`, and
//! `a * e < 2^s`), and `a % d = a - (a / d) * d`. The range comes from the kernel itself:
//! constants, work-item and work-group ids (the work-group size and `#nd_range`), loop
//! counters and `let`s, through `+`, `*`, `/`, `%`, shifts, `&`, `min`, `max` and `select`;
//! anything else (a subtraction, a load, a mutable variable) leaves its division alone.

use std::collections::HashMap;

use kiln_ir::{
    walk_mutate_expr, walk_mutate_stmt, BinOp, Builtin, Expr, ExprNode, Intrinsic, Kernel, Mutator,
    Stmt, StmtNode, Type, Var,
};

use crate::ix::{as_const, c};

/// `k` with its `i32` divisions by constants of bounded non-negative dividends rewritten as
/// shifts, masks and multiplications (see the module docs); `k` itself when none is.
pub(crate) fn lower_divisions(k: &Kernel) -> Kernel {
    let attrs = k.attrs();
    let local = attrs.reqd_work_group_size;
    let groups = attrs.nd_range.as_ref().and_then(|r| {
        let local = r.local.as_ref()?;
        Some(r.global.iter().zip(local).map(|(g, l)| g / l.max(&1)).collect::<Vec<u32>>())
    });
    let mut m = Lower { bounds: HashMap::new(), local, groups };
    m.mutate_kernel(k)
}

struct Lower {
    /// The largest value of each immutable `i32` binding known to be non-negative.
    bounds: HashMap<Var, i64>,
    local: Option<[u32; 3]>,
    groups: Option<Vec<u32>>,
}

impl Lower {
    /// The largest value of `e` when it is an integer provably in `0 ..= max`.
    fn bound(&self, e: &Expr) -> Option<i64> {
        let b = match e.node() {
            ExprNode::Imm(_) => as_const(e).filter(|&v| v >= 0).or_else(|| {
                e.as_imm()
                    .and_then(|i| i.as_i128())
                    .filter(|v| (0..=i32::MAX as i128).contains(v))
                    .map(|v| v as i64)
            }),
            ExprNode::Var(v) => self.bounds.get(v).copied(),
            ExprNode::Builtin { kind: Builtin::LocalId, dim } => {
                self.local.map(|l| l[*dim as usize] as i64 - 1)
            }
            ExprNode::Builtin { kind: Builtin::GroupId, dim } => {
                self.groups.as_ref()?.get(*dim as usize).map(|&g| g as i64 - 1)
            }
            ExprNode::Cast { to, a } if to.is_int() && a.ty().is_int() => self.bound(a),
            ExprNode::Binary { op, a, b } => {
                let (x, y) = (self.bound(a)?, self.bound(b)?);
                match op {
                    BinOp::Add => x.checked_add(y),
                    BinOp::Mul => x.checked_mul(y),
                    BinOp::Div if y > 0 => Some(x / y.max(1)),
                    BinOp::Rem if as_const(b).is_some_and(|d| d > 0) => Some(x.min(y - 1)),
                    BinOp::Shr if y < 32 => Some(x >> y),
                    BinOp::And => Some(x.min(y)),
                    _ => None,
                }
            }
            ExprNode::Select { a, b, .. } => Some(self.bound(a)?.max(self.bound(b)?)),
            ExprNode::Intrinsic { op: Intrinsic::Min, args } if args.len() == 2 => {
                let (x, y) = (self.bound(&args[0]), self.bound(&args[1]));
                match (x, y) {
                    (Some(x), Some(y)) => Some(x.min(y)),
                    _ => None,
                }
            }
            ExprNode::Intrinsic { op: Intrinsic::Max, args } if args.len() == 2 => {
                Some(self.bound(&args[0])?.max(self.bound(&args[1])?))
            }
            _ => None,
        }?;
        (b <= i32::MAX as i64).then_some(b)
    }
}

/// `a / d` (`rem`: `a % d`) for `a` in `0 ..= max` without a divide, when the multiplier
/// fits (see the module docs).
pub(crate) fn divide(a: &Expr, d: i64, max: i64, rem: bool) -> Option<Expr> {
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
    if s > 62 {
        return None;
    }
    let m = (1i64 << s) / d + 1;
    if max.checked_mul(m)? > i32::MAX as i64 || s > 31 {
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
    fn mutate_expr(&mut self, e: &Expr) -> Expr {
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
        match s.node() {
            StmtNode::Let { var, value } if var.ty() == Type::I32 => {
                match self.bound(value) {
                    Some(b) => self.bounds.insert(var.clone(), b),
                    None => self.bounds.remove(var),
                };
            }
            StmtNode::For { var, lo, hi, .. } if var.ty() == Type::I32 => {
                match (self.bound(lo), self.bound(hi)) {
                    (Some(_), Some(h)) if h >= 1 => self.bounds.insert(var.clone(), h - 1),
                    _ => self.bounds.remove(var),
                };
            }
            _ => {}
        }
        walk_mutate_stmt(self, s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_ir::{Imm, Scalar};

    fn eval(e: &Expr, a: &Var, v: i64) -> i64 {
        let env = HashMap::from([(a.clone(), Imm::int(Scalar::I32, v as i128))]);
        crate::ix::eval_i64(e, &env).unwrap()
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
                        assert_eq!(
                            eval(&e, &a, v),
                            want,
                            "{v} {} {d} (max {max})",
                            if rem { "%" } else { "/" }
                        );
                    }
                }
            }
        }
        // Too large a range for an i32 multiplier: left alone.
        assert!(divide(&a.expr(), 3, 1 << 20, false).is_none());
    }

    /// Only dividends of known range are rewritten: a work-item id (the work-group size
    /// bounds it) is; a loaded value, or a difference that may be negative, is not.
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
        }";
        let m = kiln_ir::parse_file("k.kir", src).unwrap();
        let k = lower_divisions(&m.module.kernels[0]).to_string();
        assert!(k.contains("x[1] = i / 3;"), "{k}");
        assert!(k.contains("x[3] = (l - 1) / 3;"), "{k}");
        assert!(!k.contains("l / 3") && !k.contains("l % 6") && !k.contains("l % 8"), "{k}");
        assert!(k.contains("l & 7"), "{k}");
    }
}
