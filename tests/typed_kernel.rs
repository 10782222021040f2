//! Typed kernel handles (`Jit::kernel`): the signature is checked once, when the handle is
//! made, naming the parameter at fault; launches give the interpreter's bits on every
//! device, through the same path as `kiln::args!` launches. (That a wrong Rust type does not
//! compile is shown by the `compile_fail` doc tests of `kiln::TypedKernel`.)

use kiln::{args, f16, Buffer, Device, Error, Jit, NdRange};

const SAXPY: &str = include_str!("../examples/saxpy.kir");

/// One parameter of every scalar type kiln has, and a buffer: twelve, the most a signature
/// takes. Each scalar lands in its own element of `out`, as an f64.
const MIX: &str = "kernel mix(out: ptr<global, f64>, a: i8, b: i16, c: i32, d: i64, e: u8, \
    f: u16, g: u32, h: u64, x: f16, y: f32, z: bool) {
  out[0] = a as f64; out[1] = b as f64; out[2] = c as f64; out[3] = d as f64;
  out[4] = e as f64; out[5] = f as f64; out[6] = g as f64; out[7] = h as f64;
  out[8] = x as f64; out[9] = y as f64;
  if z { out[10] = 1.0; }
}";

type Saxpy<'a> = (&'a Buffer<f32>, &'a Buffer<f32>, f32, u32);

/// saxpy through a typed handle and through `args!` on `dev`, and through `args!` on the
/// interpreter: the same bits all three ways.
fn typed_saxpy_matches_the_interpreter(dev: Device) {
    let n = 100u32;
    let xs: Vec<f32> = (0..n).map(|i| i as f32 * 0.37 - 9.0).collect();
    let ys: Vec<f32> = (0..n).map(|i| 1.0 / (i as f32 + 1.0)).collect();
    let run_dynamic = |dev: Device| {
        let jit = Jit::new(dev).unwrap();
        let m = jit.compile_source("saxpy.kir", SAXPY).unwrap();
        let (x, y) = (jit.buffer_from(&xs), jit.buffer_from(&ys));
        jit.launch(&m, "saxpy", NdRange::new(&[128]), args![&x, &y, 1.7f32, n])
            .unwrap()
            .wait()
            .unwrap();
        y.read().unwrap()
    };
    let want = run_dynamic(Device::interp());
    let jit = Jit::new(dev.clone()).unwrap();
    let m = jit.compile_source("saxpy.kir", SAXPY).unwrap();
    let saxpy = jit.kernel::<Saxpy>(&m, "saxpy").unwrap();
    assert_eq!(saxpy.name(), "saxpy");
    // The handle outlives the buffers of each launch, and one range (a `usize` size) serves
    // every launch: `NdRange` is `Copy`.
    let range = NdRange::try_new(&[128usize]).unwrap();
    for round in 0..2 {
        let (x, y) = (jit.buffer_from(&xs), jit.buffer_from(&ys));
        saxpy.launch(range, (&x, &y, 1.7, n)).unwrap().wait().unwrap();
        let got = y.read().unwrap();
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want), "round {round} on {dev:?}");
    }
    assert_eq!(run_dynamic(dev), want);
}

#[test]
fn typed_saxpy_interp() {
    typed_saxpy_matches_the_interpreter(Device::interp());
}

#[test]
fn typed_saxpy_cpu() {
    if let Some(dev) = kiln_ir::testing::require("KILN_REQUIRE_TOOLS", Device::cpu()) {
        typed_saxpy_matches_the_interpreter(dev);
    }
}

/// Every scalar type maps to its kiln type (a wrong mapping would be refused at `kernel`),
/// and each value arrives unchanged.
#[test]
fn every_scalar_type_and_twelve_parameters() {
    type Mix<'a> = (&'a Buffer<f64>, i8, i16, i32, i64, u8, u16, u32, u64, f16, f32, bool);
    let jit = Jit::new(Device::interp()).unwrap();
    let m = jit.compile_source("mix.kir", MIX).unwrap();
    let mix = jit.kernel::<Mix>(&m, "mix").unwrap();
    let out = jit.buffer_from(&[-1.0f64; 11]);
    let args = (&out, -3, -300, -70000, -(1i64 << 40), 200, 60000, 4_000_000_000, 1u64 << 50);
    let (o, a, b, c, d, e, f, g, h) = args;
    let x = f16::from_f32(1.5);
    mix.launch(NdRange::new(&[1]), (o, a, b, c, d, e, f, g, h, x, 0.25, true))
        .unwrap()
        .wait()
        .unwrap();
    let want = [
        -3.0,
        -300.0,
        -70000.0,
        -((1u64 << 40) as f64),
        200.0,
        60000.0,
        4e9,
        (1u64 << 50) as f64,
        1.5,
        0.25,
        1.0,
    ];
    assert_eq!(out.read().unwrap(), want);
    // Swapping two scalar types is refused, naming the first parameter that differs.
    type Swapped<'a> = (&'a Buffer<f64>, i8, i16, i32, i64, u8, u16, u32, u64, f32, f16, bool);
    let err = jit.kernel::<Swapped>(&m, "mix").unwrap_err();
    assert_eq!(
        err.to_string(),
        "kernel `mix`: argument 9 (`x`) is a f16 but the value given is a f32"
    );
}

