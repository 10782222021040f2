//! Promotion legality (issue 12, item 1): a buffer is promoted to private or local memory only
//! when every kernel's accesses prove it exact; otherwise it stays in global memory with a
//! warning naming the buffer, the kernel and the access. The property test draws random index
//! functions (own index, neighbour, group-relative, strided, data-dependent, constant,
//! reversed) and checks fused-with-promotion against the sequential runs.
//!
//! `KILN_FUSION_CASES` sets the property test's case count (default 1000), e.g.
//! `KILN_FUSION_CASES=20000 cargo test -p kiln-passes --release --test fusion_promotion`.

mod fusion_util;

use fusion_util::{check, promoted_buffers, run_fused, run_sequential, Entry, Scenario};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::parse_module;
use kiln_ir::testing::results_match;
use kiln_passes::fusion::{
    fuse_kernels, ArgMap, BarrierPolicy, FusedKernel, FusionSpec, ParamRef, PromoteTo, Promotion,
    RangeSpec,
};
use proptest::prelude::*;

/// `produce` writes `t` at the given indices, `consume` reads it at the given indices.
/// Buffers: 0 = src, 1 = t, 2 = out, 3 = idx.
fn scenario(
    writes: &[String],
    reads: &[String],
    n: u32,
    local: Option<u32>,
    t_len: usize,
) -> Scenario {
    let stores: String = writes
        .iter()
        .enumerate()
        .map(|(k, w)| format!("  t[{w}] = src[i] + {};\n", k + 1))
        .collect();
    let sum = reads.iter().map(|r| format!("t[{r}]")).collect::<Vec<_>>().join(" + ");
    let text = format!(
        "kernel produce(src: ptr<global, u32>, t: ptr<global, u32>, idx: ptr<global, u32>) {{
  let i: u32 = global_id(0);
{stores}}}
kernel consume(t: ptr<global, u32>, out: ptr<global, u32>, idx: ptr<global, u32>) {{
  let i: u32 = global_id(0);
  out[i] = {sum};
}}"
    );
    let module = parse_module(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
    let mut range = NdRange::new(&[n]);
    let mut rs = RangeSpec::new(&[n]);
    if let Some(l) = local {
        range = range.with_local(&[l]);
        rs = rs.with_local(&[l]);
    }
    let src: Vec<u32> = (0..n).map(|i| 10 * i).collect();
    // Earlier contents of `t` that no correct promotion may read.
    let t: Vec<u32> = (0..t_len as u32).map(|i| 1000 + i).collect();
    // A permutation (a reversal) for data-dependent indices.
    let idx: Vec<u32> = (0..n).rev().collect();
    let pool = vec![
        Buffer::from_slice(&src),
        Buffer::from_slice(&t),
        Buffer::from_slice(&vec![0u32; n as usize]),
        Buffer::from_slice(&idx),
    ];
    let spec = FusionSpec {
        name: "fused".into(),
        kernels: vec!["produce".into(), "consume".into()],
        ndranges: vec![rs.clone(), rs],
        identical: vec![
            vec![ParamRef::new(0, 1), ParamRef::new(1, 0)],
            vec![ParamRef::new(0, 2), ParamRef::new(1, 2)],
        ],
        ..FusionSpec::default()
    };
    let b = Arg::Buffer;
    let entries = vec![
        Entry { kernel: "produce".into(), range, args: vec![b(0), b(1), b(3)] },
        Entry { kernel: "consume".into(), range, args: vec![b(1), b(2), b(3)] },
    ];
    Scenario { module, spec, entries, pool }
}

/// Requests promotion of `produce`'s `t` (parameter 1 in [`scenario`]'s kernels).
fn promote(s: &mut Scenario, to: PromoteTo, size: Option<u32>, buffer_len: Option<u32>) {
    let param = ParamRef::new(0, if s.spec.identical.len() == 1 { 0 } else { 1 });
    s.spec.promote = vec![Promotion { param, to, size, buffer_len }];
}

fn own(s: &str) -> Vec<String> {
    vec![s.to_string()]
}

