//! Path-sensitive fusion legality (issue 28): kernels written the way GPU programs are written
//! (`if i < n` over a range rounded up to the work-group size, 2-D guards, guards through
//! `let`s, work-items that own several elements, work-group permutations) fuse and promote
//! where that is exact, and every fused result equals running the kernels one after another.
//! What cannot be proven is refused, with the access and its guard named.
//!
//! `KILN_FUSION_CASES` sets the property test's case count (default 200).

mod fusion_util;

use fusion_util::{check, promoted_buffers, Entry, Scenario};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::parse_module;
use kiln_passes::fusion::{
    fuse_kernels, fusion_keeps_result, ConstValue, Constant, FusionSpec, ParamRef, PromoteTo,
    Promotion, RangeSpec,
};
use proptest::prelude::*;

/// A producer and a consumer sharing `t`; both take `n` (a constant of the fusion) and the
/// producer reads `src`, the consumer writes `out`. Buffers: 0 = src, 1 = t, 2 = out.
struct Pair<'a> {
    /// The producer's body; `i` is not bound for it.
    produce: &'a str,
    /// The consumer's body.
    consume: &'a str,
    global: &'a [u32],
    local: Option<&'a [u32]>,
    n: u32,
    /// Elements of `t`, `src` and `out`.
    len: usize,
}

impl Pair<'_> {
    fn scenario(&self, promote: Option<(PromoteTo, Option<u32>)>) -> Scenario {
        let text = format!(
            "kernel produce(src: ptr<global, u32>, t: ptr<global, u32>, n: u32) {{\n{}\n}}\n\
             kernel consume(t: ptr<global, u32>, out: ptr<global, u32>, n: u32) {{\n{}\n}}",
            self.produce, self.consume
        );
        let module = parse_module(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
        let mut range = NdRange::new(self.global);
        let mut rs = RangeSpec::new(self.global);
        if let Some(l) = self.local {
            range = range.with_local(l);
            rs = rs.with_local(l);
        }
        let src: Vec<u32> = (0..self.len as u32).map(|i| 10 * i + 3).collect();
        // Earlier contents that no correct promotion may read.
        let t: Vec<u32> = (0..self.len as u32).map(|i| 100_000 + i).collect();
        let out: Vec<u32> = (0..self.len as u32).map(|i| 200_000 + i).collect();
        let pool = vec![Buffer::from_slice(&src), Buffer::from_slice(&t), Buffer::from_slice(&out)];
        let n = Arg::Scalar(kiln_ir::Imm::int(kiln_ir::Scalar::U32, self.n as i128));
        let entries = vec![
            Entry {
                kernel: "produce".into(),
                range,
                args: vec![Arg::Buffer(0), Arg::Buffer(1), n.clone()],
            },
            Entry {
                kernel: "consume".into(),
                range,
                args: vec![Arg::Buffer(1), Arg::Buffer(2), n],
            },
        ];
        let spec = FusionSpec {
            name: "fused".into(),
            kernels: vec!["produce".into(), "consume".into()],
            ndranges: vec![rs.clone(), rs],
            identical: vec![
                vec![ParamRef::new(0, 1), ParamRef::new(1, 0)],
                vec![ParamRef::new(0, 2), ParamRef::new(1, 2)],
            ],
            promote: promote
                .map(|(to, size)| Promotion {
                    param: ParamRef::new(0, 1),
                    to,
                    size,
                    buffer_len: Some(self.len as u32),
                })
                .into_iter()
                .collect(),
            constants: vec![Constant {
                param: ParamRef::new(0, 2),
                value: ConstValue::Int(self.n as i128),
            }],
            ..FusionSpec::default()
        };
        Scenario { module, spec, entries, pool }
    }

    /// The in-place verdict on `t` (per work-item, or per work-group with `per_group`).
    fn in_place(&self, per_group: bool) -> Result<(), String> {
        let s = self.scenario(None);
        fusion_keeps_result(
            &s.module,
            &s.spec,
            &[(ParamRef::new(0, 1), Some(self.len as u32))],
            per_group,
        )
        .unwrap_or_else(|e| Err(e.to_string()))
    }

    /// Fuses with `t` promoted; panics unless the result equals the sequence. Returns the
    /// refusal, if promotion was refused.
    fn promoted(&self, to: PromoteTo, size: Option<u32>) -> Option<String> {
        let s = self.scenario(Some((to, size)));
        let f = check(&s).unwrap_or_else(|e| panic!("{e}"));
        if promoted_buffers(&s, &f).contains(&1) {
            None
        } else {
            Some(f.warnings.iter().map(|w| w.to_string()).collect::<Vec<_>>().join("; "))
        }
    }
}

