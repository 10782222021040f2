//! i32/u32 `/` and `%` of lanes by a divisor fixed for the call: a parameter, an id other
//! than `global_id(0)`'s, or a hoisted `let` of those (an index decomposed by sizes, `i % c`,
//! `i / w`). [`V::lane_div`]'s general path divides in f64, two `vdivpd` per batch; with the
//! divisor fixed, its magic number and shifts are computed once per call in scalar code
//! ([`magic`]) and each batch takes one multiply-high and four integer operations, as
//! `divconst.rs` does for constants (which take that path first), with no conversion.
//!
//! Why it is exact (Granlund and Montgomery, "Division by invariant integers using
//! multiplication", 1994, figure 4.1, N = 32). For `1 <= d < 2^32`, `l = ceil(log2 d)` and
//! `m = floor(2^(32+l) / d) + 1 = 2^32 + m'`: `2^(32+l) < m d <= 2^(32+l) + 2^l`, so for every
//! `n < 2^32`, `n m / 2^(32+l) = n / d + n e / (d 2^(32+l))` with `0 < e <= 2^l`, and the
//! error term is below `1 / d`: the floor is `floor(n / d)`. `m'` is below 2^32 (`2^l - d < d`
//! makes `2^32 (2^l - d) / d < 2^32`, and the floor is at most `2^32 - 2` for `l <= 32`). With
//! `t = floor(n m' / 2^32) <= n`, `floor(n m / 2^(32+l)) = floor((n + t) / 2^l)`, computed
//! without overflow as `(t + ((n - t) >> sh1)) >> sh2` with `sh1 = min(l, 1)`,
//! `sh2 = max(l - 1, 0)` (for `d = 1`: `m' = 1`, `t = 0`, the quotient `n`).
//! The tests check every dividend of a set of divisors (the computation is nondecreasing in
//! `n`, so the two ends of every run of one quotient cover all) and samples of many more.
//!
//! i32: the quotient of the magnitudes (`|i32::MIN|` is 2^31 as a u32, which the unsigned
//! algorithm divides exactly), negated where the signs differ: the truncated quotient, and
//! `i32::MIN / -1` gives 2^31, i.e. `i32::MIN` (the interpreter's `wrapping_div`). The
//! remainder is `n - q d`, wrapping (`i32::MIN % -1` is 0, as `wrapping_rem`).
//!
//! A zero divisor: the magic is that of 1 (no scalar `div` by 0 where it is computed); the
//! batch loop tests the divisor's lane 0 and reports the fault in the lowest active lane
//! before any quotient is used, as the general path does.

use std::collections::{HashMap, HashSet};

use iced_x86::code_asm::*;
use kiln_ir::{walk_expr, BinOp, Expr, ExprNode, Kernel, Type, Visitor};

use super::{R, V, YMM};

/// The magic multiplier `m'` and the two shifts of a divisor `d` (0 is taken as 1), as the
/// code run once per call computes them (see the module docs).
#[cfg(test)]
fn magic(d: u32) -> (u32, u32, u32) {
    let d = d.max(1) as u64;
    // ceil(log2 d): the highest set bit of 2d - 1.
    let l = 63 - (2 * d - 1).leading_zeros();
    let m = ((((1u64 << l) - d) << 32) / d + 1) as u32;
    let sh1 = (l != 0) as u32;
    (m, sh1, l - sh1)
}

/// What the lanes compute for the unsigned quotient of `n` under `magic`'s triple.
#[cfg(test)]
fn model(n: u32, (m, sh1, sh2): (u32, u32, u32)) -> u32 {
    let t = ((n as u64 * m as u64) >> 32) as u32;
    (t + ((n - t) >> sh1)) >> sh2
}

/// What the lanes compute for the i32 quotient of `n` by `d` (not 0).
#[cfg(test)]
fn model_signed(n: i32, d: i32) -> i32 {
    let q = model(n.unsigned_abs(), magic(d.unsigned_abs())) as i32;
    let sign = (n ^ d) >> 31;
    (q ^ sign).wrapping_sub(sign)
}

/// The i32/u32 and i64/u64 divisions and remainders of a kernel: the node's address, whether
/// it is signed, whether it is 64-bit, its dividend and its divisor.
#[derive(Default)]
struct Divs(Vec<(usize, bool, bool, Expr, Expr)>);

