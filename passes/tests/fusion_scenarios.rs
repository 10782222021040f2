//! Hand scenarios modelled on the original fusion JIT's end-to-end tests: each fuses a list,
//! runs the fused kernel once and compares with the sequential runs (internalized buffers
//! untouched), or checks that an illegal combination is refused with the right rule.

mod fusion_util;

use fusion_util::{check, fuse_err, run_fused, run_sequential, Entry, Scenario};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::parse_module;
use kiln_passes::fusion::{
    fuse_kernels, fusion_key, ArgMap, BarrierPolicy, ConstValue, Constant, FusionError, FusionSpec,
    ParamRef, PromoteTo, Promotion, RangeSpec, RemapMode,
};
use proptest::prelude::*;

const CHAIN: &str = "
kernel add(a: ptr<global, f32>, b: ptr<global, f32>, tmp: ptr<global, f32>) {
  let i: u32 = global_id(0);
  tmp[i] = a[i] + b[i];
}
kernel mul(tmp: ptr<global, f32>, c: ptr<global, f32>, out: ptr<global, f32>) {
  let i: u32 = global_id(0);
  out[i] = tmp[i] * c[i];
}
kernel scale(x: ptr<global, f32>, s: f32, y: ptr<global, f32>) {
  let i: u32 = global_id(0);
  y[i] = x[i] * s;
}
kernel add2(x: ptr<global, f32>, y: ptr<global, f32>, out: ptr<global, f32>) {
  let i: u32 = global_id(0);
  out[i] = x[i] + y[i];
}
kernel pair(a: ptr<global, f32>, tmp: ptr<global, f32>) {
  let i: u32 = global_id(0);
  tmp[2u32 * i] = a[i];
  tmp[2u32 * i + 1u32] = a[i] * 2.0;
}
kernel unpair(tmp: ptr<global, f32>, out: ptr<global, f32>) {
  let i: u32 = global_id(0);
  out[i] = tmp[2u32 * i] - tmp[2u32 * i + 1u32];
}
kernel count(tmp: ptr<global, u32>) {
  let i: u32 = global_id(0);
  let old: u32 = atomic_add(tmp, i, 1u32);
  tmp[i] = tmp[i] + old;
}
kernel neighbour(tmp: ptr<global, f32>, out: ptr<global, f32>) {
  let i: u32 = global_id(0);
  let l: u32 = local_id(0);
  let n: u32 = local_size(0);
  out[i] = tmp[i - l + (l + 1u32) % n];
}
kernel reduce(x: ptr<global, f32>, partial: ptr<global, f32>) {
  local tile: f32[16];
  let l: u32 = local_id(0);
  tile[l] = x[global_id(0)];
  barrier(local);
  if l == 0u32 {
    var acc: f32 = 0.0;
    for j: u32 in 0u32 .. local_size(0) {
      acc = acc + tile[j];
    }
    partial[group_id(0)] = acc;
  }
}
kernel ids(out: ptr<global, u32>) {
  let lin: u32 = (global_id(0) - global_offset(0)) + global_size(0) * ((global_id(1) - global_offset(1)) + global_size(1) * (global_id(2) - global_offset(2)));
  for d: u32 in 0u32 .. 3u32 {
    let dd: u8 = d as u8;
    out[lin * 21u32 + d] = 0u32;
  }
  out[lin * 21u32 + 0u32] = global_id(0);
  out[lin * 21u32 + 1u32] = global_id(1);
  out[lin * 21u32 + 2u32] = global_id(2);
  out[lin * 21u32 + 3u32] = global_size(0);
  out[lin * 21u32 + 4u32] = global_size(1);
  out[lin * 21u32 + 5u32] = global_size(2);
  out[lin * 21u32 + 6u32] = global_offset(0);
  out[lin * 21u32 + 7u32] = global_offset(1);
  out[lin * 21u32 + 8u32] = global_offset(2);
  out[lin * 21u32 + 9u32] = local_id(0);
  out[lin * 21u32 + 10u32] = local_id(1);
  out[lin * 21u32 + 11u32] = local_id(2);
  out[lin * 21u32 + 12u32] = local_size(0);
  out[lin * 21u32 + 13u32] = local_size(1);
  out[lin * 21u32 + 14u32] = local_size(2);
  out[lin * 21u32 + 15u32] = group_id(0);
  out[lin * 21u32 + 16u32] = group_id(1);
  out[lin * 21u32 + 17u32] = group_id(2);
  out[lin * 21u32 + 18u32] = num_groups(0);
  out[lin * 21u32 + 19u32] = num_groups(1);
  out[lin * 21u32 + 20u32] = num_groups(2);
}
kernel gids(out: ptr<global, u32>) {
  let lin: u32 = (global_id(0) - global_offset(0)) + global_size(0) * ((global_id(1) - global_offset(1)) + global_size(1) * (global_id(2) - global_offset(2)));
  out[lin * 9u32 + 0u32] = global_id(0);
  out[lin * 9u32 + 1u32] = global_id(1);
  out[lin * 9u32 + 2u32] = global_id(2);
  out[lin * 9u32 + 3u32] = global_size(0);
  out[lin * 9u32 + 4u32] = global_size(1);
  out[lin * 9u32 + 5u32] = global_size(2);
  out[lin * 9u32 + 6u32] = global_offset(0);
  out[lin * 9u32 + 7u32] = global_offset(1);
  out[lin * 9u32 + 8u32] = global_offset(2);
}
kernel wide(x: ptr<global, f64>) {
  x[global_id(0)] = 1.0;
}
kernel sized(x: ptr<global, f32>) #reqd_work_group_size(4, 1, 1) {
  x[global_id(0)] = 1.0;
}
kernel sized8(x: ptr<global, f32>) #reqd_work_group_size(8, 1, 1) {
  x[global_id(0)] = 1.0;
}
kernel syncs(x: ptr<global, f32>) {
  barrier(local);
  x[global_id(0)] = 2.0;
}
";