/// The case: `consume` reads `t[i + 1]`. Promoting `t` to private was accepted and
/// the fused kernel gave `[0, 2, 4, ..., 14]` where the sequence gives `[2, 4, ..., 14, 0]`.
#[test]
fn promotion_of_a_neighbour_read_is_refused() {
    let text = "
kernel produce(t: ptr<global, f32>) { let i: u32 = global_id(0); t[i] = 2.0 * (i as f32); }
kernel consume(t: ptr<global, f32>, out: ptr<global, f32>) {
  let i: u32 = global_id(0);
  out[i] = t[i + 1];
}";
    let r = NdRange::new(&[8]);
    let mut s = Scenario {
        module: parse_module(text).unwrap(),
        spec: FusionSpec {
            name: "fused".into(),
            kernels: vec!["produce".into(), "consume".into()],
            ndranges: vec![RangeSpec::new(&[8]), RangeSpec::new(&[8])],
            identical: vec![vec![ParamRef::new(0, 0), ParamRef::new(1, 0)]],
            ..FusionSpec::default()
        },
        entries: vec![
            Entry { kernel: "produce".into(), range: r, args: vec![Arg::Buffer(0)] },
            Entry {
                kernel: "consume".into(),
                range: r,
                args: vec![Arg::Buffer(0), Arg::Buffer(1)],
            },
        ],
        pool: vec![Buffer::from_slice(&[0f32; 9]), Buffer::from_slice(&[0f32; 8])],
    };
    promote(&mut s, PromoteTo::Private, Some(1), None);
    let f = check(&s).unwrap();
    assert_eq!(f.args[0][0], ArgMap::Param(0), "t stays in global memory");
    assert_eq!(f.warnings.len(), 1, "{:?}", f.warnings);
    let w = f.warnings[0].to_string();
    for needle in ["`t` of `produce`", "entry 1 (`consume`) reads `t[i + 1]`"] {
        assert!(w.contains(needle), "{needle:?} not in: {w}");
    }
    let out = run_fused(&s, &f).unwrap()[1].to_vec::<f32>().unwrap();
    assert_eq!(out, [2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0, 0.0]);
    assert_eq!(out, run_sequential(&s).unwrap()[1].to_vec::<f32>().unwrap());
    // Local promotion is refused as well: the last work-item of a group reads the next group's.
    s.spec.ndranges = vec![RangeSpec::new(&[8]).with_local(&[4]); 2];
    s.entries.iter_mut().for_each(|e| e.range = NdRange::new(&[8]).with_local(&[4]));
    promote(&mut s, PromoteTo::Local, Some(4), None);
    // (Fused at all, the kernels communicate across work-groups, which fusion leaves to the
    // user; only the promotion is checked here.)
    let f = fuse_kernels(&s.module, &s.spec).unwrap();
    assert_eq!(f.args[0][0], ArgMap::Param(0));
    assert!(f.warnings[0].to_string().contains("reads `t[i + 1]`"), "{}", f.warnings[0]);
}

/// Writes, reads, promotion kind, size, buffer length.
type HandCase = (Vec<String>, Vec<String>, PromoteTo, Option<u32>, Option<u32>);

/// One random draw: sizes, write and read index functions, mirror, local, barriers, size.
type Draw = (usize, usize, Vec<u32>, Vec<u32>, bool, bool, u32, u32);

/// The legal patterns are still promoted (so the rule is not "refuse everything").
#[test]
fn promotion_of_own_elements_is_accepted() {
    let cases: [HandCase; 5] = [
        (own("i"), own("i"), PromoteTo::Private, None, Some(8)),
        (
            vec!["2 * i".into(), "2 * i + 1".into()],
            vec!["2 * i + 1".into(), "i * 2".into()],
            PromoteTo::Private,
            None,
            Some(16),
        ),
        (own("i"), own("i"), PromoteTo::Local, None, Some(8)),
        (own("group_id(0) * 4 + local_id(0)"), own("i"), PromoteTo::Local, Some(4), None),
        // Local: written whole by an earlier kernel, read at another work-item's element of
        // the same group, with the barrier between the kernels.
        (own("i"), own("group_id(0) * 4 + (3 - local_id(0))"), PromoteTo::Local, Some(4), None),
    ];
    for (w, r, to, size, len) in cases {
        let mut s = scenario(&w, &r, 8, Some(4), 16);
        promote(&mut s, to, size, len);
        let f = check(&s).unwrap_or_else(|e| panic!("{w:?} {r:?}: {e}"));
        assert!(f.warnings.is_empty(), "{w:?} {r:?} {to:?}: {:?}", f.warnings);
        assert!(matches!(f.args[0][1], ArgMap::Promoted { .. }), "{w:?} {r:?}");
    }
}

