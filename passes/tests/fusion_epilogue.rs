//! Epilogue (store-side) fusion: element-wise consumers run at the producer's stores. Every
//! fused kernel is run on the interpreter against the kernels one after another (the
//! oracle), bit for bit; what kiln cannot prove is refused naming the rule.

mod fusion_util;

use fusion_util::epilogue::{check_chain, random_chain, vals};
use fusion_util::{check, fuse_err, Entry, Scenario};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::parse_module;
use kiln_passes::fusion::{
    explain_epilogue, fusion_key, ArgMap, ConstValue, Constant, FusionError, FusionSpec, ParamRef,
    PromoteTo, Promotion, RangeSpec,
};

/// A 2-D producer (one work-item per element of an `h x w` matrix, row-major) and 1-D
/// element-wise consumers over a range rounded up to 64, guarded by `i < n`.
const M: &str = "
kernel prod(a: ptr<global, f32>, x: ptr<global, f32>) {
  let c: u32 = global_id(0); let r: u32 = global_id(1);
  x[r * 12u32 + c] = a[r * 12u32 + c] * 2.0;
}
kernel bias(x: ptr<global, f32>, b: ptr<global, f32>, y: ptr<global, f32>, n: u32) {
  let i: u32 = global_id(0);
  if i < n { y[i] = x[i] + b[i % 12u32]; }
}
kernel relu(y: ptr<global, f32>, n: u32) {
  let e: i32 = global_id(0) as i32;
  if e < n as i32 { y[e] = max(y[e], 0.0); }
}
kernel shifted(x: ptr<global, f32>, y: ptr<global, f32>) {
  let i: u32 = global_id(0);
  if i < 60u32 { y[i] = x[i] + x[i + 1u32]; }
}
kernel unguarded(x: ptr<global, f32>, y: ptr<global, f32>) {
  let i: u32 = global_id(0);
  y[i] = x[i] * 3.0;
}
kernel synced(x: ptr<global, f32>, y: ptr<global, f32>) {
  let i: u32 = global_id(0);
  barrier(local, global);
  if i < 60u32 { y[i] = x[i]; }
}
kernel reversed(x: ptr<global, f32>, y: ptr<global, f32>) {
  let i: u32 = global_id(0);
  if i < 60u32 { y[i] = x[59u32 - i]; }
}
kernel readfirst(x: ptr<global, f32>, b: ptr<global, f32>, y: ptr<global, f32>) {
  let i: u32 = global_id(0);
  let v: f32 = b[i / 5u32];
  if i < 60u32 { y[i] = x[i] + v; }
}
kernel divfirst(x: ptr<global, f32>, y: ptr<global, f32>) {
  let i: u32 = global_id(0);
  let q: u32 = 600u32 / (63u32 - i);
  if i < 60u32 { y[i] = x[i] + q as f32; }
}
kernel readback(a: ptr<global, f32>, x: ptr<global, f32>) {
  let i: u32 = global_id(0);
  x[i] = a[i]; a[i] = x[i] * 2.0;
}
kernel twice(a: ptr<global, f32>, x: ptr<global, f32>) {
  let i: u32 = global_id(0);
  x[i] = a[i]; x[i] = a[i] + 1.0;
}
";

/// `prod` over 12 x 5, then the given consumers over 64 work-items with n = 60; pool:
/// a, x, b, y.
fn chain(consumers: &[&str]) -> Scenario {
    let module = parse_module(M).unwrap();
    let mut kernels = vec!["prod".to_string()];
    let mut ndranges = vec![RangeSpec::new(&[12, 5])];
    let mut entries = vec![Entry {
        kernel: "prod".into(),
        range: NdRange::new(&[12, 5]),
        args: vec![Arg::Buffer(0), Arg::Buffer(1)],
    }];
    let mut identical = Vec::new();
    let mut constants = Vec::new();
    for (e, c) in consumers.iter().enumerate() {
        // The guards' bound is a constant of the fusion: the proof needs its value.
        match *c {
            "bias" => constants
                .push(Constant { param: ParamRef::new(e + 1, 3), value: ConstValue::Int(60) }),
            "relu" => constants
                .push(Constant { param: ParamRef::new(e + 1, 1), value: ConstValue::Int(60) }),
            _ => {}
        }
        kernels.push(c.to_string());
        ndranges.push(RangeSpec::new(&[64]).with_local(&[16]));
        let args = match *c {
            "bias" => vec![Arg::Buffer(1), Arg::Buffer(2), Arg::Buffer(3), Arg::scalar(60u32)],
            "relu" => vec![Arg::Buffer(3), Arg::scalar(60u32)],
            "readfirst" => vec![Arg::Buffer(1), Arg::Buffer(2), Arg::Buffer(3)],
            _ => vec![Arg::Buffer(1), Arg::Buffer(3)],
        };
        entries.push(Entry {
            kernel: c.to_string(),
            range: NdRange::new(&[64]).with_local(&[16]),
            args,
        });
    }
    // Identical arguments: every use of each pool buffer.
    for b in 0..4 {
        let mut g = Vec::new();
        for (e, en) in entries.iter().enumerate() {
            for (p, a) in en.args.iter().enumerate() {
                if *a == Arg::Buffer(b) {
                    g.push(ParamRef::new(e, p));
                }
            }
        }
        if g.len() > 1 {
            identical.push(g);
        }
    }
    let spec = FusionSpec {
        name: "fused".into(),
        kernels,
        ndranges,
        identical,
        constants,
        epilogue: true,
        ..FusionSpec::default()
    };
    let pool =
        vec![vals(60, 1), Buffer::zeroed(kiln_ir::Scalar::F32, 60), vals(12, 5), vals(64, 9)];
    Scenario { module, spec, entries, pool }
}