impl Visitor for Divs {
    fn visit_expr(&mut self, e: &Expr) {
        if let ExprNode::Binary { op: BinOp::Div | BinOp::Rem, a, b } = e.node() {
            let ty = a.ty();
            if [Type::U32, Type::I32, Type::U64, Type::I64].contains(&ty) {
                let signed = ty == Type::I32 || ty == Type::I64;
                let wide = ty == Type::U64 || ty == Type::I64;
                self.0.push((e.addr(), signed, wide, a.clone(), b.clone()));
            }
        }
        walk_expr(self, e)
    }
}

/// False only if `e` is certainly the same in every lane (the divergence walk's rule, with
/// `let`s declared once read through): such a division is one `div` for the batch and needs
/// no magic number.
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

impl V {
    /// In the code run once per call, after the hoisted `let`s (in scope): the magic numbers
    /// and shifts of the divisors of i32/u32 (and i64/u64, `divuniform64.rs`) `/` and `%`
    /// that are fixed for the call and not constants, one set of slots per divisor, width
    /// and signedness (see the module docs). Only divisors whose names are declared once in
    /// the kernel are taken, so a name means there what it means here.
    pub(super) fn hoist_magic(&mut self, k: &Kernel) -> R<()> {
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
        let mut by_text: HashMap<(String, bool, bool), (i32, i32)> = HashMap::new();
        for (addr, signed, wide, a, b) in divs.0 {
            // A nested 64-bit `let` is not hoisted (`rowwise.rs` takes 32-bit ones): read
            // through it to its value (declared once, so the same wherever it is read).
            let b = if wide { self.through_lets(b, &lets) } else { b };
            if matches!(b.node(), ExprNode::Imm(_))
                || !self.invariant(&b)
                || !may_vary(&a, &lets, &vars, 0)
            {
                continue;
            }
            let mut names = Vec::new();
            super::hoist::names_of(&b, &mut names);
            if !names.iter().all(|n| decls.get(n) == Some(&1)) {
                continue;
            }
            let key = (b.to_string(), signed, wide);
            let slots = match by_text.get(&key) {
                Some(&s) => s,
                None if wide => {
                    self.expr64(&b, 0)?;
                    // Consecutive slots, as `magic64_code` reads them.
                    let m = self.slot();
                    (1..super::divuniform64::SLOTS).for_each(|_| _ = self.slot());
                    self.magic64_code(signed, m)?;
                    by_text.insert(key, (m, m));
                    (m, m)
                }
                None => {
                    self.expr(&b, 0)?;
                    let s = (self.slot(), self.slot());
                    self.magic_code(signed, s)?;
                    by_text.insert(key, s);
                    s
                }
            };
            self.magics.push((addr, slots.0, slots.1));
        }
        Ok(())
    }

    /// `b`, or while it names a `let` declared once that is not bound here, that `let`'s
    /// value.
    fn through_lets(&self, mut b: Expr, lets: &HashMap<String, Expr>) -> Expr {
        for _ in 0..8 {
            let ExprNode::Var(v) = b.node() else { break };
            match lets.get(v.name()) {
                Some(x) if self.find(v.name()).is_none() => b = x.clone(),
                _ => break,
            }
        }
        b
    }

    /// The scalar code computing [`magic`] of the divisor in `xmm0`'s lane 0 (of its
    /// magnitude where `signed`): `m'` broadcast into slot `m`, `sh1` and `sh2` as the
    /// qwords at `s` and `s + 16` (the counts `vpsrld` reads). `rax`, `r10`, `r11` are
    /// clobbered; `rdx` (a buffer base) is saved around the `div`.
    fn magic_code(&mut self, signed: bool, (m, s): (i32, i32)) -> R<()> {
        let a = &mut self.a;
        a.vmovd(eax, xmm0)?;
        if signed {
            // |d| as a u32 (i32::MIN stays 2^31).
            a.mov(r10d, eax)?;
            a.neg(eax)?;
            a.cmovs(eax, r10d)?;
        }
        // 0 becomes 1: the carry of `d < 1`.
        a.cmp(eax, 1)?;
        a.adc(eax, 0)?;
        a.mov(r10d, eax)?;
        a.lea(r11, qword_ptr(r10 + r10 - 1))?;
        a.bsr(r11, r11)?;
        a.xor(eax, eax)?;
        a.bts(rax, r11)?;
        a.sub(rax, r10)?;
        a.shl(rax, 32)?;
        a.push(rdx)?;
        a.xor(edx, edx)?;
        a.div(r10)?;
        a.pop(rdx)?;
        a.inc(eax)?;
        a.vmovd(xmm0, eax)?;
        a.vpbroadcastd(ymm0, xmm0)?;
        a.vmovups(ymmword_ptr(r15 + m), ymm0)?;
        a.xor(eax, eax)?;
        a.test(r11d, r11d)?;
        a.setne(al)?;
        a.sub(r11d, eax)?;
        a.mov(qword_ptr(r15 + s), rax)?;
        a.mov(qword_ptr(r15 + s + 16), r11)?;
        Ok(())
    }