/// Each illegal pattern is refused with a warning naming the access.
#[test]
fn promotion_of_foreign_elements_is_refused() {
    for (w, r, to, needle) in [
        ("i", "i + 1", PromoteTo::Private, "reads `t[i + 1]`"),
        ("i", "idx[i]", PromoteTo::Private, "reads memory"),
        ("i", "local_id(0)", PromoteTo::Private, "may be another work-item's element"),
        ("i", "7 - i", PromoteTo::Private, "meet at each other's elements"),
        ("2 * i", "2 * i + 1", PromoteTo::Private, "not surely written"),
        ("0", "0", PromoteTo::Private, "another work-item's element"),
        (
            "i",
            "((i as u64) * 4294967296) as u32",
            PromoteTo::Private,
            "can wrap around its type `u32`",
        ),
        ("i", "local_id(0)", PromoteTo::Local, "another work-group's element"),
        ("i", "i", PromoteTo::Local, "more than the local array's size 2"),
    ] {
        let mut s = scenario(&own(w), &own(r), 8, Some(4), 16);
        let size = if needle.contains("size 2") { Some(2) } else { None };
        promote(&mut s, to, size, Some(16));
        let f = fuse_kernels(&s.module, &s.spec).unwrap_or_else(|e| panic!("{w} {r}: {e}"));
        assert_eq!(f.warnings.len(), 1, "{w} / {r} / {to:?} was promoted");
        let msg = f.warnings[0].to_string();
        assert!(msg.contains(needle), "{w} / {r}: {needle:?} not in {msg}");
    }
    // Local promotion without barriers: another work-item's element is unordered.
    let mut s = scenario(&own("i"), &own("group_id(0) * 4 + (3 - local_id(0))"), 8, Some(4), 16);
    s.spec.barriers = BarrierPolicy::None;
    promote(&mut s, PromoteTo::Local, Some(4), None);
    let f = fuse_kernels(&s.module, &s.spec).unwrap();
    assert!(f.warnings[0].to_string().contains("barriers = \"none\""), "{}", f.warnings[0]);
}

/// Index functions the property test draws from; `LS` is the local size.
fn index_fn(k: u32, ls: u32, n: u32) -> String {
    match k % 13 {
        0 | 1 => "i".into(),
        2 => "i + 1".into(),
        3 => "i + 2".into(),
        4 => "local_id(0)".into(),
        5 => format!("group_id(0) * {ls} + local_id(0)"),
        6 => format!("group_id(0) * {ls} + ({ls} - 1 - local_id(0))"),
        7 => "2 * i".into(),
        8 => "i * 2 + 1".into(),
        9 => "idx[i]".into(),
        10 => format!("{} - i", n - 1),
        11 => "0".into(),
        _ => format!("group_id(0) * {} + local_id(0)", 2 * ls),
    }
}