#[test]
fn bias_then_relu_run_at_the_producers_store() {
    let s = chain(&["bias", "relu"]);
    let f = check(&s).unwrap();
    let text = f.kernel.to_string();
    // One kernel over the producer's range, no barrier, the consumers' work in it.
    assert!(text.contains("#nd_range(global = [12, 5]"), "{text}");
    assert!(!text.contains("barrier"), "{text}");
    assert!(text.contains("max("), "{text}");
    let report = explain_epilogue(&s.module, &s.spec);
    assert!(report.refused.is_none(), "{report}");
    // The same list fused one kernel after another is another fused kernel: another key.
    let plain = FusionSpec { epilogue: false, ..s.spec.clone() };
    assert_ne!(fusion_key(&s.module, &s.spec), fusion_key(&s.module, &plain));
    assert_eq!(report.steps.len(), 2, "{report}");
    assert!(report.steps[0].contains("entry 1 (`bias`) runs at 1 store(s) of `x`"), "{report}");
    assert!(report.steps[1].contains("60 of its work-items"), "{report}");
}

#[test]
fn an_internalized_input_is_never_stored() {
    let mut s = chain(&["bias"]);
    s.spec.promote = vec![Promotion {
        param: ParamRef::new(0, 1),
        to: PromoteTo::Private,
        size: None,
        buffer_len: None,
    }];
    let f = check(&s).unwrap();
    assert_eq!(f.args[0][1], ArgMap::Promoted { to: PromoteTo::Private, size: 1 });
    assert_eq!(f.kernel.params().len(), 3, "{}", f.kernel);
    assert!(!f.kernel.to_string().contains("prod_x["), "{}", f.kernel);
}

fn refusal(consumers: &[&str]) -> String {
    match fuse_err(&chain(consumers)) {
        e @ FusionError::Epilogue { .. } => e.to_string(),
        e => panic!("not an epilogue refusal: {e}"),
    }
}

#[test]
fn a_guard_kiln_cannot_evaluate_is_refused() {
    // Without `n` as a constant, whether work-items 60..63 touch `x` is not known.
    let mut s = chain(&["bias"]);
    s.spec.constants.clear();
    let e = fuse_err(&s).to_string();
    assert!(e.contains("work-item [60, 0, 0] accesses `prod_x[i]` (element 60), which the kernels before it do not store"), "{e}");
}

#[test]
fn refusals_name_the_rule() {
    let e = refusal(&["shifted"]);
    assert!(e.contains("rule `epilogue`") && e.contains("two elements of `prod_x`"), "{e}");
    let e = refusal(&["unguarded"]);
    assert!(e.contains("which the kernels before it do not store"), "{e}");
    let e = refusal(&["synced"]);
    assert!(e.contains("it calls `barrier`"), "{e}");
    let mut s = chain(&["bias"]);
    s.spec.kernels[0] = "twice".into();
    s.spec.ndranges[0] = RangeSpec::new(&[60]);
    let e = fuse_err(&s).to_string();
    assert!(e.contains("twice"), "{e}");
    let e = refusal(&["reversed"]);
    assert!(e.contains("does not grow with global_id(0) (coefficient -1)"), "{e}");
    let mut s = chain(&["bias"]);
    s.spec.kernels[0] = "readback".into();
    s.spec.ndranges[0] = RangeSpec::new(&[60]);
    let e = fuse_err(&s).to_string();
    assert!(
        e.contains("do not store `x` once per element: it reads `prod_x[i]` back")
            || e.contains("it reads `readback_x[i]` back"),
        "{e}"
    );
    // The report says the same.
    let r = explain_epilogue(&chain(&["shifted"]).module, &chain(&["shifted"]).spec);
    assert!(r.to_string().contains("epilogue fusion refused: rule `epilogue`"), "{r}");
}

/// Work-items 60..63 of a consumer touch no element of `x`, so they run nowhere in the fused
/// kernel: if they could fault unfused (an unguarded read past the end of `b`, a division
/// by zero), fusing would lose the fault, and is refused.
#[test]
fn a_work_item_that_runs_nowhere_must_not_be_able_to_fault() {
    for (consumer, what) in [("readfirst", "reads `readfirst_b[i / 5]`"), ("divfirst", "divides")] {
        let s = chain(&[consumer]);
        // Unfused, the list faults at work-item 63 (b has 12 elements; 63 - 63 = 0).
        let err = fusion_util::run_sequential(&s).expect_err(consumer);
        assert!(err.contains("work-item (6"), "{consumer}: {err}");
        let e = refusal(&[consumer]);
        assert!(
            e.contains("touches no element of `prod_x` but ") && e.contains(what),
            "{consumer}: {e}"
        );
        assert!(e.contains("runs nowhere in the fused kernel"), "{e}");
    }
}

// ---- random producers and chains ---------------------------------------------------------

use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Random producers and element-wise chains (guards, rounded-up and padded ranges, in
    /// place or not, 1-D and 2-D consumers, the producer's output internalized or not):
    /// the fused kernel gives the bits of the kernels one after another.
    #[test]
    fn random_chains_equal_the_kernels_one_after_another(
        w in 1u32..9, h in 1u32..6, pad in (0u32..3, 0u32..3),
        ops in prop::collection::vec(0u8..6, 1..5),
        ls in prop::sample::select(vec![1u32, 4, 8, 16]),
        promote in any::<bool>(),
    ) {
        let s = random_chain(w, h, pad, &ops, ls, promote);
        check_chain(&s, &ops).map_err(|e| TestCaseError::fail(format!("{e}\n{}", s.module)))?;
    }
}