const GUARDED_PRODUCE: &str =
    "let i: u32 = global_id(0);\nif i < n { t[i] = src[i] * 3u32 + 1u32; }";
const GUARDED_CONSUME: &str = "let i: u32 = global_id(0);\nif i < n { out[i] = t[i] + 7u32; }";

/// The first case: `if i < n` over `n = 1000` rounded up to 1024 (local size 64).
/// The buffer has 1000 elements; the guard keeps every access inside it.
#[test]
fn guarded_chain_over_a_rounded_up_range_fuses() {
    let p = Pair {
        produce: GUARDED_PRODUCE,
        consume: GUARDED_CONSUME,
        global: &[1024],
        local: Some(&[64]),
        n: 1000,
        len: 1000,
    };
    p.in_place(false).unwrap_or_else(|e| panic!("in place per work-item: {e}"));
    p.in_place(true).unwrap_or_else(|e| panic!("in place per work-group: {e}"));
    assert_eq!(p.promoted(PromoteTo::Private, Some(1)), None);
    // Without the guard the same accesses run for work-items 1000..1023: refused, by name.
    let unguarded = Pair {
        produce: "let i: u32 = global_id(0);\nt[i] = src[i];",
        consume: "let i: u32 = global_id(0);\nout[i] = t[i];",
        ..p
    };
    let why = unguarded.in_place(false).expect_err("out of bounds without the guard");
    assert!(why.contains("outside the buffer of 1000 elements"), "{why}");
    // A guard that does not bound the index enough: `i <= n` reaches element 1000.
    let loose = Pair {
        produce: "let i: u32 = global_id(0);\nif i <= n { t[i] = src[i]; }",
        consume: GUARDED_CONSUME,
        ..p
    };
    let why = loose.in_place(false).expect_err("`i <= n` reaches element n");
    assert!(why.contains("under `i <= n`") && why.contains("guard does not bound it"), "{why}");
}

/// The second case: private promotion of a guarded intermediate with `global == n`,
/// and with a rounded-up range; local promotion too.
#[test]
fn guarded_intermediates_are_promoted() {
    for (global, n) in [(1000, 1000), (1024, 1000), (96, 77)] {
        let p = Pair {
            produce: GUARDED_PRODUCE,
            consume: GUARDED_CONSUME,
            global: &[global],
            local: Some(&[32]),
            n,
            len: global as usize,
        };
        let p = Pair { local: if global % 32 == 0 { Some(&[32]) } else { None }, ..p };
        assert_eq!(p.promoted(PromoteTo::Private, Some(1)), None, "global {global}, n {n}");
        if p.local.is_some() {
            assert_eq!(p.promoted(PromoteTo::Local, Some(32)), None, "global {global}, n {n}");
        }
    }
}

/// A read whose guard admits work-items the write's guard does not is refused: unfused, they
/// read the buffer's earlier contents.
#[test]
fn a_read_outside_the_writes_guard_is_refused() {
    let p = Pair {
        produce: "let i: u32 = global_id(0);\nif i < n - 10u32 { t[i] = src[i]; }",
        consume: GUARDED_CONSUME,
        global: &[128],
        local: Some(&[32]),
        n: 100,
        len: 128,
    };
    let why = p.promoted(PromoteTo::Private, Some(1)).expect("refused");
    assert!(
        why.contains("reads `t[i]` under `i < n`") && why.contains("not surely written"),
        "{why}"
    );
    // An `else` branch: the write under `!(i < n)`, the read under `i < n`.
    let p = Pair {
        produce: "let i: u32 = global_id(0);\nif i < n { src[i] = 1u32; } else { t[i] = src[i]; }",
        ..p
    };
    assert!(p.promoted(PromoteTo::Private, Some(1)).is_some());
    // A write under a condition the prover cannot capture (`!=`) never counts as sure.
    let p = Pair {
        produce: "let i: u32 = global_id(0);\nif i != 5u32 { t[i] = src[i]; }",
        consume: "let i: u32 = global_id(0);\nif i < 5u32 { out[i] = t[i]; }",
        ..p
    };
    assert!(p.promoted(PromoteTo::Private, Some(1)).is_some());
}