fn f32s(n: usize, seed: f32) -> Buffer {
    let v: Vec<f32> = (0..n).map(|i| seed + i as f32 * 0.5).collect();
    Buffer::from_slice(&v)
}

/// A scenario over `CHAIN`: entries are (kernel, unfused range, spec range, args).
fn scenario(entries: &[(&str, NdRange, RangeSpec, Vec<Arg>)], pool: Vec<Buffer>) -> Scenario {
    let module = parse_module(CHAIN).expect("CHAIN parses");
    let spec = FusionSpec {
        name: "fused".into(),
        kernels: entries.iter().map(|e| e.0.to_string()).collect(),
        ndranges: entries.iter().map(|e| e.2.clone()).collect(),
        ..FusionSpec::default()
    };
    let entries = entries
        .iter()
        .map(|(k, r, _, a)| Entry { kernel: k.to_string(), range: *r, args: a.clone() })
        .collect();
    Scenario { module, spec, entries, pool }
}

fn b(i: usize) -> Arg {
    Arg::Buffer(i)
}

/// add(a, b, tmp) then mul(tmp, c, out) over 64 items; buffers a, b, tmp, c, out.
fn add_mul(local: Option<u32>) -> Scenario {
    let mut r = NdRange::new(&[64]);
    let mut rs = RangeSpec::new(&[64]);
    if let Some(l) = local {
        r = r.with_local(&[l]);
        rs = rs.with_local(&[l]);
    }
    let pool = vec![f32s(64, 1.0), f32s(64, 2.0), f32s(64, 0.0), f32s(64, 3.0), f32s(64, 0.0)];
    let mut s = scenario(
        &[("add", r, rs.clone(), vec![b(0), b(1), b(2)]), ("mul", r, rs, vec![b(2), b(3), b(4)])],
        pool,
    );
    s.spec.identical = vec![vec![ParamRef::new(0, 2), ParamRef::new(1, 0)]];
    s
}

#[test]
fn s01_two_kernels_with_barrier() {
    let s = add_mul(None);
    let f = check(&s).unwrap();
    assert_eq!(f.kernel.params().len(), 5, "tmp passed once");
    assert_eq!(f.args[1][0], ArgMap::Identical(2));
    assert!(f.kernel.to_string().contains("barrier(local, global)"));
    let out = run_fused(&s, &f).unwrap()[4].to_vec::<f32>().unwrap();
    assert_eq!(out[3], (1.0 + 1.5 + 2.0 + 1.5) * (3.0 + 1.5));
}

#[test]
fn s02_two_kernels_without_barriers() {
    let mut s = add_mul(None);
    s.spec.barriers = BarrierPolicy::None;
    let f = check(&s).unwrap();
    assert!(!f.kernel.to_string().contains("barrier"));
}

