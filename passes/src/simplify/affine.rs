//! The affine normal form of integer index arithmetic: a region of `+`, `-`, unary `-` and
//! multiplications by constants is a sum `c1 * t1 + ... + cn * tn + k` over atoms `ti`
//! (everything else: variables, ids, loads, divisions, products of two non-constants),
//! computed bottom-up in one walk with the interpreter's wrapping arithmetic (coefficients
//! modulo 2^bits), equal atoms merged and cancelled, constants folded. Rebuilt with the atoms
//! in the order they first appear and terms of equal coefficient sharing one
//! multiplication, it replaces the region only when strictly cheaper by the simplifier's
//! [`Cost`](super::Cost).
//!
//! This is what the e-graph's ring rules (associativity, commutativity, distribution of a
//! constant, factoring, `a - a = 0`, constant folding) reach, without growing an e-graph:
//! on generated kernels those searches were most of the simplifier's time, and a linear
//! region the normal form leaves as it is goes to no e-graph ([`super::gate`]).
//!
//! Errors are results ([`crate::origin`]): a region whose atoms may fail is left alone (its
//! terms could not be reordered or cancelled freely), so normalizing never changes which
//! error a kernel reports.

use kiln_ir::{BinOp, Expr, ExprMap, ExprNode, Mutator, Scalar, UnOp, Var};
use smallvec::SmallVec;

use super::lang::is_operator;
use super::{expr_cost, is_leaf};

/// Regions with more atoms are left alone (this bounds the size of one rebuilt sum, and the
/// scans that merge atoms).
const MAX_ATOMS: usize = 64;

/// True if `e` is an integer `+`, `-`, unary `-` or `*` node the e-graph treats as an
/// operator: a node of an affine region.
pub(crate) fn is_ring(e: &Expr) -> bool {
    if !is_operator(e) || !e.ty().scalar().is_some_and(|s| s.is_int()) || e.ty().is_vector() {
        return false;
    }
    matches!(
        e.node(),
        ExprNode::Binary { op: BinOp::Add | BinOp::Sub | BinOp::Mul, .. }
            | ExprNode::Unary { op: UnOp::Neg, .. }
    )
}

/// True if the region rooted at ring node `e` is affine: every multiplication in it has a
/// constant operand, and no atom may fail. Such a region is settled by [`normalize`]: the
/// e-graph's rules can only rearrange it at equal or higher cost.
pub(crate) fn is_affine_region(e: &Expr) -> bool {
    if !is_ring(e) {
        return !e.may_fail();
    }
    match e.node() {
        ExprNode::Binary { op: BinOp::Mul, a, b } => {
            (a.as_imm().is_some() && is_affine_region(b))
                || (b.as_imm().is_some() && is_affine_region(a))
        }
        _ => e.children().iter().all(|c| is_affine_region(c)),
    }
}

/// One coefficient magnitude's terms in [`Affine::rebuilt_cost`]: the magnitude, the cost
/// and count of its added atoms, the same of its subtracted ones.
type Group = (u64, u64, u64, u64, u64);

/// A linear combination of atoms with coefficients modulo 2^bits (raw two's complement bits).
struct Affine {
    ty: Scalar,
    mask: u64,
    /// Atoms in order of first appearance, with their coefficients (found by a scan: a
    /// region has a few atoms, at most [`MAX_ATOMS`], and a map per region cost more).
    terms: SmallVec<[(Expr, u64); 8]>,
    k: u64,
}

impl Affine {
    fn new(ty: Scalar) -> Affine {
        let bits = ty.bits();
        let mask = if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
        Affine { ty, mask, terms: SmallVec::new(), k: 0 }
    }