/// `i >= k` guards a `u32` subtraction that would wrap for smaller `i`; a guard through a
/// `let`; a guard whose `&&` has both bounds.
#[test]
fn lower_bounds_lets_and_conjunctions() {
    let p = Pair {
        produce: "let i: u32 = global_id(0);\nif i >= 4u32 { t[i - 4u32] = src[i]; }",
        consume:
            "let i: u32 = global_id(0);\nlet ok: bool = i >= 4u32;\nif ok { out[i] = t[i - 4u32]; }",
        global: &[64],
        local: Some(&[16]),
        n: 0,
        len: 64,
    };
    p.in_place(false).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.promoted(PromoteTo::Private, Some(1)), None);
    let p = Pair {
        produce: "let i: u32 = global_id(0);\nif i >= 3u32 && i < n { t[i] = src[i]; }",
        consume: "let i: u32 = global_id(0);\nif i < n && 3u32 <= i { out[i] = t[i]; }",
        n: 50,
        ..p
    };
    assert_eq!(p.promoted(PromoteTo::Private, Some(1)), None);
    assert_eq!(p.promoted(PromoteTo::Local, Some(16)), None);
}

/// A 2-D guard `x < w && y < h` over a range rounded up in both dimensions, indexing a
/// `w x h` buffer as `y * w + x`.
#[test]
fn two_dimensional_guards() {
    let body = |rhs: &str, store: &str| {
        format!(
            "let x: u32 = global_id(0);\nlet y: u32 = global_id(1);\n\
             if x < n && y < 13u32 {{ {store}[y * n + x] = {rhs}; }}"
        )
    };
    let produce = body("src[y * n + x] + 1u32", "t");
    let consume = body("t[y * n + x] * 2u32", "out");
    let p = Pair {
        produce: &produce,
        consume: &consume,
        global: &[24, 16],
        local: Some(&[8, 8]),
        n: 21,
        len: 21 * 13,
    };
    p.in_place(false).unwrap_or_else(|e| panic!("{e}"));
    // Every access is `y * 21 + x`: under the guard no two work-items meet (x < 21), so
    // each work-item's element is its own.
    assert_eq!(p.promoted(PromoteTo::Private, Some(1)), None);
    // Without the `x` bound work-item (21, 0) would write (0, 1)'s element.
    let produce = body("src[y * n + x] + 1u32", "t").replace("x < n && ", "");
    let q = Pair { produce: &produce, len: 24 * 16, ..p };
    let why = q.promoted(PromoteTo::Private, Some(1)).expect("rows overlap");
    assert!(why.contains("neighbouring work-items access the same element"), "{why}");
    // Local promotion needs one work-group stride; rows of 21 are not that.
    let why = p.promoted(PromoteTo::Local, Some(64)).expect("no work-group stride");
    assert!(why.contains("work-group"), "{why}");
}