#[test]
fn s03_private_internalization() {
    let mut s = add_mul(None);
    s.spec.promote = vec![Promotion {
        param: ParamRef::new(0, 2),
        to: PromoteTo::Private,
        size: None,
        buffer_len: Some(64),
    }];
    let f = check(&s).unwrap();
    assert_eq!(f.args[0][2], ArgMap::Promoted { to: PromoteTo::Private, size: 1 });
    assert_eq!(f.args[1][0], ArgMap::Promoted { to: PromoteTo::Private, size: 1 });
    assert_eq!(f.kernel.params().len(), 4);
    let fused = run_fused(&s, &f).unwrap();
    assert_eq!(fused[2].to_vec::<f32>(), s.pool[2].to_vec::<f32>(), "tmp untouched");
    assert_eq!(fused[4].to_vec::<f32>(), run_sequential(&s).unwrap()[4].to_vec::<f32>());
    assert!(f.warnings.is_empty());
}

#[test]
fn s04_local_internalization() {
    let mut s = add_mul(Some(16));
    s.spec.promote = vec![Promotion {
        param: ParamRef::new(1, 0),
        to: PromoteTo::Local,
        size: None,
        buffer_len: Some(64),
    }];
    let f = check(&s).unwrap();
    assert_eq!(f.args[0][2], ArgMap::Promoted { to: PromoteTo::Local, size: 16 });
    assert!(f.kernel.to_string().contains("local add_tmp: f32[16];"));
}

#[test]
fn s05_private_and_local_requests_give_local() {
    let mut s = add_mul(Some(8));
    s.spec.promote = vec![
        Promotion {
            param: ParamRef::new(0, 2),
            to: PromoteTo::Private,
            size: Some(8),
            buffer_len: None,
        },
        Promotion {
            param: ParamRef::new(1, 0),
            to: PromoteTo::Local,
            size: Some(8),
            buffer_len: None,
        },
    ];
    let f = check(&s).unwrap();
    assert_eq!(f.args[0][2], ArgMap::Promoted { to: PromoteTo::Local, size: 8 });
}

#[test]
fn s06_diamond_with_repeat() {
    // tmp1 = a + b; t2 = scale(tmp1, 2); t3 = scale(tmp1, 3); out = t2 + t3.
    let r = NdRange::new(&[32]);
    let rs = RangeSpec::new(&[32]);
    let pool = vec![
        f32s(32, 1.0),
        f32s(32, 2.0),
        f32s(32, 0.0),
        f32s(32, 0.0),
        f32s(32, 0.0),
        f32s(32, 0.0),
    ];
    let mut s = scenario(
        &[
            ("add", r, rs.clone(), vec![b(0), b(1), b(2)]),
            ("scale", r, rs.clone(), vec![b(2), Arg::scalar(2.0f32), b(3)]),
            ("scale", r, rs.clone(), vec![b(2), Arg::scalar(3.0f32), b(4)]),
            ("add2", r, rs, vec![b(3), b(4), b(5)]),
        ],
        pool,
    );
    s.spec.identical = vec![
        vec![ParamRef::new(0, 2), ParamRef::new(1, 0)],
        vec![ParamRef::new(1, 0), ParamRef::new(2, 0)],
        vec![ParamRef::new(1, 2), ParamRef::new(3, 0)],
        vec![ParamRef::new(2, 2), ParamRef::new(3, 1)],
    ];
    s.spec.promote = vec![
        Promotion {
            param: ParamRef::new(2, 0),
            to: PromoteTo::Private,
            size: Some(1),
            buffer_len: None,
        },
        Promotion {
            param: ParamRef::new(3, 0),
            to: PromoteTo::Private,
            size: Some(1),
            buffer_len: None,
        },
    ];
    let f = check(&s).unwrap();
    // Names: <kernel>_<param>, numeric suffix only on repeats.
    let names: Vec<&str> = f.kernel.params().iter().map(|p| p.name()).collect();
    assert_eq!(names, ["add_a", "add_b", "scale_s", "scale_s_1", "scale_y_1", "add2_out"]);
    let fused = run_fused(&s, &f).unwrap();
    for t in [2, 3] {
        assert_eq!(fused[t].to_vec::<f32>(), s.pool[t].to_vec::<f32>(), "temporary {t} untouched");
    }
}

