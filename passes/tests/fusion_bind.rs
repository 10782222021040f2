//! `FusedKernel::bind_args`: arguments given against the original kernels, bound to the
//! fused kernel's parameters through its argument map, and the bindings it must refuse.

use kiln_ir::launch::Arg;
use kiln_ir::{parse_module, Imm, Module, Scalar};
use kiln_passes::fusion::{
    fuse_kernels, ArgMap, BindError, ConstValue, Constant, FusionSpec, ParamRef, PromoteTo,
    Promotion, RangeSpec,
};

const SRC: &str = "
kernel scale(x: ptr<global, f32>, y: ptr<global, f32>, s: f32) {
  let i: u32 = global_id(0);
  y[i] = x[i] * s;
}
kernel add(y: ptr<global, f32>, z: ptr<global, f32>, out: ptr<global, f32>) {
  let i: u32 = global_id(0);
  out[i] = y[i] + z[i];
}
";

fn module() -> Module {
    parse_module(SRC).unwrap()
}

/// scale then add; y is shared (identical), promoted to private memory; s is a constant.
fn spec() -> FusionSpec {
    FusionSpec {
        name: "fused".into(),
        kernels: vec!["scale".into(), "add".into()],
        ndranges: vec![RangeSpec::new(&[8]), RangeSpec::new(&[8])],
        identical: vec![vec![ParamRef::new(0, 1), ParamRef::new(1, 0)]],
        promote: vec![Promotion {
            param: ParamRef::new(0, 1),
            to: PromoteTo::Private,
            size: Some(1),
            buffer_len: None,
        }],
        constants: vec![Constant { param: ParamRef::new(0, 2), value: ConstValue::Float(2.0) }],
        ..Default::default()
    }
}

fn two() -> Arg {
    Arg::Scalar(Imm::float(Scalar::F32, 2.0))
}

#[test]
fn bind_args_follows_the_argument_map() {
    let (m, s) = (module(), spec());
    let f = fuse_kernels(&m, &s).unwrap();
    let args = vec![
        vec![Arg::Buffer(0), Arg::Buffer(1), two()],
        vec![Arg::Buffer(1), Arg::Buffer(2), Arg::Buffer(3)],
    ];
    let bound = f.bind_args(&m, &s, &args).unwrap();
    // Independently of the binder: each fused parameter gets the argument its ArgMap says.
    assert_eq!(bound.len(), f.kernel.params().len());
    let mut expected = vec![None; bound.len()];
    for (e, maps) in f.args.iter().enumerate() {
        for (p, map) in maps.iter().enumerate() {
            if let ArgMap::Param(j) = map {
                expected[*j] = Some(args[e][p].clone());
            }
        }
    }
    assert_eq!(bound, expected.into_iter().map(Option::unwrap).collect::<Vec<_>>());
    // y (buffer 1) is promoted and s a constant: neither is passed.
    assert_eq!(bound, vec![Arg::Buffer(0), Arg::Buffer(2), Arg::Buffer(3)]);
}

#[test]
fn bind_args_refuses_different_arguments_for_identical_parameters() {
    let (m, mut s) = (module(), spec());
    s.promote.clear();
    let f = fuse_kernels(&m, &s).unwrap();
    let args = vec![
        vec![Arg::Buffer(0), Arg::Buffer(1), two()],
        vec![Arg::Buffer(4), Arg::Buffer(2), Arg::Buffer(3)],
    ];
    let e = f.bind_args(&m, &s, &args).unwrap_err();
    assert!(
        matches!(&e, BindError::NotIdentical { entry: 1, param, first_param, .. }
        if param == "y" && first_param == "y"),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "entry 1: kernel `add` parameter `y` was fused as identical to `scale` parameter `y` \
         (entry 0), but another argument was given for it"
    );
}

#[test]
fn bind_args_refuses_another_value_for_a_constant() {
    let (m, s) = (module(), spec());
    let f = fuse_kernels(&m, &s).unwrap();
    let three = Arg::Scalar(Imm::float(Scalar::F32, 3.0));
    let args = vec![
        vec![Arg::Buffer(0), Arg::Buffer(1), three],
        vec![Arg::Buffer(1), Arg::Buffer(2), Arg::Buffer(3)],
    ];
    let e = f.bind_args(&m, &s, &args).unwrap_err();
    assert!(matches!(&e, BindError::ConstantMismatch { param, .. } if param == "s"), "{e:?}");
    assert_eq!(
        e.to_string(),
        "entry 0: kernel `scale` parameter `s` was fused as the constant 2.0f32, but 3.0f32 \
         was given"
    );
}

#[test]
fn bind_args_refuses_wrong_counts() {
    let (m, s) = (module(), spec());
    let f = fuse_kernels(&m, &s).unwrap();
    let e = f.bind_args(&m, &s, &[vec![Arg::Buffer(0), Arg::Buffer(1), two()]]).unwrap_err();
    assert_eq!(e, BindError::EntryCount { expected: 2, got: 1 });
    let args = vec![vec![Arg::Buffer(0), Arg::Buffer(1), two()], vec![Arg::Buffer(1)]];
    let e = f.bind_args(&m, &s, &args).unwrap_err();
    assert_eq!(e, BindError::ArgCount { entry: 1, kernel: "add".into(), expected: 3, got: 1 });
}

#[test]
fn bind_args_refuses_a_spec_the_kernel_was_not_fused_from() {
    let (m, s) = (module(), spec());
    let f = fuse_kernels(&m, &s).unwrap();
    let mut other = s.clone();
    other.kernels.push("add".into());
    let args = vec![
        vec![Arg::Buffer(0), Arg::Buffer(1), two()],
        vec![Arg::Buffer(1), Arg::Buffer(2), Arg::Buffer(3)],
    ];
    let e = f.bind_args(&m, &other, &args).unwrap_err();
    assert!(matches!(&e, BindError::Mismatch { fused, .. } if fused == "fused"), "{e:?}");
    // Another module whose kernel has fewer parameters than the fusion mapped.
    let small = parse_module(
        "kernel scale(x: ptr<global, f32>) { }\nkernel add(y: ptr<global, f32>, \
         z: ptr<global, f32>, out: ptr<global, f32>) { }",
    )
    .unwrap();
    let e = f.bind_args(&small, &s, &args).unwrap_err();
    assert!(matches!(e, BindError::Mismatch { .. }), "{e:?}");
}
