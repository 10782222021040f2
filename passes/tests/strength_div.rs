//! Division by constants of bounded dividends (`kiln_passes::strength::div`), differentially:
//! random kernels divide and take remainders of `i32` values built from work-item and
//! work-group ids (bounded by `#reqd_work_group_size`, and by `#nd_range` where the caller
//! says the kernel is launched with it: `lower_divisions_at_range`), loop counters and
//! `let`s through the operators the range analysis follows, with constants near the ends of
//! the ranges it accepts (so that a multiplier barely fits, or does not), and values it must
//! not trust: parameters (negative ones too), differences that go negative, narrowing casts
//! that wrap, mutable variables. The `strength` pass (every case) and the default pipeline
//! (every fourth case) must reproduce the interpreter's buffers exactly, and the rewrite must
//! actually happen. `KILN_PASS_CASES` sets the number of cases (default 500).

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::testing::{results_match, Choices, TestCase};
use kiln_ir::{
    verify_kernel, AddrSpace, Attrs, BinOp, Expr, Intrinsic, Kernel, NdRangeAttr, Scalar, Stmt,
    Type, Var,
};
use kiln_passes::pipeline::optimize;
use kiln_passes::strength::div::{lower_divisions, lower_divisions_at_range};
use kiln_passes::strength::strength;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

