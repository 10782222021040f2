//! Requests fusion cannot honour exactly are refused with an error naming them (issue 12):
//! constants that do not fit their parameter's type, fused ranges whose linear id would wrap,
//! and fused kernel names that would not parse back.

use kiln_ir::{parse_module, Imm, Module, Scalar};
use kiln_passes::fusion::{
    fuse_kernels, ConstValue, Constant, FusionError, FusionSpec, ParamRef, RangeSpec,
};

const KERNELS: &str = "
kernel scalars(out: ptr<global, f32>, n: u32, i: i8, x: f32, h: f16, flag: bool, w: f64) {
  let g: u32 = global_id(0);
  if flag && g < n { out[g] = x + (i as f32) + (h as f32) + (w as f32); }
}
kernel fill(out: ptr<global, u32>) {
  out[global_id(0)] = global_id(1);
}
";

fn module() -> Module {
    parse_module(KERNELS).expect("KERNELS parses")
}

fn one(kernel: &str, global: &[u32]) -> FusionSpec {
    FusionSpec {
        name: "fused".into(),
        kernels: vec![kernel.into()],
        ndranges: vec![RangeSpec::new(global)],
        ..FusionSpec::default()
    }
}

fn with_const(
    param: usize,
    value: ConstValue,
) -> Result<kiln_passes::fusion::FusedKernel, FusionError> {
    let mut spec = one("scalars", &[8]);
    spec.constants = vec![Constant { param: ParamRef::new(0, param), value }];
    fuse_kernels(&module(), &spec)
}

/// Issue 12, item 2: `4294967296` for a u32 became 0, `-1` became 4294967295, `2.5` became
/// 2, `true` became 1.0 and `1e300` became f32 `inf`; each is now an error naming the entry,
/// the parameter and the value.
#[test]
fn constants_converted_silently_are_refused() {
    for (param, value, needle) in [
        (1, ConstValue::Int(4294967296), "`4294967296` is outside the range of `u32`"),
        (1, ConstValue::Int(-1), "`-1` is outside the range of `u32`"),
        (1, ConstValue::Float(2.5), "`2.5` is a float"),
        (1, ConstValue::Float(2.0), "`2.0` is a float"),
        (1, ConstValue::Bool(true), "`true` is a bool"),
        (2, ConstValue::Int(128), "outside the range of `i8` (-128 to 127)"),
        (3, ConstValue::Bool(true), "`true` is a bool, not a number of type `f32`"),
        (3, ConstValue::Float(1e300), "`1e300` overflows `f32`"),
        (3, ConstValue::Float(-1e39), "overflows `f32`"),
        (3, ConstValue::Float(1e-50), "underflows `f32`"),
        (4, ConstValue::Float(70000.0), "overflows `f16`"),
        (5, ConstValue::Int(1), "`1` is not a bool"),
        (5, ConstValue::Float(0.0), "`0.0` is not a bool"),
    ] {
        let e = with_const(param, value).expect_err(&format!("{value:?} for param {param}"));
        assert!(
            matches!(&e, FusionError::ConstantDoesNotFit { at, kernel, .. }
                if *at == ParamRef::new(0, param) && kernel == "scalars"),
            "{e:?}"
        );
        let msg = e.to_string();
        assert!(msg.contains(needle), "{value:?}: {msg}");
        assert!(msg.contains(&format!("parameter (0, {param})")), "{msg}");
    }
}

/// The values that do fit are taken exactly (and a decimal that a float cannot hold exactly
/// rounds as a float literal does).
#[test]
fn constants_that_fit_are_kept_exactly() {
    for (param, value, imm) in [
        (1, ConstValue::Int(4294967295), Imm::int(Scalar::U32, 4294967295)),
        (2, ConstValue::Int(-128), Imm::int(Scalar::I8, -128)),
        (3, ConstValue::Float(0.1), Imm::float(Scalar::F32, 0.1)),
        (3, ConstValue::Int(-3), Imm::float(Scalar::F32, -3.0)),
        (3, ConstValue::Float(f64::INFINITY), Imm::float(Scalar::F32, f64::INFINITY)),
        (5, ConstValue::Bool(false), Imm::Bool(false)),
        (6, ConstValue::Float(1e300), Imm::float(Scalar::F64, 1e300)),
    ] {
        assert_eq!(value.to_imm(imm.scalar()), Ok(imm), "{value:?}");
        let f = with_const(param, value).unwrap_or_else(|e| panic!("{value:?}: {e}"));
        assert_eq!(f.args[0][param], kiln_passes::fusion::ArgMap::Constant(imm));
    }
}

/// Issue 12, item 3: a fused range of more than 2^32 work-items placed by the u32 global
/// linear id (here a guard for the smaller entry) wrapped; it is refused.
#[test]
fn ndrange_beyond_2_32_work_items_is_refused() {
    let mut spec = one("fill", &[65536, 65537]);
    spec.kernels.push("fill".into());
    spec.ndranges.push(RangeSpec::new(&[65536, 65536]));
    let e = fuse_kernels(&module(), &spec).unwrap_err();
    assert_eq!(e, FusionError::TooManyWorkItems { items: 65536 * 65537 });
    assert!(e.to_string().contains("4295032832 work-items"), "{e}");
    // Exactly 2^32 work-items: the largest linear id, 2^32 - 1, still fits.
    spec.ndranges[0] = RangeSpec::new(&[65536, 65536]);
    spec.ndranges[1] = RangeSpec::new(&[65536, 65535]);
    let f = fuse_kernels(&module(), &spec).unwrap();
    assert_eq!(f.range.work_items(), 1 << 32);
}

/// Issue 12, item 4: `--name kernel` (or any name that is not an identifier) wrote a file
/// that does not parse; such names are refused, and accepted names print and parse back.
#[test]
fn fused_name_that_does_not_parse_is_refused() {
    for bad in ["kernel", "let", "u32", "ptr", "1abc", "a-b", "two words", "é"] {
        let mut spec = one("fill", &[4]);
        spec.name = bad.into();
        let e = fuse_kernels(&module(), &spec).unwrap_err();
        assert_eq!(e, FusionError::BadName(bad.into()));
        assert!(e.to_string().contains(&format!("`{bad}`")), "{e}");
    }
    for good in ["kernel_", "_x", "Fused2"] {
        let mut spec = one("fill", &[4]);
        spec.name = good.into();
        let f = fuse_kernels(&module(), &spec).unwrap();
        let back = parse_module(&Module::new(vec![f.kernel.clone()]).to_string()).unwrap();
        assert!(back.kernels[0].is_equal(&f.kernel));
    }
}