    /// Adds `scale * e` (`e` already normalized inside its atoms). `None` when the region
    /// is not affine or too large.
    fn add(&mut self, e: &Expr, scale: u64) -> Option<()> {
        if let Some(k) = e.as_imm() {
            let v = k.as_i128()? as u64;
            self.k = self.k.wrapping_add(v.wrapping_mul(scale)) & self.mask;
            return Some(());
        }
        if is_ring(e) {
            match e.node() {
                ExprNode::Binary { op: BinOp::Add, a, b } => {
                    self.add(a, scale)?;
                    return self.add(b, scale);
                }
                ExprNode::Binary { op: BinOp::Sub, a, b } => {
                    self.add(a, scale)?;
                    return self.add(b, scale.wrapping_neg() & self.mask);
                }
                ExprNode::Unary { op: UnOp::Neg, a } => {
                    return self.add(a, scale.wrapping_neg() & self.mask);
                }
                ExprNode::Binary { op: BinOp::Mul, a, b } => {
                    let xk = match (a.as_imm(), b.as_imm()) {
                        (_, Some(k)) => Some((a, k)),
                        (Some(k), _) => Some((b, k)),
                        // A product of two non-constants is an atom.
                        _ => None,
                    };
                    if let Some((x, k)) = xk {
                        let k = k.as_i128()? as u64;
                        return self.add(x, scale.wrapping_mul(k) & self.mask);
                    }
                }
                _ => {}
            }
        }
        if e.may_fail() {
            return None;
        }
        match self.terms.iter_mut().find(|(t, _)| t == e) {
            Some((_, c)) => *c = c.wrapping_add(scale) & self.mask,
            None => {
                if self.terms.len() >= MAX_ATOMS {
                    return None;
                }
                self.terms.push((e.clone(), scale));
            }
        }
        Some(())
    }

    /// `c` as a sign and a magnitude: negative when its top bit is set.
    fn signed(&self, c: u64) -> (bool, u64) {
        let top = (self.mask >> 1).wrapping_add(1);
        if c & top != 0 && c != top {
            (true, c.wrapping_neg() & self.mask)
        } else {
            (false, c)
        }
    }

    fn konst(&self, v: u64) -> Expr {
        Expr::int(self.ty, v as i128)
    }

    /// The non-zero terms grouped by coefficient magnitude, as [`Affine::rebuild`] writes
    /// them: the magnitudes in order of first appearance, and each term's group, whether it
    /// is subtracted, and the term.
    #[allow(clippy::type_complexity)]
    fn grouped(&self) -> (SmallVec<[u64; 4]>, SmallVec<[(usize, bool, &Expr); 8]>) {
        let mut mags: SmallVec<[u64; 4]> = SmallVec::new();
        let mut terms = SmallVec::with_capacity(self.terms.len());
        for (t, c) in &self.terms {
            if *c == 0 {
                continue;
            }
            let (neg, m) = self.signed(*c);
            let g = match mags.iter().position(|&x| x == m) {
                Some(i) => i,
                None => {
                    mags.push(m);
                    mags.len() - 1
                }
            };
            terms.push((g, neg, t));
        }
        (mags, terms)
    }

    /// The [`Cost`](super::Cost) of [`Affine::rebuild`]'s result, computed as it builds.
    fn rebuilt_cost(&self) -> u64 {
        // (magnitude, cost of the added atoms and their count, the same of the subtracted)
        let (mags, terms) = self.grouped();
        let mut groups: SmallVec<[Group; 4]> = mags.into_iter().map(|m| (m, 0, 0, 0, 0)).collect();
        for (g, neg, t) in terms {
            let tc = expr_cost(t);
            if neg {
                groups[g].3 += tc;
                groups[g].4 += 1;
            } else {
                groups[g].1 += tc;
                groups[g].2 += 1;
            }
        }
        // A multiplication (3) and its constant (1) unless the magnitude is one.
        let scale = |m: u64| if m == 1 { 0 } else { 4 };
        let mut acc: Option<u64> = None;
        let mut minus: SmallVec<[u64; 4]> = SmallVec::new();
        for (m, pc, pn, nc, nn) in groups {
            if pn == 0 {
                // The subtracted atoms summed (one `+` fewer than atoms), then scaled.
                minus.push(nc + (nn - 1) + scale(m));
                continue;
            }
            // The added atoms summed, the subtracted ones subtracted, then scaled.
            let g = pc + (pn - 1) + nc + nn + scale(m);
            acc = Some(match acc {
                None => g,
                Some(a) => a + 1 + g,
            });
        }
        if acc.is_none() && !minus.is_empty() && self.k != 0 {
            return 1 + minus.iter().sum::<u64>() + minus.len() as u64;
        }
        for t in minus {
            // A negation or a subtraction.
            acc = Some(acc.map_or(1 + t, |a| a + 1 + t));
        }
        match acc {
            None => 1,
            Some(a) if self.k == 0 => a,
            Some(a) => a + 2,
        }
    }