#[test]
fn s07_barrier_needed_between_kernels() {
    // `neighbour` reads another work-item's tmp: right only with the inserted barrier.
    let r = NdRange::new(&[16]).with_local(&[8]);
    let rs = RangeSpec::new(&[16]).with_local(&[8]);
    let pool = vec![f32s(16, 1.0), f32s(16, 2.0), f32s(16, 0.0), f32s(16, 0.0)];
    let mut s = scenario(
        &[("add", r, rs.clone(), vec![b(0), b(1), b(2)]), ("neighbour", r, rs, vec![b(2), b(3)])],
        pool,
    );
    s.spec.identical = vec![vec![ParamRef::new(0, 2), ParamRef::new(1, 0)]];
    check(&s).unwrap();
    s.spec.barriers = BarrierPolicy::None;
    let f = fuse_kernels(&s.module, &s.spec).unwrap();
    let fused = run_fused(&s, &f).unwrap();
    assert_ne!(fused[3].to_vec::<f32>(), run_sequential(&s).unwrap()[3].to_vec::<f32>());
}

#[test]
fn s08_local_memory_reduction_after_kernel() {
    let r = NdRange::new(&[64]).with_local(&[16]);
    let rs = RangeSpec::new(&[64]).with_local(&[16]);
    let pool = vec![f32s(64, 1.0), f32s(64, 2.0), f32s(64, 0.0), f32s(4, 0.0)];
    let mut s = scenario(
        &[("add", r, rs.clone(), vec![b(0), b(1), b(2)]), ("reduce", r, rs, vec![b(2), b(3)])],
        pool,
    );
    s.spec.identical = vec![vec![ParamRef::new(0, 2), ParamRef::new(1, 0)]];
    let f = check(&s).unwrap();
    let text = f.kernel.to_string();
    assert!(
        text.find("local tile: f32[16];").unwrap() < text.find("barrier(local, global)").unwrap()
    );
}

fn ids_scenario(kernel: &str, per: usize, ranges: &[(NdRange, RangeSpec)]) -> Scenario {
    let mut pool = Vec::new();
    let mut entries = Vec::new();
    for (r, rs) in ranges {
        pool.push(Buffer::zeroed(kiln_ir::Scalar::U32, r.work_items() as usize * per));
        entries.push((kernel, *r, rs.clone(), vec![b(pool.len() - 1)]));
    }
    scenario(&entries, pool)
}

#[test]
fn s09_1d_different_sizes_with_local() {
    let s = ids_scenario(
        "ids",
        21,
        &[
            (NdRange::new(&[16]).with_local(&[4]), RangeSpec::new(&[16]).with_local(&[4])),
            (NdRange::new(&[32]).with_local(&[4]), RangeSpec::new(&[32])),
            (NdRange::new(&[8]).with_local(&[4]), RangeSpec::new(&[8]).with_local(&[4])),
        ],
    );
    let f = check(&s).unwrap();
    assert_eq!(f.range, NdRange::new(&[32]).with_local(&[4]).with_offset(&[0]));
    // The recorded attribute gives the same launch, also after printing and parsing.
    let text = f.kernel.to_string();
    assert!(text.contains("#nd_range(global = [32], local = [4], offset = [0])"), "{text}");
    let back = parse_module(&text).unwrap();
    let attr = back.kernels[0].attrs().nd_range.clone().unwrap();
    assert_eq!(kiln_passes::fusion::nd_range_of(&attr), f.range);
    let fa = back.kernels[0].attrs().fused.clone().unwrap();
    assert_eq!(fa.kernels, ["ids", "ids", "ids"]);
    assert_eq!(
        fa.args,
        vec![
            vec![kiln_ir::FusedArg::Param(0)],
            vec![kiln_ir::FusedArg::Param(1)],
            vec![kiln_ir::FusedArg::Param(2)]
        ]
    );
}

#[test]
fn s10_2d_slowest_dimension_differs_with_offset() {
    let s = ids_scenario(
        "ids",
        21,
        &[
            (
                NdRange::new(&[4, 2]).with_local(&[2, 1]).with_offset(&[1, 2]),
                RangeSpec::new(&[4, 2]).with_local(&[2, 1]).with_offset(&[1, 2]),
            ),
            (
                NdRange::new(&[4, 6]).with_local(&[2, 1]).with_offset(&[1, 2]),
                RangeSpec::new(&[4, 6]),
            ),
        ],
    );
    let f = check(&s).unwrap();
    assert_eq!(f.range.global, [4, 6, 1]);
}

