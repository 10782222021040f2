//! E-graph runs the process keeps (by limits and shape) give exactly what running them
//! gives: kernels of random `let`s simplified with no kept run, then again with the runs the
//! first simplification kept, come back equal, under the default limits and under a work
//! budget so small that it runs out part way (a kept run must be charged the work it did,
//! or the later expressions would get e-graphs the first time denied them).

use kiln_ir::testing::{arb_expr, ExprEnv};
use kiln_ir::{Kernel, Mutator, Scalar, Stmt, Type, Var};
use kiln_passes::simplify::{forget_kept_runs, Limits, StmtSimplifier};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

#[test]
fn kept_runs_give_what_running_gives() {
    let vars = vec![
        Var::new("a", Type::I32),
        Var::new("b", Type::I32),
        Var::new("u", Type::U32),
        Var::new("l", Type::I64),
        Var::new("f", Type::F32),
        Var::new("p", Type::BOOL),
    ];
    let env = ExprEnv { vars: vars.clone(), buffers: vec![] };
    let tys = [Scalar::I32, Scalar::U32, Scalar::I64, Scalar::F32, Scalar::Bool];
    let one = proptest::sample::select(tys.to_vec())
        .prop_flat_map(move |ty| arb_expr(ty, env.clone(), 4));
    let strat = proptest::collection::vec(one, 10..40);
    // Without the cheap pass every expression goes to an e-graph: the budget runs out.
    let tight = Limits { nodes: 100, work_per_node: 1, presimplify: false, ..Limits::default() };
    let mut runner =
        TestRunner::new(Config { cases: 100, failure_persistence: None, ..Config::default() });
    let result = runner.run(&strat, |exprs| {
        let body = exprs
            .iter()
            .enumerate()
            .map(|(i, e)| Stmt::let_(&Var::new(format!("x{i}"), e.ty()), e.clone()));
        let k = Kernel::new("lets", vars.clone(), Stmt::block(body));
        for limits in [&Limits::default(), &tight] {
            // Other tests of this binary may keep runs meanwhile: each only adds runs that
            // are what running would give, so `cold` is the reference either way.
            forget_kept_runs();
            let cold = StmtSimplifier::new(limits.clone()).mutate_kernel(&k);
            let warm = StmtSimplifier::new(limits.clone()).mutate_kernel(&k);
            prop_assert!(
                cold.is_equal(&warm) && cold.to_string() == warm.to_string(),
                "{k}\n  without kept runs:\n{cold}\n  with them:\n{warm}"
            );
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
