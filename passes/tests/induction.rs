//! Induction-variable strength reduction, differentially: random loop nests built to contain
//! the reducible forms (`i * c`, `c * i`, `i * c + d`, `d + c * i`) with counters of every
//! integer type, bounds near the type's minimum and maximum (so products wrap), constant,
//! parameter and per-work-item invariants, variable steps and nested loops. The `strength`
//! pass (every case) and the default pipeline (every fourth case) must reproduce the
//! interpreter's buffers exactly, and the reduction must actually happen. `KILN_PASS_CASES` sets the number of cases (default 500).

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::testing::{gen_imm, results_match, Choices, TestCase};
use kiln_ir::{verify_kernel, AddrSpace, BinOp, Expr, Kernel, Scalar, Stmt, Type, Var};
use kiln_passes::pipeline::optimize;
use kiln_passes::strength::{iv::reduce_induction, strength};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

fn cases() -> u32 {
    std::env::var("KILN_PASS_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(500)
}

struct LoopGen<'a, 'b> {
    c: &'a mut Choices<'b>,
    t: Scalar,
    params: Vec<Var>,
    acc: Var,
    loops: usize,
}

impl LoopGen<'_, '_> {
    fn konst(&mut self) -> Expr {
        let t = self.t;
        match self.c.below(4) {
            0 => Expr::int(t, t.int_max().unwrap_or(0) - self.c.below(3) as i128),
            1 => Expr::int(t, t.int_min().unwrap_or(0) + self.c.below(3) as i128),
            2 => Expr::int(t, self.c.below(9) as i128 - 4),
            _ => Expr::imm(gen_imm(self.c, t)),
        }
    }

    /// A loop-invariant value: a constant, a parameter, the work-item id, or a sum of two.
    fn invariant(&mut self, depth: u32) -> Expr {
        match self.c.below(if depth == 0 { 3 } else { 4 }) {
            0 => self.konst(),
            1 => self.params[self.c.below(self.params.len())].expr(),
            2 => Expr::global_id(0).cast(self.t),
            _ => Expr::binary(BinOp::Add, self.invariant(depth - 1), self.invariant(depth - 1)),
        }
    }

    /// A value computed from the counters in scope, in one of the reducible forms (or, now
    /// and then, something else).
    fn value(&mut self, counters: &[Var]) -> Expr {
        let i = counters[self.c.below(counters.len())].expr();
        let c = self.invariant(1);
        let prod = if self.c.chance(50) {
            Expr::binary(BinOp::Mul, i, c)
        } else {
            Expr::binary(BinOp::Mul, c, i)
        };
        match self.c.below(5) {
            0 | 1 => prod,
            2 => Expr::binary(BinOp::Add, prod, self.invariant(1)),
            3 => Expr::binary(BinOp::Add, self.invariant(1), prod),
            // An outer counter's form as `d` of an inner one, or a non-invariant factor.
            _ => {
                let j = counters[self.c.below(counters.len())].expr();
                Expr::binary(BinOp::Add, prod, Expr::binary(BinOp::Mul, j.clone(), j))
            }
        }
    }

    fn for_loop(&mut self, counters: &mut Vec<Var>, depth: u32) -> Stmt {
        let t = self.t;
        let (min, max) = (t.int_min().unwrap_or(0), t.int_max().unwrap_or(0));
        let len = self.c.below(12) as i128;
        let lo = match self.c.below(3) {
            0 => max - len - self.c.below(3) as i128,
            1 => min + self.c.below(5) as i128,
            _ => self.c.below(20) as i128 - 10,
        }
        .clamp(min, max);
        let hi = (lo + len).min(max);
        let step = Expr::int(t, 1 + self.c.below(4) as i128);
        // Sometimes a non-constant (but stable) start or step.
        let lo_e = if self.c.chance(25) {
            Expr::binary(BinOp::Add, Expr::int(t, lo), Expr::int(t, 0) * self.params[0].expr())
        } else {
            Expr::int(t, lo)
        };
        let step = if self.c.chance(20) {
            Expr::binary(BinOp::Add, step, Expr::int(t, 0) * self.params[1].expr())
        } else {
            step
        };
        let var = Var::new(format!("it{}", self.loops), Type::Scalar(t));
        self.loops += 1;
        counters.push(var.clone());
        let mut body = Vec::new();
        for _ in 0..1 + self.c.below(3) {
            if depth < 2 && self.c.chance(30) {
                body.push(self.for_loop(counters, depth + 1));
            } else {
                let v = self.value(counters);
                // acc = acc * 3 ^ v: every value and its order matter.
                let mixed = Expr::binary(
                    BinOp::Xor,
                    Expr::binary(BinOp::Mul, self.acc.expr(), Expr::int(t, 3)),
                    v,
                );
                body.push(Stmt::assign(&self.acc, mixed));
            }
        }
        counters.pop();
        Stmt::for_(&var, lo_e, Expr::int(t, hi), step, Stmt::block(body))
    }
}

fn loop_case(raw: &[u32]) -> TestCase {
    let mut c = Choices::new(raw);
    let t = Scalar::INTS[c.below(Scalar::INTS.len())];
    let out = Var::new("out", Type::ptr(AddrSpace::Global, t));
    let params: Vec<Var> = (0..2).map(|k| Var::new(format!("p{k}"), Type::Scalar(t))).collect();
    let acc = Var::new("acc", Type::Scalar(t));
    let mut g = LoopGen { c: &mut c, t, params: params.clone(), acc: acc.clone(), loops: 0 };
    let mut body = vec![Stmt::decl(&acc, Expr::int(t, 0))];
    for _ in 0..1 + g.c.below(2) {
        body.push(g.for_loop(&mut Vec::new(), 0));
    }
    body.push(Stmt::store(&out, Expr::global_id(0), acc.expr()));
    let mut all = vec![out];
    all.extend(params.iter().cloned());
    let args = vec![Arg::Buffer(0), Arg::Scalar(gen_imm(g.c, t)), Arg::Scalar(gen_imm(g.c, t))];
    TestCase {
        kernel: Kernel::new("loops", all, Stmt::block(body)),
        range: NdRange::new(&[4]).with_local(&[2]),
        args,
        buffers: vec![Buffer::zeroed(t, 4)],
    }
}

fn check(name: &str, f: &dyn Fn(&Kernel) -> Kernel, case: &TestCase) -> Result<(), String> {
    verify_kernel(&case.kernel).map_err(|e| format!("generated kernel is invalid: {e:?}"))?;
    let want = case.run().map_err(|e| format!("original fails: {e}\n{}", case.kernel))?;
    let k2 = f(&case.kernel);
    verify_kernel(&k2).map_err(|e| format!("{name}: output does not verify: {e:?}\n{k2}"))?;
    let got = case.run_kernel(&k2).map_err(|e| format!("{name}: output fails: {e}\n{k2}"))?;
    results_match(&want, &got)
        .map_err(|m| format!("{name}: {m}\n--- input\n{}\n--- output\n{k2}", case.kernel))
}

#[test]
fn induction_reduction_matches_interpreter() {
    let mut runner =
        TestRunner::new(Config { cases: cases(), failure_persistence: None, ..Config::default() });
    let r = runner.run(&vec(any::<u32>(), 0..200), |raw| {
        let case = loop_case(&raw);
        check("strength", &strength, &case).map_err(TestCaseError::fail)?;
        // The whole pipeline (four times slower: the simplifier) on every fourth case.
        if raw.first().is_some_and(|x| x % 4 == 0) {
            check("-O", &optimize, &case).map_err(TestCaseError::fail)?;
        }
        Ok(())
    });
    if let Err(e) = r {
        panic!("{e}");
    }
}

/// The test above is only meaningful if the reduction happens: in most generated kernels.
#[test]
fn induction_reduction_happens_on_generated_loops() {
    let n = cases();
    let mut runner = TestRunner::deterministic();
    let strat = vec(any::<u32>(), 0..200);
    let mut reduced = 0;
    for _ in 0..n {
        let raw = proptest::strategy::ValueTree::current(&strat.new_tree(&mut runner).unwrap());
        let case = loop_case(&raw);
        if !reduce_induction(&case.kernel).body().ptr_eq(case.kernel.body()) {
            reduced += 1;
        }
    }
    eprintln!("reduced induction variables in {reduced} of {n} generated loop nests");
    assert!(reduced >= n * 3 / 4, "only {reduced} of {n} loop nests were reduced");
}