#[test]
fn s11_3d_slowest_dimension_differs() {
    let s = ids_scenario(
        "ids",
        21,
        &[
            (
                NdRange::new(&[2, 2, 2]).with_local(&[2, 1, 2]),
                RangeSpec::new(&[2, 2, 2]).with_local(&[2, 1, 2]),
            ),
            (
                NdRange::new(&[2, 2, 4]).with_local(&[2, 1, 2]),
                RangeSpec::new(&[2, 2, 4]).with_local(&[2, 1, 2]),
            ),
        ],
    );
    check(&s).unwrap();
}

#[test]
fn s30_slowest_dimension_differs_without_local_size() {
    // No id remapping; the interpreter's default local size depends on dimension 0 only, so
    // every work-item query (num_groups included) must match the unfused runs.
    let s = ids_scenario(
        "ids",
        21,
        &[
            (NdRange::new(&[4, 2]), RangeSpec::new(&[4, 2])),
            (NdRange::new(&[4, 6]), RangeSpec::new(&[4, 6])),
            (NdRange::new(&[4, 3, 2]), RangeSpec::new(&[4, 3, 2])),
        ],
    );
    check(&s).unwrap();
}

#[test]
fn s12_remap_1d_2d_3d_without_local() {
    let s = ids_scenario(
        "gids",
        9,
        &[
            (NdRange::new(&[12]), RangeSpec::new(&[12])),
            (NdRange::new(&[3, 4]), RangeSpec::new(&[3, 4])),
            (NdRange::new(&[2, 3, 2]), RangeSpec::new(&[2, 3, 2]).with_offset(&[0, 0, 0])),
            (NdRange::new(&[5]), RangeSpec::new(&[5])),
        ],
    );
    let f = check(&s).unwrap();
    assert_eq!(f.range.dims, 3);
    // Ties on linear size: same frequency, so the lexicographically largest in SYCL order
    // (slowest first): [2, 3, 2] -> (2, 3, 2) beats [3, 4] -> (1, 4, 3) and [12] -> (1, 1, 12).
    assert_eq!(f.range.global, [2, 3, 2]);
}

#[test]
fn s13_remap_fused_range_by_frequency() {
    let s = ids_scenario(
        "gids",
        9,
        &[
            (NdRange::new(&[8]), RangeSpec::new(&[8])),
            (NdRange::new(&[2, 4]), RangeSpec::new(&[2, 4])),
            (NdRange::new(&[8]), RangeSpec::new(&[8])),
        ],
    );
    let f = check(&s).unwrap();
    assert_eq!((f.range.dims, f.range.global), (2, [8, 1, 1]));
}

#[test]
fn s14_ptx_mode_remaps_local_builtins() {
    // In PTX mode without a local size, each entry behaves as one work-group of its global
    // size: the oracle runs each entry with local = global.
    let mut s = ids_scenario(
        "ids",
        21,
        &[
            (NdRange::new(&[8]).with_local(&[8]), RangeSpec::new(&[8])),
            (NdRange::new(&[2, 3]).with_local(&[2, 3]), RangeSpec::new(&[2, 3])),
        ],
    );
    s.spec.remap = RemapMode::Ptx;
    check(&s).unwrap();
}

#[test]
fn s15_promotion_with_non_unit_size() {
    let r = NdRange::new(&[32]);
    let rs = RangeSpec::new(&[32]);
    let pool = vec![f32s(32, 1.0), f32s(64, 0.0), f32s(32, 0.0)];
    let mut s = scenario(
        &[("pair", r, rs.clone(), vec![b(0), b(1)]), ("unpair", r, rs, vec![b(1), b(2)])],
        pool,
    );
    s.spec.identical = vec![vec![ParamRef::new(0, 1), ParamRef::new(1, 0)]];
    s.spec.promote = vec![Promotion {
        param: ParamRef::new(0, 1),
        to: PromoteTo::Private,
        size: None,
        buffer_len: Some(64),
    }];
    let f = check(&s).unwrap();
    assert_eq!(f.args[0][1], ArgMap::Promoted { to: PromoteTo::Private, size: 2 });
    assert!(f.kernel.to_string().contains("private pair_tmp: f32[2];"));
}

