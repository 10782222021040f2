//! The pass manager: names, the default pipeline, verification after each pass.

use kiln_ir::{parse_module, Kernel, Stmt, Type, Var};
use kiln_passes::manager::{pass_by_name, FnPass, PassError, PassManager, PASSES};
use kiln_passes::pipeline::{default_pipeline, optimize, DEFAULT_PIPELINE};

#[test]
fn every_named_pass_resolves_and_the_default_pipeline_is_complete() {
    for (name, _, _) in PASSES {
        assert_eq!(pass_by_name(name).map(|p| p.name()), Some(*name));
    }
    let pm = PassManager::from_names(DEFAULT_PIPELINE).expect("default pipeline");
    assert_eq!(pm.names().join(","), DEFAULT_PIPELINE);
    assert_eq!(default_pipeline().names().len(), DEFAULT_PIPELINE.split(',').count());
}

#[test]
fn unknown_pass_is_an_error_naming_it() {
    let err = PassManager::from_names("simplify,frobnicate").err().expect("error");
    assert_eq!(err, PassError::UnknownPass("frobnicate".into()));
    assert!(err.to_string().contains("frobnicate"));
    assert!(err.to_string().contains("simplify"));
}

fn breaks_scoping(k: &Kernel) -> Kernel {
    // Uses a variable that is not bound: the verifier must reject this.
    let ghost = Var::new("ghost", Type::U32);
    let out = k.params()[0].clone();
    k.with_body(Stmt::block([Stmt::store(&out, ghost.expr(), ghost.expr())]))
}

#[test]
fn verifier_runs_after_each_pass() {
    let m = parse_module("kernel k(o: ptr<global, u32>) { o[0] = 1u32; }").expect("parses");
    let mut pm = PassManager::new();
    pm.add(pass_by_name("simplify").expect("simplify"));
    pm.add(Box::new(FnPass { name: "broken", f: breaks_scoping }));
    match pm.run(&m.kernels[0]) {
        Err(PassError::Verify { pass, errors }) => {
            assert_eq!(pass, "broken");
            assert!(!errors.is_empty());
        }
        other => panic!("expected a verify error, got {other:?}"),
    }
}

/// Without verification after each pass (release builds' default), a pass's invalid output
/// still fails the run, naming that pass, not the last one: no build ever runs a kernel the
/// verifier rejects.
#[test]
fn an_invalid_result_fails_the_run_without_verification_after_each_pass() {
    let m = parse_module("kernel k(o: ptr<global, u32>) { o[0] = 1u32; }").expect("parses");
    let mut pm = PassManager::new().with_verify(false);
    pm.add(Box::new(FnPass { name: "broken", f: breaks_scoping }));
    pm.add(pass_by_name("simplify").expect("simplify"));
    pm.add(pass_by_name("dce").expect("dce"));
    match pm.run(&m.kernels[0]) {
        Err(PassError::Verify { pass, errors }) => {
            assert_eq!(pass, "broken");
            assert!(errors.iter().any(|e| e.contains("ghost")), "{errors:?}");
        }
        other => panic!("expected a verify error, got {other:?}"),
    }
    // A valid pipeline's result is the same with and without verification after each pass.
    let plain = default_pipeline().with_verify(false).run(&m.kernels[0]).expect("valid");
    let each = default_pipeline().with_verify(true).run(&m.kernels[0]).expect("valid");
    assert_eq!(plain.to_string(), each.to_string());
}

#[test]
fn optimize_cleans_up_a_remapped_kernel() {
    let m = parse_module(
        "kernel k(o: ptr<global, u32>) {
           let g: u32 = global_id(0);
           let r: u32 = g / 4u32 * 4u32 + g % 4u32;
           let unused: u32 = r * 7u32;
           o[r] = r * 2u32;
         }",
    )
    .expect("parses");
    let k = optimize(&m.kernels[0]);
    let text = k.to_string();
    assert!(!text.contains("unused"), "{text}");
    assert!(!text.contains('/'), "{text}");
    assert!(text.contains("o[r] = r << 1;"), "{text}");
}

#[test]
fn timed_run_reports_every_pass_and_verification_in_order() {
    use kiln_passes::manager::Step;
    let m = parse_module(
        "kernel k(o: ptr<global, u32>) { let g: u32 = global_id(0); o[g] = g * 1u32 + 0u32; }",
    )
    .expect("parses");
    let pm = default_pipeline().with_verify(true);
    let (timed, report) = pm.run_timed(&m.kernels[0]).expect("runs");
    // The same kernel as an untimed run.
    assert_eq!(timed.to_string(), pm.run(&m.kernels[0]).expect("runs").to_string());
    let mut want = Vec::new();
    for name in DEFAULT_PIPELINE.split(',') {
        want.push(Step::Pass(name));
        want.push(Step::Verify(name));
    }
    let got: Vec<Step> = report.entries.iter().map(|e| e.step).collect();
    assert_eq!(got, want);
    assert_eq!(report.kernel, "k");
    let text = report.to_string();
    for name in DEFAULT_PIPELINE.split(',') {
        assert!(text.contains(&format!("(verify {name})")), "{text}");
    }
    assert_eq!(
        text.lines().count(),
        2 + want.len() + 1,
        "header, one line per step, total:\n{text}"
    );
}
