//! The text format round-trips: for random well-typed kernels and expressions, parsing what
//! was printed gives a structurally equal object, and printing that again gives the same text.
#![cfg(feature = "testing")]

use kiln_ir::parse::parse_expr;
use kiln_ir::testing::{arb_arith_type, arb_expr, arb_kernel, ExprEnv};
use kiln_ir::{check_source, parse_module, verify_kernel, AddrSpace, Scalar, Type, Var};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn random_kernels_round_trip(case in arb_kernel()) {
        let k = &case.kernel;
        prop_assert!(verify_kernel(k).is_ok(), "generated kernel does not verify: {:?}\n{k}", verify_kernel(k).err());
        let text = k.to_string();
        let m = parse_module(&text).map_err(|d| TestCaseError::fail(format!("{d}\n{text}")))?;
        prop_assert_eq!(m.kernels.len(), 1);
        prop_assert!(m.kernels[0].is_equal(k), "parse(print(k)) differs:\n{}\n---\n{}", text, m.kernels[0]);
        prop_assert_eq!(m.kernels[0].to_string(), text.clone(), "printing is not a fixed point");
        // The located checker agrees that the printed text is a valid program.
        prop_assert!(check_source("random.kir", &text).is_ok());
    }
}

fn env() -> ExprEnv {
    let vars = Scalar::ALL
        .into_iter()
        .filter(|s| *s != Scalar::F16)
        .map(|s| Var::new(format!("v_{s}"), Type::Scalar(s)))
        .collect();
    let buffers = [Scalar::F32, Scalar::I64, Scalar::U8, Scalar::F16]
        .into_iter()
        .map(|s| (Var::new(format!("b_{s}"), Type::Ptr(AddrSpace::Global, s)), 16))
        .collect();
    ExprEnv { vars, buffers }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn random_expressions_round_trip(e in arb_arith_type().prop_flat_map(|t| arb_expr(t, env(), 5))) {
        let env = env();
        let scope: Vec<Var> = env.vars.iter().cloned().chain(env.buffers.iter().map(|(v, _)| v.clone())).collect();
        let text = e.to_string();
        let back = parse_expr(&text, &scope).map_err(|d| TestCaseError::fail(format!("{d}\n{text}")))?;
        prop_assert!(back.is_equal(&e), "{} read back as {}", text, back);
        prop_assert_eq!(back.to_string(), text);
    }
}
