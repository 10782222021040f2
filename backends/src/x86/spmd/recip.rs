//! u32 `/` and `%` of lanes by a divisor fixed for the call: a constant, a parameter, an id
//! other than `global_id(0)`'s, or a hoisted `let` of those (an index decomposed by sizes,
//! `i % c`, `i / w`). [`V::lane_div`] divides the lanes in f64, four at a time, which costs
//! two `vdivpd` per batch; with the divisor fixed, its reciprocal is computed once (when the
//! code is generated for a constant, once per call otherwise, where a zero divisor gives
//! infinity and no fault: the batch loop's check reports it) and each batch multiplies.
//! (A nonzero constant takes `divconst.rs`'s integer multiply first; the constant case here
//! is what a constant without a magic number would take, which `divconst.rs` proves never
//! happens.)
//!
//! Why one correction makes that exact: with `r = RN(1/b)` and `q' = RN(a * r)` (`a`, `b`
//! below 2^32, `b` not 0), `q' = (a / b)(1 + e)` with `|e| < 2^-51.9`, so `q'` is within
//! `a * 2^-51.9 / b < 1 / b` of `a / b`. Where `b` does not divide `a`, `a / b` is at least
//! `1 / b` from both integers around it, so `trunc(q')` is the quotient; where it does,
//! `trunc(q')` is the quotient or one less. The remainder `a - t * b` (wrapping) is then the
//! true one or exactly `b` (no wrap: `b` < 2^32), and a remainder not below `b` adds one to
//! the quotient and takes `b` from the remainder.

use std::collections::{HashMap, HashSet};

use iced_x86::code_asm::*;
use kiln_ir::{walk_expr, BinOp, Expr, ExprNode, Imm, Kernel, Scalar, Type, Visitor};

use super::{R, V, XMM, YMM};

/// The u32 divisions and remainders of a kernel: the node's address, its dividend and its
/// divisor.
#[derive(Default)]
struct Divs(Vec<(usize, Expr, Expr)>);

impl Visitor for Divs {
    fn visit_expr(&mut self, e: &Expr) {
        if let ExprNode::Binary { op: BinOp::Div | BinOp::Rem, a, b } = e.node() {
            if a.ty() == Type::U32 {
                self.0.push((e.addr(), a.clone(), b.clone()));
            }
        }
        walk_expr(self, e)
    }
}

/// False only if `e` is certainly the same in every lane (the divergence walk's rule, with
/// `let`s declared once read through): such a division is one `div` for the batch and needs
/// no reciprocal.
fn may_vary(e: &Expr, lets: &HashMap<String, Expr>, vars: &Uniform, depth: u32) -> bool {
    depth > 32
        || !super::uniform::uniform(e, &|n| match lets.get(n) {
            Some(x) => !may_vary(x, lets, vars, depth + 1),
            None => vars.params.contains(n) || vars.plain_vars.contains(n),
        })
}

/// The names [`may_vary`] takes as uniform without a `let`: parameters, and `var`s declared
/// once that the divergence walk leaves uniform.
struct Uniform {
    params: HashSet<String>,
    plain_vars: HashSet<String>,
}

/// The reciprocal of a nonzero u32 constant, correctly rounded, as f64 bits.
pub(super) fn const_recip(b: &Expr) -> Option<u64> {
    match b.node() {
        ExprNode::Imm(Imm::Int(Scalar::U32, c)) if *c != 0 => Some((1.0 / *c as f64).to_bits()),
        _ => None,
    }
}

impl V {
    /// In the code run once per call, after the hoisted `let`s (in scope): the reciprocals
    /// (f64, broadcast) of the divisors of u32 `/` and `%` that are fixed for the call and
    /// not constants, one slot per divisor (see the module docs). Only divisors whose names
    /// are declared once in the kernel are taken, so a name means there what it means here.
    pub(super) fn hoist_recips(&mut self, k: &Kernel) -> R<()> {
        let decls = super::hoist::decl_counts(k);
        let mut divs = Divs::default();
        divs.visit_kernel(k);
        let lets = super::hoist::once_lets(k, &decls);
        let vars = Uniform {
            params: k.params().iter().map(|p| p.name().to_string()).collect(),
            plain_vars: decls
                .iter()
                .filter(|(n, &c)| c == 1 && !lets.contains_key(*n) && !self.div_vars.contains(*n))
                .map(|(n, _)| n.clone())
                .collect(),
        };
        // (`near.rs`: operands of these names are the same wherever they are read.)
        self.shares.stable = vars.params.iter().chain(lets.keys()).cloned().collect();
        for (addr, a, _) in &divs.0 {
            if super::near::from_ids(a, &lets, &self.div_vars, 0) == Some(true) {
                self.shares.near.insert(*addr);
            }
        }
        let mut by_text: HashMap<String, (i32, i32)> = HashMap::new();
        for (addr, a, b) in divs.0 {
            if const_recip(&b).is_some() || !self.invariant(&b) || !may_vary(&a, &lets, &vars, 0) {
                continue;
            }
            let mut names = Vec::new();
            super::hoist::names_of(&b, &mut names);
            if !names.iter().all(|n| decls.get(n) == Some(&1)) {
                continue;
            }
            let text = b.to_string();
            let slot = match by_text.get(&text) {
                Some(&s) => s,
                None => {
                    self.expr(&b, 0)?;
                    let a = &mut self.a;
                    a.vmovd(eax, xmm0)?;
                    a.vcvtsi2sd(xmm0, xmm0, rax)?;
                    a.mov(rax, 1f64.to_bits())?;
                    a.vmovq(xmm1, rax)?;
                    a.vdivsd(xmm0, xmm1, xmm0)?;
                    // The f32 reciprocal of `near.rs`: the f64 one rounded again.
                    a.vcvtsd2ss(xmm1, xmm1, xmm0)?;
                    a.vbroadcastsd(ymm0, xmm0)?;
                    a.vbroadcastss(ymm1, xmm1)?;
                    let (slot, slot32) = (self.slot(), self.slot());
                    self.a.vmovups(ymmword_ptr(r15 + slot), ymm0)?;
                    self.a.vmovups(ymmword_ptr(r15 + slot32), ymm1)?;
                    by_text.insert(text, (slot, slot32));
                    (slot, slot32)
                }
            };
            self.recips.push((addr, slot.0, slot.1));
        }
        Ok(())
    }