#[test]
fn s16_promotion_refused_when_pointer_escapes() {
    let r = NdRange::new(&[8]);
    let rs = RangeSpec::new(&[8]);
    let pool = vec![Buffer::from_slice(&[1u32, 2, 3, 4, 5, 6, 7, 8])];
    let mut s =
        scenario(&[("count", r, rs.clone(), vec![b(0)]), ("count", r, rs, vec![b(0)])], pool);
    s.spec.identical = vec![vec![ParamRef::new(0, 0), ParamRef::new(1, 0)]];
    s.spec.promote = vec![Promotion {
        param: ParamRef::new(0, 0),
        to: PromoteTo::Private,
        size: Some(1),
        buffer_len: None,
    }];
    let f = check(&s).unwrap();
    assert_eq!(f.warnings.len(), 1);
    assert!(f.warnings[0].reason.contains("escapes"), "{}", f.warnings[0]);
    assert_eq!(f.args[0][0], ArgMap::Param(0));
    // Written back: the buffer changed, exactly as in the sequential run.
    assert_ne!(run_fused(&s, &f).unwrap()[0].to_vec::<u32>(), s.pool[0].to_vec::<u32>());
}

#[test]
fn s17_promotion_conflicts_warn() {
    let mut s = add_mul(None);
    s.spec.promote = vec![
        Promotion {
            param: ParamRef::new(0, 2),
            to: PromoteTo::Private,
            size: Some(1),
            buffer_len: None,
        },
        Promotion { param: ParamRef::new(1, 0), to: PromoteTo::None, size: None, buffer_len: None },
    ];
    let f = check(&s).unwrap();
    assert!(f.warnings[0].reason.contains("none and private"));
    s.spec.promote[1] = Promotion {
        param: ParamRef::new(1, 0),
        to: PromoteTo::Private,
        size: Some(2),
        buffer_len: None,
    };
    let f = check(&s).unwrap();
    assert!(f.warnings[0].reason.contains("different sizes"));
    s.spec.promote = vec![Promotion {
        param: ParamRef::new(1, 0),
        to: PromoteTo::Local,
        size: Some(2),
        buffer_len: None,
    }];
    let f = check(&s).unwrap();
    assert!(f.warnings[0].reason.contains("explicit local size"));
}

#[test]
fn s18_constant_propagation() {
    let r = NdRange::new(&[16]);
    let rs = RangeSpec::new(&[16]);
    let pool = vec![f32s(16, 1.0), f32s(16, 0.0), f32s(16, 0.0)];
    let mut s = scenario(
        &[
            ("scale", r, rs.clone(), vec![b(0), Arg::scalar(2.5f32), b(1)]),
            ("scale", r, rs, vec![b(1), Arg::scalar(-1.0f32), b(2)]),
        ],
        pool,
    );
    s.spec.identical = vec![vec![ParamRef::new(0, 2), ParamRef::new(1, 0)]];
    s.spec.constants = vec![
        Constant { param: ParamRef::new(0, 1), value: ConstValue::Float(2.5) },
        Constant { param: ParamRef::new(1, 1), value: ConstValue::Int(-1) },
    ];
    let f = check(&s).unwrap();
    assert!(f.kernel.params().iter().all(|p| p.ty().is_ptr()), "scalars removed");
    assert!(f.kernel.to_string().contains("* 2.5"));
}

#[test]
fn s19_identical_arguments_elided_within_one_kernel() {
    let r = NdRange::new(&[8]);
    let rs = RangeSpec::new(&[8]);
    let pool = vec![f32s(8, 1.0), f32s(8, 0.0)];
    let mut s = scenario(&[("add", r, rs, vec![b(0), b(0), b(1)])], pool);
    s.spec.identical = vec![vec![ParamRef::new(0, 0), ParamRef::new(0, 1)]];
    let f = check(&s).unwrap();
    assert_eq!(f.args[0], vec![ArgMap::Param(0), ArgMap::Identical(0), ArgMap::Param(1)]);
}

fn two(k: &str, a: RangeSpec, b2: RangeSpec) -> Scenario {
    let pool = vec![f32s(64, 0.0), f32s(64, 0.0)];
    let ra = NdRange::new(&a.global);
    let rb = NdRange::new(&b2.global);
    scenario(&[(k, ra, a, vec![b(0)]), (k, rb, b2, vec![b(1)])], pool)
}

#[test]
fn s20_abort_local_sizes_differ() {
    let s = two(
        "syncs",
        RangeSpec::new(&[16]).with_local(&[4]),
        RangeSpec::new(&[16]).with_local(&[8]),
    );
    assert_eq!(fuse_err(&s), FusionError::LocalSizeMismatch { first: 0, second: 1 });
}

#[test]
fn s21_abort_offsets_differ() {
    let s = two(
        "syncs",
        RangeSpec::new(&[16]).with_offset(&[1]),
        RangeSpec::new(&[16]).with_offset(&[2]),
    );
    assert_eq!(fuse_err(&s), FusionError::OffsetMismatch { first: 0, second: 1 });
}

