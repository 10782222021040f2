//! The divergence analysis is sound: on random kernels run by the interpreter, every value it
//! calls uniform is equal across the work-items of each 64-lane wavefront at each dynamic
//! instance (see `kiln_passes::divergence::trace`).

use std::collections::HashSet;

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::parse_module;
use kiln_ir::testing::{arb_kernel_with, GenConfig};
use kiln_passes::divergence::{analyze, analyze_with, trace::check_uniformity};
use proptest::prelude::*;

fn cfg() -> GenConfig {
    // Up to 160 work-items: several work-groups, and groups wider than one wavefront.
    GenConfig { max_work_items: 160, ..GenConfig::default() }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: std::env::var("DIVERGENCE_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(256), ..ProptestConfig::default() })]
    #[test]
    fn analysis_is_sound_on_random_kernels(case in arb_kernel_with(cfg())) {
        let div = analyze(&case.kernel);
        let r = check_uniformity(&case.kernel, &div, &case.range, &case.args, &case.buffers);
        prop_assert!(r.is_ok(), "{}", r.unwrap_err());
    }
}

/// The checker itself catches a wrong claim: force a divergent value uniform.
#[test]
fn checker_catches_a_planted_wrong_claim() {
    let m = parse_module(
        "kernel k(out: ptr<global, u32>) {
            var i: u32 = 0;
            while i < local_id(0) % 3 {
                i = i + 1;
            }
            let t: u32 = local_id(0) * 2;
            out[local_id(0)] = t + i;
        }",
    )
    .unwrap();
    let k = &m.kernels[0];
    let range = NdRange::new(&[64]).with_local(&[64]);
    let bufs = vec![Buffer::zeroed(kiln_ir::Scalar::U32, 64)];
    let args = vec![Arg::Buffer(0)];
    let honest = check_uniformity(k, &analyze(k), &range, &args, &bufs).unwrap();
    assert!(honest > 0);
    let t = k.body().stmts().iter().find_map(|s| match s.node() {
        kiln_ir::StmtNode::Let { var, .. } => Some(var.clone()),
        _ => None,
    });
    let forced: HashSet<_> = t.into_iter().collect();
    let err = check_uniformity(k, &analyze_with(k, &forced), &range, &args, &bufs).unwrap_err();
    assert!(err.contains("claimed uniform"), "{err}");
}
