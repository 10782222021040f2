//! `fusion_keeps_result`: the legality of fusing kernels whose shared buffers stay in
//! global memory (promotion's rules less "reads see earlier writes").

use kiln_ir::parse_module;
use kiln_passes::fusion::{fusion_keeps_result, BarrierPolicy, FusionSpec, ParamRef, RangeSpec};

const M: &str = "
kernel scale(x: ptr<global, u32>) { let i: u32 = global_id(0); x[i] = x[i] * 3u32; }
kernel inc(x: ptr<global, u32>) { let i: u32 = global_id(0); x[i] = x[i] + 1u32; }
kernel shift(x: ptr<global, u32>, o: ptr<global, u32>) {
  let i: u32 = global_id(0); o[i] = x[(i + 1u32) % 16u32]; }
kernel reverse(x: ptr<global, u32>, o: ptr<global, u32>) {
  let l: u32 = local_id(0); let b: u32 = group_id(0) * local_size(0);
  o[b + l] = x[b + (local_size(0) - 1u32 - l)]; }
";

fn spec(kernels: &[&str], local: Option<u32>, identical: Vec<Vec<ParamRef>>) -> FusionSpec {
    let r = |_| match local {
        Some(l) => RangeSpec::new(&[16]).with_local(&[l]),
        None => RangeSpec::new(&[16]),
    };
    FusionSpec {
        name: "f".into(),
        kernels: kernels.iter().map(|k| k.to_string()).collect(),
        ndranges: kernels.iter().map(r).collect(),
        identical,
        ..FusionSpec::default()
    }
}

#[test]
fn read_modify_write_of_own_elements_keeps_the_result() {
    let m = parse_module(M).unwrap();
    let s = spec(&["scale", "inc"], None, vec![vec![ParamRef::new(0, 0), ParamRef::new(1, 0)]]);
    // Promotion would refuse it (`scale` reads the buffer's earlier contents, which a
    // promoted array does not have); in global memory it is exact.
    fusion_keeps_result(&m, &s, &[(ParamRef::new(0, 0), Some(16))], false).unwrap().unwrap();
}

#[test]
fn another_work_items_element_is_refused_and_work_group_exchanges_need_per_group() {
    let m = parse_module(M).unwrap();
    let s = spec(&["inc", "shift"], None, vec![vec![ParamRef::new(0, 0), ParamRef::new(1, 0)]]);
    let e = fusion_keeps_result(&m, &s, &[(ParamRef::new(0, 0), Some(16))], false)
        .unwrap()
        .unwrap_err();
    assert!(e.contains("`x` of `inc`"), "{e}");
    let s =
        spec(&["inc", "reverse"], Some(4), vec![vec![ParamRef::new(0, 0), ParamRef::new(1, 0)]]);
    assert!(fusion_keeps_result(&m, &s, &[(ParamRef::new(0, 0), Some(16))], false)
        .unwrap()
        .is_err());
    fusion_keeps_result(&m, &s, &[(ParamRef::new(0, 0), Some(16))], true).unwrap().unwrap();
    // Without barriers, a work-group exchange is not ordered.
    let s = FusionSpec { barriers: BarrierPolicy::None, ..s };
    assert!(fusion_keeps_result(&m, &s, &[(ParamRef::new(0, 0), Some(16))], true)
        .unwrap()
        .is_err());
}