/// Work-item `i` owns `t[i * 4 + j]` for `j < 4` (DPC++'s internalization tests), private
/// and local with a local size of 8.
#[test]
fn work_items_that_own_several_elements() {
    let p = Pair {
        produce: "let i: u32 = global_id(0);\nfor j: u32 in 0u32 .. 4u32 step 1u32 { t[i * 4u32 + j] = src[i] + j; }",
        consume: "let i: u32 = global_id(0);\nvar acc: u32 = 0u32;\n\
                  for j: u32 in 0u32 .. 4u32 step 1u32 { acc = acc + t[i * 4u32 + j] * (j + 1u32); }\n\
                  out[i] = acc;",
        global: &[64],
        local: Some(&[8]),
        n: 0,
        len: 256,
    };
    p.in_place(false).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.promoted(PromoteTo::Private, Some(4)), None);
    assert_eq!(p.promoted(PromoteTo::Local, Some(32)), None);
    // Reading the last element first in the same loop that writes it: not yet written.
    let early = Pair {
        produce: "let i: u32 = global_id(0);\nvar acc: u32 = 0u32;\n\
                  for j: u32 in 0u32 .. 4u32 step 1u32 { t[i * 4u32 + j] = src[i] + j; acc = acc + t[i * 4u32 + 3u32]; }\n\
                  t[i * 4u32] = acc;",
        ..p
    };
    let why = early.promoted(PromoteTo::Private, Some(4)).expect("read before its write");
    assert!(why.contains("t[i * 4 + 3]") && why.contains("not surely written"), "{why}");
    // A single read of an element a finished loop wrote.
    let after = Pair { consume: "let i: u32 = global_id(0);\nout[i] = t[i * 4u32 + 2u32];", ..p };
    assert_eq!(after.promoted(PromoteTo::Private, Some(4)), None);
    // Two work-items meeting: `i * 4 + j` over `j < 5`.
    let overlap = Pair {
        produce: "let i: u32 = global_id(0);\nfor j: u32 in 0u32 .. 5u32 step 1u32 { if i * 4u32 + j < 256u32 { t[i * 4u32 + j] = src[i]; } }",
        ..p
    };
    let why = overlap.promoted(PromoteTo::Private, Some(5)).expect("neighbours overlap");
    assert!(why.contains("neighbouring work-items"), "{why}");
}

/// The fourth case: the producer writes its work-group's block reversed, the
/// consumer reads it in order after the barrier: local promotion is exact.
#[test]
fn work_group_permutations_are_promoted_to_local() {
    let p = Pair {
        produce: "let l: u32 = local_id(0);\n\
                  t[group_id(0) * local_size(0) + local_size(0) - 1u32 - l] = src[global_id(0)];",
        consume: "let i: u32 = global_id(0);\nout[i] = t[i] + 1u32;",
        global: &[256],
        local: Some(&[64]),
        n: 0,
        len: 256,
    };
    assert_eq!(p.promoted(PromoteTo::Local, Some(64)), None);
    // Private promotion stays refused: another work-item wrote the element.
    assert!(p.promoted(PromoteTo::Private, Some(1)).is_some());
    // A 2-D transpose of a square group.
    let t = Pair {
        produce: "let b: u32 = (group_id(1) * num_groups(0) + group_id(0)) * 64u32;\n\
                  t[b + local_id(0) * 8u32 + local_id(1)] = src[global_id(1) * 32u32 + global_id(0)];",
        consume: "let b: u32 = (group_id(1) * num_groups(0) + group_id(0)) * 64u32;\n\
                  out[b + local_id(1) * 8u32 + local_id(0)] = t[b + local_id(1) * 8u32 + local_id(0)];",
        global: &[32, 16],
        local: Some(&[8, 8]),
        len: 512,
        ..p
    };
    assert_eq!(t.promoted(PromoteTo::Local, Some(64)), None);
    // Not a permutation: two work-items write one element, one element is never written.
    let halves = Pair {
        produce: "let l: u32 = local_id(0);\nt[group_id(0) * 64u32 + l / 2u32 * 2u32] = src[global_id(0)];",
        ..p
    };
    assert!(halves.promoted(PromoteTo::Local, Some(64)).is_some());
    let doubled = Pair {
        produce: "let l: u32 = local_id(0);\nif l < 32u32 { t[group_id(0) * 64u32 + 2u32 * l] = src[global_id(0)]; }",
        ..p
    };
    assert!(doubled.promoted(PromoteTo::Local, Some(64)).is_some());
}

/// The list fused with the unfused ranges and the fused kernel's own entry guard (`glid <
/// N`): a shorter producer that writes what the consumer, under the same bound, reads.
#[test]
fn entry_guards_of_shorter_ranges_count_as_guards() {
    let text = "kernel produce(src: ptr<global, u32>, t: ptr<global, u32>) {
  let i: u32 = global_id(0); t[i] = src[i] + 5u32; }