/// The handle is refused when made, not at launch: each message names the parameter, its
/// type and the signature's, or the count.
#[test]
fn a_wrong_signature_is_refused_when_the_handle_is_made() {
    let jit = Jit::new(Device::interp()).unwrap();
    let m = jit.compile_source("saxpy.kir", SAXPY).unwrap();
    let msg = |e: Error| {
        assert!(matches!(e, Error::Argument { .. }), "{e:?}");
        e.to_string()
    };
    assert_eq!(
        msg(jit.kernel::<(&Buffer<f32>, &Buffer<f32>, f64, u32)>(&m, "saxpy").unwrap_err()),
        "kernel `saxpy`: argument 2 (`a`) is a f32 but the value given is a f64"
    );
    assert_eq!(
        msg(jit.kernel::<(&Buffer<f32>, &Buffer<u32>, f32, u32)>(&m, "saxpy").unwrap_err()),
        "kernel `saxpy`: argument 1 (`y`) is a ptr<global, f32> but the buffer given holds u32 \
         elements"
    );
    assert_eq!(
        msg(jit.kernel::<(&Buffer<f32>, f32, f32, u32)>(&m, "saxpy").unwrap_err()),
        "kernel `saxpy`: argument 1 (`y`) is a ptr<global, f32> but a scalar was given"
    );
    assert_eq!(
        msg(jit
            .kernel::<(&Buffer<f32>, &Buffer<f32>, f32, &Buffer<u32>)>(&m, "saxpy")
            .unwrap_err()),
        "kernel `saxpy`: argument 3 (`n`) is a u32 but a buffer was given"
    );
    assert_eq!(
        msg(jit.kernel::<(&Buffer<f32>, &Buffer<f32>, f32)>(&m, "saxpy").unwrap_err()),
        "kernel `saxpy`: the kernel takes 4 arguments (x: ptr<global, f32>, y: ptr<global, f32>, a: f32, \
         n: u32), 3 given"
    );
    assert_eq!(
        msg(jit.kernel::<(&Buffer<f32>, &Buffer<f32>, f32, u32, u32)>(&m, "saxpy").unwrap_err()),
        "kernel `saxpy`: the kernel takes 4 arguments (x: ptr<global, f32>, y: ptr<global, f32>, a: f32, \
         n: u32), 5 given"
    );
    let err = jit.kernel::<()>(&m, "saxpi").unwrap_err();
    assert!(matches!(err, Error::NoKernel { .. }), "{err:?}");
}

/// A typed launch fails on the device the way an `args!` launch does (the interpreter
/// checks every access), and its failure comes back from `wait`.
#[test]
fn a_typed_launch_reports_device_failures_as_a_dynamic_one_does() {
    let jit = Jit::new(Device::interp()).unwrap();
    let m = jit
        .compile_source(
            "fill.kir",
            "kernel fill(x: ptr<global, f32>, v: f32) { let i: u32 = global_id(0); x[i] = v; }",
        )
        .unwrap();
    let fill = jit.kernel::<(&Buffer<f32>, f32)>(&m, "fill").unwrap();
    let a = jit.buffer_zeroed::<f32>(4);
    let err = fill.launch(NdRange::new(&[8]), (&a, 1.0)).unwrap().wait().unwrap_err();
    assert!(err.to_string().contains("kernel `fill` failed"), "{err}");
}

/// `NdRange::try_new` takes any unsigned integer type, and refuses what does not fit with
/// an error naming the dimension (through `?` as a `kiln::Error`).
#[test]
fn nd_ranges_from_any_unsigned_integer() {
    fn range_of(sizes: &[u64]) -> Result<NdRange, Error> {
        Ok(NdRange::try_new(sizes)?)
    }
    assert_eq!(NdRange::try_new(&[3u8, 4]).unwrap(), NdRange::new(&[3, 4]));
    assert_eq!(NdRange::try_new(&[7u16]).unwrap(), NdRange::new(&[7]));
    assert_eq!(NdRange::try_new(&[1usize, 2, 3]).unwrap(), NdRange::new(&[1, 2, 3]));
    assert_eq!(range_of(&[u32::MAX as u64]).unwrap(), NdRange::new(&[u32::MAX]));
    let err = range_of(&[4, 1 << 32]).unwrap_err();
    assert!(matches!(err, Error::Range(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        "nd-range dimension 1: global size 4294967296 does not fit in 32 bits (at most 4294967295)"
    );
    assert_eq!(
        range_of(&[]).unwrap_err().to_string(),
        "an nd-range has 1 to 3 dimensions, 0 given"
    );
    assert_eq!(
        range_of(&[1, 1, 1, 1]).unwrap_err().to_string(),
        "an nd-range has 1 to 3 dimensions, 4 given"
    );
}