#[test]
fn s22_abort_offset_with_remap() {
    let s = two("gids", RangeSpec::new(&[16]).with_offset(&[1]), RangeSpec::new(&[4, 2]));
    let e = fuse_err(&s);
    assert_eq!(e, FusionError::OffsetWithRemap { entry: 0 });
    assert!(e.to_string().contains("no offset with id remapping"));
}

#[test]
fn s23_abort_not_divisible() {
    let s = two("gids", RangeSpec::new(&[12]).with_local(&[4]), RangeSpec::new(&[18]));
    assert!(matches!(fuse_err(&s), FusionError::NotDivisible { local: [4, 1, 1], .. }));
}

#[test]
fn s24_abort_explicit_local_with_remap() {
    let s = two("gids", RangeSpec::new(&[8]).with_local(&[2]), RangeSpec::new(&[2, 4]));
    assert_eq!(fuse_err(&s), FusionError::LocalSizeWithRemap { entry: 0 });
}

#[test]
fn s25_abort_work_group_not_preserved() {
    let s = two("syncs", RangeSpec::new(&[8]), RangeSpec::new(&[2, 4]));
    assert!(matches!(fuse_err(&s), FusionError::WorkGroupNotPreserved { .. }));
    let s = two("syncs", RangeSpec::new(&[8]), RangeSpec::new(&[16]));
    assert_eq!(fuse_err(&s), FusionError::WorkGroupNotPreserved { entry: 0 });
}

#[test]
fn s26_abort_reqd_work_group_sizes_differ() {
    let mut s = two("sized", RangeSpec::new(&[16]), RangeSpec::new(&[16]));
    s.spec.kernels[1] = "sized8".into();
    let e = fuse_err(&s);
    assert!(
        matches!(
            e,
            FusionError::LocalSizeMismatch { .. } | FusionError::ReqdWorkGroupSizeMismatch { .. }
        ),
        "{e}"
    );
    // With a spec local size that contradicts the attribute, the range itself is bad.
    let s = two("sized", RangeSpec::new(&[16]).with_local(&[8]), RangeSpec::new(&[16]));
    assert!(matches!(fuse_err(&s), FusionError::BadRange { entry: 0, .. }));
}

#[test]
fn s27_abort_bad_inputs() {
    let mut s = add_mul(None);
    s.spec.identical = vec![vec![ParamRef::new(0, 0), ParamRef::new(5, 0)]];
    assert!(matches!(fuse_err(&s), FusionError::BadParam { entry: 5, .. }));
    let mut s = add_mul(None);
    s.spec.kernels[1] = "nope".into();
    assert!(matches!(fuse_err(&s), FusionError::UnknownKernel { entry: 1, .. }));
    let mut s = add_mul(None);
    s.spec.ndranges.pop();
    assert!(matches!(fuse_err(&s), FusionError::RangeCount { .. }));
    let mut s = add_mul(None);
    s.spec.ndranges[0] = RangeSpec::new(&[]);
    assert!(matches!(fuse_err(&s), FusionError::BadRange { entry: 0, .. }));
    let mut s = add_mul(None);
    s.spec.ndranges[0] = RangeSpec::new(&[10]).with_local(&[3]);
    assert!(matches!(fuse_err(&s), FusionError::BadRange { entry: 0, .. }));
    let mut s = add_mul(None);
    s.spec.constants = vec![Constant { param: ParamRef::new(0, 0), value: ConstValue::Int(1) }];
    assert!(matches!(fuse_err(&s), FusionError::ConstantNotScalar { .. }));
    let mut s = add_mul(None);
    s.spec.kernels = vec![];
    s.spec.ndranges = vec![];
    assert_eq!(fuse_err(&s), FusionError::Empty);
}

#[test]
fn s28_abort_identical_types_differ() {
    let mut s = two("wide", RangeSpec::new(&[8]), RangeSpec::new(&[8]));
    s.spec.kernels[1] = "syncs".into();
    s.spec.identical = vec![vec![ParamRef::new(0, 0), ParamRef::new(1, 0)]];
    assert!(matches!(fuse_err(&s), FusionError::IdenticalTypeMismatch { .. }));
}