kernel consume(t: ptr<global, u32>, out: ptr<global, u32>) {
  let i: u32 = global_id(0); if i < 48u32 { out[i] = t[i] * 2u32; } }";
    let module = parse_module(text).unwrap();
    let pool = vec![
        Buffer::from_slice(&(0..64u32).collect::<Vec<_>>()),
        Buffer::from_slice(&[9u32; 64]),
        Buffer::from_slice(&[1u32; 64]),
    ];
    let entries = vec![
        Entry {
            kernel: "produce".into(),
            range: NdRange::new(&[48]).with_local(&[16]),
            args: vec![Arg::Buffer(0), Arg::Buffer(1)],
        },
        Entry {
            kernel: "consume".into(),
            range: NdRange::new(&[64]).with_local(&[16]),
            args: vec![Arg::Buffer(1), Arg::Buffer(2)],
        },
    ];
    let spec = FusionSpec {
        kernels: vec!["produce".into(), "consume".into()],
        ndranges: vec![
            RangeSpec::new(&[48]).with_local(&[16]),
            RangeSpec::new(&[64]).with_local(&[16]),
        ],
        identical: vec![vec![ParamRef::new(0, 1), ParamRef::new(1, 0)]],
        promote: vec![Promotion {
            param: ParamRef::new(0, 1),
            to: PromoteTo::Private,
            size: Some(1),
            buffer_len: Some(48),
        }],
        ..FusionSpec::default()
    };
    let s = Scenario { module, spec, entries, pool };
    let f = check(&s).unwrap_or_else(|e| panic!("{e}"));
    assert!(promoted_buffers(&s, &f).contains(&1), "warnings: {:?}", f.warnings);
}

fn cases() -> u32 {
    std::env::var("KILN_FUSION_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(200)
}

/// A random guard over `i` (a `u32` global id): its text and whether work-item `i` passes.
fn guard_text(kind: u8, a: u32, b: u32) -> String {
    match kind % 6 {
        0 => "i < n".to_string(),
        1 => format!("i >= {a}u32"),
        2 => format!("i >= {a}u32 && i < n"),
        3 => "!(i >= n)".to_string(),
        4 => format!("i < n && i + {b}u32 < n + {a}u32"),
        _ => "true".to_string(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// Random guards on the producer and consumer (through a `let` or not), random `n` with
    /// the range rounded up to the local size, random strides and offsets, every promotion
    /// kind: the fused result always equals the sequence; a case kiln cannot prove is
    /// refused (the buffer stays in memory), never guessed.
    #[test]
    fn guarded_fusion_equals_sequential(
        ls in prop::sample::select(vec![1u32, 4, 8, 16]),
        groups in 1u32..6,
        short in 0u32..8,
        wk in 0u8..6, rk in 0u8..6, a in 0u32..6, b in 0u32..6,
        via_let in any::<bool>(),
        stride in 1u32..3, wc in 0u32..2, rc in 0u32..2,
        to in 0u8..3,
    ) {
        let global = ls * groups;
        let n = global.saturating_sub(short).max(1);
        let len = (global * stride + 2) as usize;
        let wg = guard_text(wk, a, b);
        let rg = guard_text(rk, a, b);
        let produce = format!(
            "let i: u32 = global_id(0);\nif {wg} {{ t[i * {stride}u32 + {wc}u32] = src[i] + 1u32; }}"
        );
        let consume = if via_let {
            format!("let i: u32 = global_id(0);\nlet ok: bool = {rg};\nif ok {{ out[i] = t[i * {stride}u32 + {rc}u32]; }}")
        } else {
            format!("let i: u32 = global_id(0);\nif {rg} {{ out[i] = t[i * {stride}u32 + {rc}u32]; }}")
        };
        let local = [ls];
        let p = Pair { produce: &produce, consume: &consume, global: &[global], local: Some(&local), n, len };
        let to = [PromoteTo::Private, PromoteTo::Local, PromoteTo::None][to as usize];
        let size = if to == PromoteTo::Local { stride * ls + 2 } else { stride + 2 };
        let s = p.scenario(Some((to, Some(size))));
        let f = fuse_kernels(&s.module, &s.spec).map_err(|e| TestCaseError::fail(e.to_string()))?;
        // A promotion that is done gives the sequence's result.
        if promoted_buffers(&s, &f).contains(&1) {
            check(&s).map_err(TestCaseError::fail)?;
        }
        // So does the buffer left in memory, wherever the in-place verdict says so.
        if p.in_place(to == PromoteTo::Local).is_ok() {
            check(&p.scenario(None)).map_err(TestCaseError::fail)?;
        }
    }
}