    /// The sum rebuilt: terms grouped by coefficient magnitude in order of first appearance
    /// (`(a + b - c) * 4`), then the constant (subtracted when negative).
    fn rebuild(&self) -> Expr {
        // (magnitude, added atoms, subtracted atoms)
        let (mags, terms) = self.grouped();
        let mut groups: Vec<(u64, Vec<Expr>, Vec<Expr>)> =
            mags.into_iter().map(|m| (m, Vec::new(), Vec::new())).collect();
        for (g, neg, t) in terms {
            if neg {
                groups[g].2.push(t.clone());
            } else {
                groups[g].1.push(t.clone());
            }
        }
        let mut acc: Option<Expr> = None;
        // Groups with only subtracted atoms are subtracted as a whole, after the others.
        let mut minus: Vec<Expr> = Vec::new();
        for (m, plus, neg) in groups {
            let scaled =
                |x: Expr| if m == 1 { x } else { Expr::binary(BinOp::Mul, x, self.konst(m)) };
            if plus.is_empty() {
                let s = neg.into_iter().reduce(|x, y| Expr::binary(BinOp::Add, x, y));
                minus.extend(s.map(scaled));
                continue;
            }
            let s = plus.into_iter().reduce(|x, y| Expr::binary(BinOp::Add, x, y));
            let s = neg.into_iter().fold(s, |x, y| x.map(|x| Expr::binary(BinOp::Sub, x, y)));
            let g = s.map(scaled);
            acc = match (acc, g) {
                (None, g) => g,
                (Some(a), Some(g)) => Some(Expr::binary(BinOp::Add, a, g)),
                (a, None) => a,
            };
        }
        let (kneg, kmag) = self.signed(self.k);
        if acc.is_none() && !minus.is_empty() && self.k != 0 {
            // `k - a - b` is cheaper than `-a - b + k`.
            return minus
                .into_iter()
                .fold(self.konst(self.k), |x, y| Expr::binary(BinOp::Sub, x, y));
        }
        for t in minus {
            acc = Some(match acc {
                None => Expr::unary(UnOp::Neg, t),
                Some(a) => Expr::binary(BinOp::Sub, a, t),
            });
        }
        match acc {
            None => self.konst(self.k),
            Some(a) if self.k == 0 => a,
            Some(a) if kneg => Expr::binary(BinOp::Sub, a, self.konst(kmag)),
            Some(a) => Expr::binary(BinOp::Add, a, self.konst(self.k)),
        }
    }
}

/// The normal form of the region rooted at ring node `e` (its atoms already normalized),
/// if it is affine and strictly cheaper than `e`.
fn region(e: &Expr) -> Option<Expr> {
    let ty = e.ty().scalar()?;
    let mut s = Affine::new(ty);
    s.add(e, 1)?;
    // Most regions of generated kernels are in normal form already: their rebuilt form
    // would cost as much. Its cost is known without building it (and dropping it).
    let cost = expr_cost(e);
    let rebuilt = s.rebuilt_cost();
    if cfg!(debug_assertions) {
        // Tests check the count against the real thing on every region.
        let r = s.rebuild();
        assert_eq!(expr_cost(&r), rebuilt, "the rebuilt cost of {e}: {r}");
    }
    if rebuilt >= cost {
        return None;
    }
    let r = s.rebuild();
    (r.ty() == e.ty()).then_some(r)
}

