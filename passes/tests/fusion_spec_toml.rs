//! The TOML form of the fusion spec: the issue's example, every field, and typed errors.

use kiln_passes::fusion::{
    BarrierPolicy, ConstValue, FusionSpec, ParamRef, PromoteTo, RangeSpec, RemapMode, SpecError,
};

#[test]
fn issue_example_parses() {
    let s = FusionSpec::from_toml(
        r#"
name = "fused"
kernels = ["add", "mul"]
ndranges = [{ global = [512] }, { global = [512] }]
identical = [[[0, 2], [1, 0]]]
promote = [{ entry = 0, param = 2, to = "private" }]
constants = [{ entry = 1, param = 3, value = 16 }]
"#,
    )
    .unwrap();
    assert_eq!(s.name, "fused");
    assert_eq!(s.kernels, ["add", "mul"]);
    assert_eq!(s.ndranges, vec![RangeSpec::new(&[512]), RangeSpec::new(&[512])]);
    assert_eq!(s.identical, vec![vec![ParamRef::new(0, 2), ParamRef::new(1, 0)]]);
    assert_eq!(s.promote[0].to, PromoteTo::Private);
    assert_eq!(s.promote[0].size, None);
    assert_eq!(s.constants[0].value, ConstValue::Int(16));
    assert_eq!((s.barriers, s.remap), (BarrierPolicy::WorkGroup, RemapMode::Default));
}

#[test]
fn every_field() {
    let s = FusionSpec::from_toml(
        r#"
kernels = ["a"]
ndranges = [{ global = [8, 4], local = [4, 2], offset = [1, 0] }]
promote = [{ entry = 0, param = 1, to = "local", size = 4, buffer_len = 32 }]
constants = [{ entry = 0, param = 0, value = 2.5 }, { entry = 0, param = 2, value = true }]
barriers = "none"
remap = "ptx"
"#,
    )
    .unwrap();
    assert_eq!(s.name, "fused");
    assert_eq!(s.ndranges[0], RangeSpec::new(&[8, 4]).with_local(&[4, 2]).with_offset(&[1, 0]));
    assert_eq!((s.promote[0].size, s.promote[0].buffer_len), (Some(4), Some(32)));
    assert_eq!(s.constants[0].value, ConstValue::Float(2.5));
    assert_eq!(s.constants[1].value, ConstValue::Bool(true));
    assert_eq!((s.barriers, s.remap), (BarrierPolicy::None, RemapMode::Ptx));
}

#[test]
fn malformed_specs_are_typed_errors() {
    for (text, what) in [
        ("kernels = 3\nndranges = []", "invalid type"),
        ("ndranges = []", "missing field `kernels`"),
        ("kernels = []\nndranges = []\nbogus = 1", "unknown field"),
        ("kernels = []\nndranges = [{ global = [-1] }]", "invalid value"),
        ("kernels = []\nndranges = []\nbarriers = \"sometimes\"", "barriers is `sometimes`"),
        ("kernels = []\nndranges = []\nremap = \"spirv\"", "remap is `spirv`"),
        (
            "kernels = []\nndranges = []\npromote = [{ entry = 0, param = 0, to = \"global\" }]",
            "promote.to is `global`",
        ),
        ("kernels = []\nndranges = []\nidentical = [[[0]]]", "invalid length"),
        ("kernels = [", "TOML parse error"),
        // Regression: an explicit empty name silently became `fused`.
        ("name = \"\"\nkernels = []\nndranges = []", "name is empty"),
    ] {
        let e: SpecError = FusionSpec::from_toml(text).unwrap_err();
        assert!(e.to_string().contains(what), "{text}: {e}");
    }
}