fn cases() -> u32 {
    std::env::var("KILN_FUSION_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(1000)
}

/// `run` with the promoted buffers of `f` reset to their earlier contents (a promoted buffer
/// is never written back).
fn without_promoted(s: &Scenario, f: &FusedKernel, mut run: Vec<Buffer>) -> Vec<Buffer> {
    for b in promoted_buffers(s, f) {
        run[b] = s.pool[b].clone();
    }
    run
}

/// What one random case showed.
#[derive(Default)]
struct Stats {
    cases: u32,
    promoted: u32,
    /// Plain fusion (no promotion) equals the sequential runs, so they are the oracle.
    in_contract: u32,
    /// Promoted and compared with the sequential runs.
    promoted_vs_sequential: u32,
}

/// One random case: fused with the requested promotion, fused without it, and sequential.
/// Promotion must never change the fused kernel's results; where plain fusion equals the
/// sequential runs (kernels communicating only within a work-group, with a barrier between
/// them: fusion's own contract), the promoted one must equal them too. A promotion of
/// own-index accesses only is never refused.
fn one_case(
    (n_pick, ls_pick, writes, reads, mirror, to_local, barriers, size_pick): Draw,
    stats: &mut Stats,
) -> Result<(), String> {
    // Half the consumers read back exactly what was written, where promotion is often legal.
    let reads = if mirror { writes.clone() } else { reads };
    let barriers = barriers > 0;
    let n = [4, 8, 12][n_pick];
    let ls = [1, 2, 4][ls_pick];
    let t_len = 3 * n as usize + 3;
    let w: Vec<String> = writes.iter().map(|&k| index_fn(k, ls, n)).collect();
    let r: Vec<String> = reads.iter().map(|&k| index_fn(k, ls, n)).collect();
    let mut s = scenario(&w, &r, n, Some(ls), t_len);
    if !barriers {
        s.spec.barriers = BarrierPolicy::None;
    }
    let to = if to_local { PromoteTo::Local } else { PromoteTo::Private };
    let (size, len) = match size_pick {
        0 => (None, Some(t_len as u32)),
        1 => (None, Some(n)),
        k => (Some(k - 1), None),
    };
    promote(&mut s, to, size, len);
    let ctx = || {
        format!("writes {w:?}, reads {r:?}, n {n}, local {ls}, {to:?} size {size:?} len {len:?}, barriers {barriers}")
    };
    let f = fuse_kernels(&s.module, &s.spec).map_err(|e| format!("{}: {e}", ctx()))?;
    let mut plain_spec = s.spec.clone();
    plain_spec.promote.clear();
    let plain = fuse_kernels(&s.module, &plain_spec).map_err(|e| format!("{}: {e}", ctx()))?;
    let got = run_fused(&s, &f)?;
    let plain_run = run_fused(&s, &plain)?;
    results_match(&without_promoted(&s, &f, plain_run.clone()), &got)
        .map_err(|m| format!("{}: promotion changed the fused result: {m}\n{}", ctx(), f.kernel))?;
    stats.cases += 1;
    let promoted = f.warnings.is_empty();
    stats.promoted += promoted as u32;
    let seq = run_sequential(&s)?;
    if results_match(&seq, &plain_run).is_ok() {
        stats.in_contract += 1;
        stats.promoted_vs_sequential += promoted as u32;
        results_match(&without_promoted(&s, &f, seq), &got).map_err(|m| {
            format!("{}: fused with promotion differs from sequential: {m}\n{}", ctx(), f.kernel)
        })?;
    }
    let all_own = writes.iter().chain(&reads).all(|&k| k % 13 <= 1);
    let fits = match (size, len) {
        (Some(z), _) => z >= if to_local { ls } else { 1 },
        (None, Some(l)) => l / if to_local { n / ls } else { n } >= if to_local { ls } else { 1 },
        _ => false,
    };
    if all_own && fits && !promoted {
        return Err(format!("{}: own-index promotion refused: {:?}", ctx(), f.warnings));
    }
    Ok(())
}

/// The property test (issue 12, item 1): random index functions, fused with promotion against
/// sequential execution.
#[test]
fn promoted_fusion_equals_sequential() {
    use proptest::test_runner::{Config, TestRunner};
    let strategy = (
        0usize..3,
        0usize..3,
        proptest::collection::vec(0u32..13, 1..3),
        proptest::collection::vec(0u32..13, 1..3),
        any::<bool>(),
        any::<bool>(),
        // Barriers between the kernels in 3 cases of 4.
        0u32..4,
        0u32..6,
    );
    let mut runner =
        TestRunner::new(Config { cases: cases(), failure_persistence: None, ..Config::default() });
    let stats = std::cell::RefCell::new(Stats::default());
    let result = runner.run(&strategy, |case| {
        one_case(case, &mut stats.borrow_mut()).map_err(TestCaseError::fail)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let st = stats.into_inner();
    eprintln!(
        "promotion property: {} cases (some counted twice while shrinking), {} promoted, {} within fusion's contract (sequential oracle), {} promoted and compared with sequential",
        st.cases, st.promoted, st.in_contract, st.promoted_vs_sequential
    );
    // Not vacuous: both outcomes occur, and the sequential oracle applies to most cases.
    assert!(st.promoted * 10 >= st.cases, "too few promotions: {}/{}", st.promoted, st.cases);
    assert!(st.promoted * 10 <= st.cases * 9, "too few refusals: {}/{}", st.promoted, st.cases);
    assert!(
        st.promoted_vs_sequential * 20 >= st.cases,
        "few promotions compared with sequential: {}/{}",
        st.promoted_vs_sequential,
        st.cases
    );
    assert!(
        st.in_contract * 10 >= st.cases * 3,
        "oracle rarely applies: {}/{}",
        st.in_contract,
        st.cases
    );
}

/// In two dimensions the work-item's own element is `x + width * y`, or any other one-to-one
/// map such as the transposed `y + height * x`; an index that ignores a dimension (`x` alone)
/// is shared by the work-items of a column and refused, and so is one whose rows overlap.
#[test]
fn promotion_in_two_dimensions() {
    for (index, legal) in [
        ("global_id(0) + 4 * global_id(1)", true),
        ("2 * (global_id(0) + 4 * global_id(1)) + 1", true),
        ("group_id(0) * 2 + local_id(0) + 4 * global_id(1)", true),
        ("global_id(0)", false),
        ("global_id(1) + 3 * global_id(0)", true),
        ("global_id(1) + 2 * global_id(0)", false),
    ] {
        let text = format!(
            "kernel produce(src: ptr<global, u32>, t: ptr<global, u32>) {{
  let i: u32 = {index};
  t[i] = src[global_id(0) + 4 * global_id(1)] + 1;
}}
kernel consume(t: ptr<global, u32>, out: ptr<global, u32>) {{
  let j: u32 = {index};
  out[global_id(0) + 4 * global_id(1)] = t[j] * 3;
}}"
        );
        let range = NdRange::new(&[4, 3]).with_local(&[2, 3]);
        let rs = RangeSpec::new(&[4, 3]).with_local(&[2, 3]);
        let b = Arg::Buffer;
        let mut s = Scenario {
            module: parse_module(&text).unwrap(),
            spec: FusionSpec {
                name: "fused".into(),
                kernels: vec!["produce".into(), "consume".into()],
                ndranges: vec![rs.clone(), rs],
                identical: vec![vec![ParamRef::new(0, 1), ParamRef::new(1, 0)]],
                ..FusionSpec::default()
            },
            entries: vec![
                Entry { kernel: "produce".into(), range, args: vec![b(0), b(1)] },
                Entry { kernel: "consume".into(), range, args: vec![b(1), b(2)] },
            ],
            pool: vec![
                Buffer::from_slice(&(0..12u32).collect::<Vec<_>>()),
                Buffer::from_slice(&(100..125u32).collect::<Vec<_>>()),
                Buffer::from_slice(&[0u32; 12]),
            ],
        };
        s.spec.promote = vec![Promotion {
            param: ParamRef::new(0, 1),
            to: PromoteTo::Private,
            size: None,
            buffer_len: Some(25),
        }];
        let f = fuse_kernels(&s.module, &s.spec).unwrap();
        assert_eq!(f.warnings.is_empty(), legal, "{index}: {:?}", f.warnings);
        if legal {
            // Within fusion's contract (each work-item reads only its own element): the
            // fused kernel with the private array equals the sequential runs.
            check(&s).unwrap_or_else(|e| panic!("{index}: {e}"));
        }
    }
}