/// `a - b` as a number when the affine normal form settles it: both sides' `+ - *`-by-constant
/// regions summed term by term with wrapping, atoms compared as they are written (not
/// simplified). `None` when a term is left over, a side is not integer or too large, or an
/// atom may fail; the simplifier may still settle those. Linear in the size of `a` and `b`
/// and builds no expression: the generator asks it of every lane of a would-be vector
/// access.
pub fn constant_difference(a: &Expr, b: &Expr) -> Option<i128> {
    let ty = a.ty().scalar().filter(|s| s.is_int() && !a.ty().is_vector() && b.ty() == a.ty())?;
    let mut s = Affine::new(ty);
    s.add(a, 1)?;
    s.add(b, s.mask)?;
    if s.terms.iter().any(|(_, c)| *c != 0) {
        return None;
    }
    let (neg, m) = s.signed(s.k);
    Some(if neg { -(m as i128) } else { m as i128 })
}

/// The normalizing walk, with the results of the regions it normalized so far.
struct Normalize<'a> {
    /// Each region root normalized so far and its normal form (`None`: unchanged). The
    /// simplifier's rounds normalize the same index again and again (each enclosing
    /// expression's round walks the loads inside it, and a changed expression's next round
    /// walks them once more), and the result is a function of the region alone.
    memo: &'a mut ExprMap<Option<Expr>>,
}

impl Mutator for Normalize<'_> {
    fn mutate_expr_changed(&mut self, e: &Expr) -> Option<Expr> {
        if is_leaf(e) {
            return None;
        }
        let n = self.mutate_expr(e);
        (!n.ptr_eq(e)).then_some(n)
    }

    fn mutate_var_changed(&mut self, _: &Var) -> Option<Var> {
        None
    }

    fn mutate_expr(&mut self, e: &Expr) -> Expr {
        if is_leaf(e) {
            return e.clone();
        }
        if !is_ring(e) {
            return kiln_ir::walk_mutate_expr(self, e);
        }
        // The normal form depends on the region's structure, types and source names
        // (`is_operator` keeps a named division whole) and on nothing else: an equal region
        // of the same names takes it (origins take no part in `Expr` equality).
        if let Some((k, r)) = self.memo.get_key_value(e) {
            if crate::origin::same_origins(k, e) {
                return r.clone().unwrap_or_else(|| e.clone());
            }
        }
        let inner = {
            // The region's atoms first (their own regions), then the region.
            struct Atoms<'a, 'b>(&'a mut Normalize<'b>);
            impl Mutator for Atoms<'_, '_> {
                fn mutate_expr_changed(&mut self, e: &Expr) -> Option<Expr> {
                    if is_ring(e) {
                        let n = kiln_ir::walk_mutate_expr(self, e);
                        (!n.ptr_eq(e)).then_some(n)
                    } else {
                        self.0.mutate_expr_changed(e)
                    }
                }
                fn mutate_expr(&mut self, e: &Expr) -> Expr {
                    if is_ring(e) {
                        kiln_ir::walk_mutate_expr(self, e)
                    } else {
                        self.0.mutate_expr(e)
                    }
                }
            }
            kiln_ir::walk_mutate_expr(&mut Atoms(self), e)
        };
        let n = region(&inner).unwrap_or(inner);
        // The first entry stays: its value belongs to its key's source names.
        self.memo.entry(e.clone()).or_insert_with(|| (!n.ptr_eq(e)).then(|| n.clone()));
        n
    }
}

/// `e` with every affine region in normal form where that is strictly cheaper; the very
/// same handle when nothing changed. Linear in the size of `e`.
pub fn normalize(e: &Expr) -> Expr {
    normalize_in(e, &mut ExprMap::default())
}

/// [`normalize`], taking the normal forms of regions normalized before from `memo` and
/// keeping the new ones there (one simplification's rounds meet the same regions often).
pub(crate) fn normalize_in(e: &Expr, memo: &mut ExprMap<Option<Expr>>) -> Expr {
    Normalize { memo }.mutate_expr(e)
}