    /// The slot of the broadcast reciprocal of `e`'s divisor (`e` a u32 `/` or `%`), if it
    /// has one: a constant's, or one [`V::hoist_recips`] computed.
    pub(super) fn recip_slot(&mut self, e: &Expr) -> Option<i32> {
        let ExprNode::Binary { b, .. } = e.node() else { return None };
        if let Some(bits) = const_recip(b) {
            return Some(self.const_slot((bits, 4)));
        }
        self.recips.iter().find(|r| r.0 == e.addr()).map(|r| r.1)
    }

    /// The slot of the broadcast f32 reciprocal of `e`'s divisor for [`V::near_div`]
    /// (`e` a u32 `/` or `%` whose dividend comes from the ids, `near::from_ids`; others,
    /// data say, would fail its check in most batches): a constant's where it is at most 2^20 (larger ones never
    /// take that path), or one [`V::hoist_recips`] computed.
    pub(super) fn recip32_slot(&mut self, e: &Expr) -> Option<i32> {
        let ExprNode::Binary { b, .. } = e.node() else { return None };
        if !self.shares.near.contains(&e.addr()) {
            return None;
        }
        if let Some(bits) = const_recip(b) {
            let c = b.as_imm().and_then(|i| match i {
                Imm::Int(_, c) => Some(*c),
                _ => None,
            })?;
            return (c <= 1 << 20).then(|| self.imm_slot((f64::from_bits(bits) as f32).to_bits()));
        }
        self.recips.iter().find(|r| r.0 == e.addr()).map(|r| r.2)
    }

    /// The quotient of the u32 lanes of `ymm{d}` by those of `ymm{d+1}` (equal lanes, their
    /// reciprocal in `slot`) into `ymm{d}`, or with `rem` the remainder; with `both`, the
    /// other one into that slot too (`near.rs`, [`V::share_div`]); `ymm{d+2}` to
    /// `ymm{d+4}` are clobbered. `k` is the frame slot of -2^31 as f64 broadcast, `sign`
    /// that of 2^31 as u32.
    pub(super) fn recip_div(
        &mut self,
        rem: bool,
        slot: i32,
        d: usize,
        (k, sign): (i32, i32),
        both: Option<i32>,
    ) -> R<()> {
        let (x, y, t, u, v) = (YMM[d], YMM[d + 1], YMM[d + 2], YMM[d + 3], YMM[d + 4]);
        let sign128 = xmmword_ptr(r15 + sign);
        for high in [false, true] {
            let (q, qx) = if high { (u, XMM[d + 3]) } else { (t, XMM[d + 2]) };
            let from = if high {
                self.a.vextracti128(qx, x, 1)?;
                qx
            } else {
                XMM[d]
            };
            // u32 to f64: (v ^ 2^31) as i32, then + 2^31, exactly.
            self.a.vpxor(qx, from, sign128)?;
            self.a.vcvtdq2pd(q, qx)?;
            self.a.vsubpd(q, q, ymmword_ptr(r15 + k))?;
            self.a.vmulpd(q, q, ymmword_ptr(r15 + slot))?;
            // Truncated (exact), then shifted into i32 range (exact).
            self.a.vroundpd(q, q, 11)?;
            self.a.vaddpd(q, q, ymmword_ptr(r15 + k))?;
            self.a.vcvttpd2dq(qx, q)?;
        }
        self.a.vinserti128(t, t, XMM[d + 3], 1)?;
        self.a.vpxor(t, t, ymmword_ptr(r15 + sign))?;
        // The remainder, and the quotient one too low where it reaches the divisor.
        self.a.vpmulld(u, t, y)?;
        self.a.vpsubd(u, x, u)?;
        self.a.vpmaxud(v, u, y)?;
        self.a.vpcmpeqd(v, v, u)?;
        if let Some(other) = both {
            self.a.vpsubd(x, t, v)?;
            self.a.vpand(v, v, y)?;
            self.a.vpsubd(u, u, v)?;
            return self.both_out(rem, other, d);
        }
        if rem {
            self.a.vpand(v, v, y)?;
            self.a.vpsubd(x, u, v)?;
        } else {
            self.a.vpsubd(x, t, v)?;
        }
        Ok(())
    }
}