#[test]
fn s29_fusion_key() {
    let s = add_mul(None);
    let k1 = fusion_key(&s.module, &s.spec);
    assert_eq!(k1, fusion_key(&s.module, &s.spec.clone()));
    let mut t = s.spec.clone();
    t.barriers = BarrierPolicy::None;
    assert_ne!(k1, fusion_key(&s.module, &t));
    // Equal ranges are not part of the key; differing ones are.
    let mut t = s.spec.clone();
    t.ndranges = vec![RangeSpec::new(&[128]), RangeSpec::new(&[128])];
    assert_eq!(k1, fusion_key(&s.module, &t));
    t.ndranges[1] = RangeSpec::new(&[64]);
    assert_ne!(k1, fusion_key(&s.module, &t));
    // Identical groups are normalized.
    let mut t = s.spec.clone();
    t.identical = vec![vec![ParamRef::new(1, 0), ParamRef::new(0, 2)]];
    assert_eq!(k1, fusion_key(&s.module, &t));
    // Constants by their bits: two NaN payloads are two keys; the order given does not count.
    let c = |param, bits: u64| Constant { param, value: ConstValue::Float(f64::from_bits(bits)) };
    let (p, q) = (ParamRef::new(0, 1), ParamRef::new(1, 1));
    let nan = |a: u64, b: u64| {
        let mut t = s.spec.clone();
        t.constants = vec![c(p, a), c(q, b)];
        fusion_key(&s.module, &t)
    };
    let (n1, n2) = (0x7ff8_0000_0000_0001, 0x7ff8_0000_0000_0002);
    assert_ne!(nan(n1, 0), nan(n2, 0));
    let mut t = s.spec.clone();
    t.constants = vec![c(q, 0), c(p, n1)];
    assert_eq!(nan(n1, 0), fusion_key(&s.module, &t));
    assert!(nan(n1, 0).to_string().contains("0.1=f7ff8000000000001"), "{}", nan(n1, 0));
}

/// Random nd-range combinations (legal or not) of work-item-query kernels: when fusion
/// succeeds, the fused run is exact; when it fails, the error names a rule.
fn arb_range() -> impl Strategy<Value = RangeSpec> {
    (1usize..=3, proptest::collection::vec(0usize..5, 3), any::<bool>(), 0u32..3, any::<bool>())
        .prop_map(|(dims, g, with_local, off, with_off)| {
            let sizes = [1u32, 2, 4, 6, 8];
            let global: Vec<u32> = (0..dims).map(|d| sizes[g[d]]).collect();
            let mut r = RangeSpec::new(&global);
            if with_local {
                let l: Vec<u32> = global.iter().map(|&x| if x % 2 == 0 { 2 } else { 1 }).collect();
                r = r.with_local(&l);
            }
            if with_off {
                r = r.with_offset(&vec![off; dims]);
            }
            r
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn legal_ranges_fuse_exactly(ranges in proptest::collection::vec(arb_range(), 1..4)) {
        let all_local = ranges.iter().all(|r| r.local.is_some());
        let (kernel, per) = if all_local { ("ids", 21) } else { ("gids", 9) };
        let module = parse_module(CHAIN).unwrap();
        let spec = FusionSpec {
            name: "fused".into(),
            kernels: vec![kernel.to_string(); ranges.len()],
            ndranges: ranges.clone(),
            ..FusionSpec::default()
        };
        match fuse_kernels(&module, &spec) {
            Ok(f) => {
                let mut pool = Vec::new();
                let mut entries = Vec::new();
                for r in &ranges {
                    let mut nd = NdRange::new(&r.global);
                    let dims = r.global.len();
                    if let Some(l) = r.local.as_ref().or(f.range.local.as_ref().map(|l| &l[..dims]).map(|l| l.to_vec()).as_ref()) {
                        nd = nd.with_local(&l[..dims]);
                    }
                    nd = nd.with_offset(&r.offset.clone().unwrap_or_else(|| f.range.offset[..dims].to_vec()));
                    pool.push(Buffer::zeroed(kiln_ir::Scalar::U32, nd.work_items() as usize * per));
                    entries.push(Entry { kernel: kernel.to_string(), range: nd, args: vec![b(pool.len() - 1)] });
                }
                let s = Scenario { module, spec, entries, pool };
                if let Err(m) = check(&s) {
                    prop_assert!(false, "{m}\nranges {ranges:?}");
                }
            }
            Err(e) => {
                let text = e.to_string();
                prop_assert!(
                    text.contains("rule `") || matches!(e, FusionError::BadRange { .. }),
                    "{text}"
                );
            }
        }
    }
}