fn cases() -> u32 {
    std::env::var("KILN_PASS_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(500)
}

const DIVISORS: [i128; 16] = [2, 3, 5, 6, 7, 9, 12, 25, 49, 100, 641, 3136, 8, 64, 1, -3];

fn i(v: i128) -> Expr {
    Expr::int(Scalar::I32, v)
}

struct DivGen<'a, 'b> {
    c: &'a mut Choices<'b>,
    /// Immutable `i32` names in scope (counters and `let`s).
    names: Vec<Var>,
    p: Var,
    w: Var,
}

impl DivGen<'_, '_> {
    /// A constant: small, a power of two up to 2^30 (near the multiplier's limits) or one
    /// less.
    fn konst(&mut self) -> Expr {
        match self.c.below(3) {
            0 => i(self.c.below(20) as i128),
            1 => i(1 << self.c.below(31)),
            _ => i((1 << (1 + self.c.below(30))) - 1),
        }
    }

    /// An `i32` value; `depth` bounds the tree.
    fn value(&mut self, depth: u32) -> Expr {
        let leaf = depth == 0 || self.c.chance(30);
        if leaf {
            return match self.c.below(8) {
                0 => self.konst(),
                1 => Expr::local_id(0).cast(Scalar::I32),
                2 => Expr::group_id(0).cast(Scalar::I32),
                3 => self.p.expr(),
                4 => self.w.expr(),
                _ if !self.names.is_empty() => self.names[self.c.below(self.names.len())].expr(),
                _ => Expr::local_id(0).cast(Scalar::I32),
            };
        }
        let (a, b) = (self.value(depth - 1), self.value(depth - 1));
        match self.c.below(12) {
            0 | 1 => Expr::binary(BinOp::Add, a, b),
            2 => Expr::binary(BinOp::Mul, a, b),
            3 => Expr::binary(BinOp::Sub, a, b),
            4 => Expr::binary(BinOp::Div, a, i(DIVISORS[self.c.below(DIVISORS.len())])),
            5 => Expr::binary(BinOp::Rem, a, i(DIVISORS[self.c.below(DIVISORS.len())])),
            6 => Expr::binary(BinOp::Shr, a, i(self.c.below(32) as i128)),
            7 => Expr::binary(BinOp::And, a, b),
            8 => Expr::intrinsic(Intrinsic::Min, [a, b]),
            9 => Expr::intrinsic(Intrinsic::Max, [a, b]),
            10 => Expr::select(a.clone().cmp_lt(b.clone()), a, b),
            _ => {
                let t = [Scalar::I8, Scalar::U8, Scalar::I16, Scalar::U32, Scalar::I64];
                a.cast(t[self.c.below(t.len())]).cast(Scalar::I32)
            }
        }
    }

    /// Stores `value / d` or `value % d` to the next slot of the work-item's row.
    fn division(&mut self, out: &Var, slot: &mut i128) -> Stmt {
        let x = self.value(3);
        let d = i(DIVISORS[self.c.below(DIVISORS.len())]);
        let op = if self.c.chance(50) { BinOp::Div } else { BinOp::Rem };
        let at = Expr::binary(
            BinOp::Add,
            Expr::binary(BinOp::Mul, Expr::global_id(0).cast(Scalar::I32), i(SLOTS)),
            i(*slot % SLOTS),
        );
        *slot += 1;
        Stmt::store(out, at, Expr::binary(op, x, d))
    }
}

const SLOTS: i128 = 8;

fn div_case(raw: &[u32]) -> TestCase {
    let mut c = Choices::new(raw);
    let local = 1 + c.below(16) as u32;
    let groups = 1 + c.below(4) as u32;
    let out = Var::new("out", Type::ptr(AddrSpace::Global, Scalar::I32));
    let p = Var::new("p", Type::I32);
    let w = Var::new("w", Type::I32);
    let pv = [-7, -1, 0, 5, 1 << 29, i32::MIN as i128][c.below(6)];
    let mut g = DivGen { c: &mut c, names: Vec::new(), p: p.clone(), w: w.clone() };
    let mut body = vec![Stmt::decl(&w, Expr::local_id(0).cast(Scalar::I32))];
    let mut slot = 0;
    for n in 0..1 + g.c.below(3) {
        let x = Var::new(format!("x{n}"), Type::I32);
        let value = g.value(2);
        body.push(Stmt::let_(&x, value));
        g.names.push(x);
        if g.c.chance(40) {
            body.push(Stmt::assign(&w, Expr::binary(BinOp::Sub, w.expr(), i(3))));
        }
        body.push(g.division(&out, &mut slot));
    }
    let it = Var::new("it", Type::I32);
    let hi = i(1 + g.c.below(6) as i128);
    g.names.push(it.clone());
    let mut inner = Vec::new();
    for _ in 0..1 + g.c.below(3) {
        inner.push(g.division(&out, &mut slot));
    }
    body.push(Stmt::for_(&it, i(0), hi, i(1), Stmt::block(inner)));
    let attrs = Attrs {
        reqd_work_group_size: g.c.chance(50).then_some([local, 1, 1]),
        nd_range: Some(NdRangeAttr {
            global: vec![local * groups],
            local: Some(vec![local]),
            offset: vec![0],
        }),
        ..Attrs::default()
    };
    let elems = (local * groups) as usize * SLOTS as usize;
    TestCase {
        kernel: Kernel::with_attrs("divs", vec![out, p], attrs, Stmt::block(body)),
        range: NdRange::new(&[local * groups]).with_local(&[local]),
        args: vec![Arg::Buffer(0), Arg::Scalar(kiln_ir::Imm::int(Scalar::I32, pv))],
        buffers: vec![Buffer::zeroed(Scalar::I32, elems)],
    }
}

fn check(name: &str, f: &dyn Fn(&Kernel) -> Kernel, case: &TestCase) -> Result<(), String> {
    verify_kernel(&case.kernel).map_err(|e| format!("generated kernel is invalid: {e:?}"))?;
    let k2 = f(&case.kernel);
    verify_kernel(&k2).map_err(|e| format!("{name}: output does not verify: {e:?}\n{k2}"))?;
    // Errors (a division by zero, an overflowing one) must stay the same errors.
    let want = case.run().map_err(|e| e.to_string());
    let got = case.run_kernel(&k2).map_err(|e| e.to_string());
    let bad = |m: String| format!("{name}: {m}\n--- input\n{}\n--- output\n{k2}", case.kernel);
    match (want, got) {
        (Ok(want), Ok(got)) => results_match(&want, &got).map_err(bad),
        (Err(a), Err(b)) if a == b => Ok(()),
        (a, b) => Err(bad(format!("{a:?} became {b:?}"))),
    }
}

#[test]
fn bounded_divisions_match_interpreter() {
    let mut runner =
        TestRunner::new(Config { cases: cases(), failure_persistence: None, ..Config::default() });
    let r = runner.run(&vec(any::<u32>(), 0..200), |raw| {
        let case = div_case(&raw);
        check("strength", &strength, &case).map_err(TestCaseError::fail)?;
        // The cases are launched with their `#nd_range`, so bounding ids by it is exact.
        check("at range", &lower_divisions_at_range, &case).map_err(TestCaseError::fail)?;
        if raw.first().is_some_and(|x| x % 4 == 0) {
            check("-O", &optimize, &case).map_err(TestCaseError::fail)?;
        }
        Ok(())
    });
    if let Err(e) = r {
        panic!("{e}");
    }
}

#[test]
fn bounded_divisions_are_rewritten_in_generated_kernels() {
    let n = cases();
    let mut runner = TestRunner::deterministic();
    let strat = vec(any::<u32>(), 0..200);
    let (mut rewritten, mut kept) = (0, 0);
    for _ in 0..n {
        let raw = proptest::strategy::ValueTree::current(&strat.new_tree(&mut runner).unwrap());
        let case = div_case(&raw);
        let before = case.kernel.to_string();
        let after = lower_divisions_at_range(&case.kernel).to_string();
        let divs = |s: &str| s.matches(" / ").count() + s.matches(" % ").count();
        if divs(&after) < divs(&before) {
            rewritten += 1;
        }
        if divs(&after) > 0 {
            kept += 1;
        }
    }
    eprintln!("divisions rewritten in {rewritten} of {n} kernels, some kept in {kept}");
    assert!(rewritten >= n / 2, "only {rewritten} of {n} kernels had a division rewritten");
    assert!(kept >= n / 4, "only {kept} of {n} kernels kept a division (the unsafe ones)");
}

/// `#nd_range` is only the range a kernel is meant for: `kiln run --global` launches it with
/// another, so the `-O` pipeline must not bound work-group ids by it. Here `group_id(0) / 3`
/// is exact for the 4 groups the attribute names but not for the 4000 of the launch.
#[test]
fn the_pipeline_does_not_trust_nd_range() {
    let src = "kernel k(x: ptr<global, i32>) #nd_range(global = [4], local = [1], offset = [0]) {
        let g: i32 = group_id(0) as i32;
        x[g] = g / 3;
    }";
    let m = kiln_ir::parse_file("k.kir", src).unwrap();
    let k = &m.module.kernels[0];
    assert!(lower_divisions(k).to_string().contains("g / 3"), "{}", lower_divisions(k));
    assert!(!lower_divisions_at_range(k).to_string().contains("g / 3"));
    let case = TestCase {
        kernel: k.clone(),
        range: NdRange::new(&[4000]).with_local(&[1]),
        args: vec![Arg::Buffer(0)],
        buffers: vec![Buffer::zeroed(Scalar::I32, 4000)],
    };
    check("strength", &strength, &case).unwrap();
    check("-O", &optimize, &case).unwrap();
}