    /// The slots of the magic number and shifts of `e`'s divisor (`e` an i32/u32 `/` or
    /// `%`; for i64/u64 the first of its consecutive slots, twice), if [`V::hoist_magic`]
    /// computed them.
    pub(super) fn magic_slots(&self, e: &Expr) -> Option<(i32, i32)> {
        self.magics.iter().find(|r| r.0 == e.addr()).map(|r| (r.1, r.2))
    }

    /// The quotient (or with `rem` the remainder) of the lanes of `ymm{d}` by those of
    /// `ymm{d+1}` (equal lanes, checked not 0 where a lane is active), i32 where `signed`,
    /// into `ymm{d}`, with the magic number and shifts in `slots`; with `both`, the other
    /// one into that slot too (`near.rs`'s pairs). `ymm{d+2}` to `ymm{d+4}` are clobbered.
    pub(super) fn magic_div(
        &mut self,
        rem: bool,
        signed: bool,
        (m, s): (i32, i32),
        d: usize,
        both: Option<i32>,
    ) -> R<()> {
        let (x, y, t, u, v) = (YMM[d], YMM[d + 1], YMM[d + 2], YMM[d + 3], YMM[d + 4]);
        let a = &mut self.a;
        // The magnitude of a signed dividend in u, the quotient's sign (-1 or 0) in v.
        let n = if signed {
            a.vpxor(v, x, y)?;
            a.vpsrad(v, v, 31)?;
            a.vpabsd(u, x)?;
            u
        } else {
            x
        };
        // t = the high halves of n * m' (even lanes, then odd lanes shifted down, blended).
        a.vpmuludq(t, n, ymmword_ptr(r15 + m))?;
        a.vpsrlq(u, n, 32)?;
        a.vpmuludq(u, u, ymmword_ptr(r15 + m))?;
        a.vpsrlq(t, t, 32)?;
        a.vpblendd(t, t, u, 0xaa)?;
        if signed {
            a.vpabsd(u, x)?;
            a.vpsubd(u, u, t)?;
        } else {
            a.vpsubd(u, x, t)?;
        }
        a.vpsrld(u, u, xmmword_ptr(r15 + s))?;
        a.vpaddd(t, t, u)?;
        a.vpsrld(t, t, xmmword_ptr(r15 + s + 16))?;
        if signed {
            a.vpxor(t, t, v)?;
            a.vpsubd(t, t, v)?;
        }
        if !rem && both.is_none() {
            a.vmovdqa(x, t)?;
            return Ok(());
        }
        // The remainder n - q d (wrapping) into u.
        a.vpmulld(u, t, y)?;
        a.vpsubd(u, x, u)?;
        if let Some(other) = both {
            // The one asked for into x, the other into its slot.
            let (mine, theirs) = if rem { (u, t) } else { (t, u) };
            a.vmovups(ymmword_ptr(r15 + other), theirs)?;
            a.vmovdqa(x, mine)?;
            return Ok(());
        }
        a.vmovdqa(x, u)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every quotient by `d` is right, checked at both ends of every run of dividends with
    /// one quotient (`k d` and `k d + d - 1`): [`model`] is nondecreasing in the dividend
    /// (`t` is, and so is `floor((n + t) / 2^l)`), so that covers every u32.
    fn unsigned_all(d: u32) {
        let mg = magic(d);
        let mut k = 0u64;
        while k * d as u64 <= u32::MAX as u64 {
            let lo = (k * d as u64) as u32;
            let hi = (k * d as u64 + d as u64 - 1).min(u32::MAX as u64) as u32;
            assert_eq!(model(lo, mg), k as u32, "{lo} / {d} ({mg:?})");
            assert_eq!(model(hi, mg), k as u32, "{hi} / {d} ({mg:?})");
            k += 1;
        }
    }

    fn lcg(s: &mut u64) -> u32 {
        *s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (*s >> 32) as u32
    }

    #[test]
    fn magic_numbers_are_exact_for_every_dividend() {
        let mut divisors: Vec<u32> = vec![641, 1000, 10007, 65535, 65536, 65537, 1_000_000];
        divisors.extend([0x00ff_ffff, 0x7fff_ffff, 0x8000_0000, 0x8000_0001, 0xb504_f333]);
        divisors.extend([0xffff_fffe, 0xffff_ffff]);
        // The small ones take ~2^33 / d checks each: release builds only.
        if !cfg!(debug_assertions) {
            divisors.extend([3, 7, 10, 25, 509, 515]);
        }
        let mut s = 11u64;
        for _ in 0..200 {
            let r = lcg(&mut s);
            divisors.push((r >> (r % 12)).max(1 << 20));
        }
        for d in divisors {
            unsigned_all(d);
        }
    }

    /// Dividends around multiples of `d`, the ends of the range and random ones.
    fn samples(d: u32, s: &mut u64) -> Vec<u32> {
        let mut v = vec![0, 1, 2, d - 1, d, d.wrapping_add(1), u32::MAX, u32::MAX - 1];
        v.extend([0x7fff_ffff, 0x8000_0000, 0x8000_0001]);
        let top = u32::MAX / d * d;
        v.extend([top, top.wrapping_sub(1), top.wrapping_add(d - 1)]);
        for _ in 0..100 {
            let r = lcg(s);
            let q = r / d;
            v.extend([r, q * d, (q * d).wrapping_sub(1), (q * d).wrapping_add(d - 1)]);
        }
        v
    }

    #[test]
    fn magic_numbers_are_right_on_samples_of_many_divisors() {
        let mut s = 5u64;
        let mut divisors: Vec<u32> = (1..=2000).collect();
        divisors.extend((0..32).flat_map(|k| [1u32 << k, (1u32 << k) + 1, (1u32 << k) - 1]));
        divisors.extend((0..1000).map(|i| u32::MAX - i));
        for _ in 0..3000 {
            let r = lcg(&mut s);
            divisors.push((r >> (r % 32)).max(1));
        }
        for d in divisors.into_iter().filter(|&d| d != 0) {
            let mg = magic(d);
            for n in samples(d, &mut s) {
                assert_eq!(model(n, mg), n / d, "{n} / {d} ({mg:?})");
            }
        }
        // Small dividends for every small divisor, every one of them.
        for d in 1..=300u32 {
            let mg = magic(d);
            for n in 0..5000u32 {
                assert_eq!(model(n, mg), n / d, "{n} / {d}");
            }
        }
        assert_eq!(magic(0), magic(1));
        assert_eq!(magic(1), (1, 0, 0));
        assert_eq!(magic(u32::MAX), (2, 1, 31));
    }

    #[test]
    fn signed_quotients_truncate_and_wrap_like_the_interpreter() {
        let mut s = 3u64;
        let mut divisors: Vec<i32> = (1..=500).flat_map(|c| [c, -c]).collect();
        divisors.extend([i32::MIN, i32::MIN + 1, i32::MAX, i32::MAX - 1, 1 << 30, -(1 << 30)]);
        for _ in 0..1000 {
            let c = lcg(&mut s) as i32 >> (s % 31);
            if c != 0 {
                divisors.push(c);
            }
        }
        for c in divisors {
            let mut v = vec![0, 1, -1, 2, -2, i32::MIN, i32::MIN + 1, i32::MAX, i32::MAX - 1];
            let ca = c.unsigned_abs() as i64;
            for k in [1i64, 2, 3, 1000, (i32::MAX as i64) / ca, (i32::MAX as i64) / ca + 1] {
                for off in [-1i64, 0, 1, ca - 1] {
                    for sign in [1i64, -1] {
                        if let Ok(a) = i32::try_from(sign * (k * ca + off)) {
                            v.push(a);
                        }
                    }
                }
            }
            v.extend((0..50).map(|_| lcg(&mut s) as i32));
            for a in v {
                assert_eq!(model_signed(a, c), a.wrapping_div(c), "{a} / {c}");
            }
        }
    }
}
