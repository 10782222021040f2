//! The build driver and the target registry: every registered target builds the examples
//! through the one path (verify once, sanitize and optimize as asked, emit), what each step
//! refuses comes back as one `BackendError` of the right kind, and the `kir` target prints
//! kernels that parse back to the same IR.

use kiln_backends::driver::{build, lower};
use kiln_backends::options::BuildOptions;
use kiln_backends::registry::{self, TargetOptions, TARGETS};
use kiln_backends::target::{ErrorKind, Lowering};
use kiln_ir::testing::example_source;
use kiln_ir::{parse_module, Module, Verified};

fn module(src: &str) -> Module {
    parse_module(src).unwrap_or_else(|e| panic!("{e}\n{src}"))
}

fn options(text: &str) -> BuildOptions {
    BuildOptions::parse(text).unwrap()
}

#[test]
fn every_target_builds_the_examples() {
    for name in ["saxpy", "reduce", "stencil2d", "divergent"] {
        let m = module(&example_source(name));
        for t in TARGETS {
            let target = registry::target(t.name, &TargetOptions::default()).unwrap();
            let verified = Verified::new(m.clone()).unwrap();
            for opts in ["", "-O0", "-fsanitize=bounds"] {
                let (kernels, _) =
                    lower(&target.name(), target.lowering(), verified.clone(), &options(opts))
                        .unwrap_or_else(|e| panic!("{name} for {}: {e}", t.name));
                let out = target.emit_any(&kernels).unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(out.is_binary(), t.binary, "{}", t.name);
                assert!(!out.to_bytes().is_empty() && !out.listing().is_empty(), "{}", t.name);
            }
        }
    }
}

#[test]
fn the_kir_target_prints_what_parses_back() {
    let m = module(&example_source("reduce"));
    let kir = registry::target("kir", &TargetOptions::default()).unwrap();
    let (kernels, _) =
        lower("kir", kir.lowering(), Verified::new(m.clone()).unwrap(), &options("")).unwrap();
    let text = kir.emit_any(&kernels).unwrap().listing();
    let back = parse_module(&text).unwrap();
    assert!(back.kernels[0].is_equal(&m.kernels[0]), "{text}");
    // The interpreter's programs are the kernels as written: no -O, no sanitizer rewrite.
    assert_eq!(
        kir.lowering(),
        Lowering {
            optimize: false,
            sanitize: false,
            vectors: kiln_backends::target::VectorLowering::Native
        }
    );
}

#[test]
fn options_choose_what_the_driver_does() {
    let m = module("kernel k(x: ptr<global, u32>) { let i: u32 = global_id(0); x[i] = 2 + 3; }");
    let ptx = kiln_backends::ptx::Ptx(kiln_backends::ptx::Options::sm(80));
    // -O folds the constant; -O0 keeps the add.
    let optimized = build(&ptx, &m, &options("-O")).unwrap();
    let plain = build(&ptx, &m, &options("-O0")).unwrap();
    assert!(!optimized.kernels.kernels[0].is_equal(&plain.kernels.kernels[0]));
    assert!(plain.kernels.kernels[0].is_equal(&m.kernels[0]));
    assert!(optimized.sanitized.is_none() && plain.sanitized.is_none());
    // The sanitizer adds its hidden parameters and hands back its tables, one per kernel.
    let checked = build(&ptx, &m, &options("-O0 -fsanitize=bounds")).unwrap();
    let tables = checked.sanitized.expect("sanitizer tables");
    assert_eq!(tables.len(), 1);
    assert!(checked.kernels.kernels[0].params().len() > m.kernels[0].params().len());
}

#[test]
fn refusals_are_one_error_type_with_kinds() {
    let ptx = kiln_backends::ptx::Ptx::default();
    let bad = module("kernel k(x: ptr<global, u32>) { x[0] = 1.5; }");
    let e = build(&ptx, &bad, &options("")).unwrap_err();
    assert_eq!((e.kind, e.target.as_str(), e.kernel.as_str()), (ErrorKind::IllFormed, "ptx", "k"));
    assert!(e.to_string().starts_with("ptx backend, kernel `k`: ill-formed kernel:"), "{e}");
    // A shared array past sm_90's 227 KiB of dynamic shared memory, named with the limit.
    let big = module("kernel big(x: ptr<global, u32>) { local a: u32[60000]; x[0] = a[0]; }");
    let e = build(&ptx, &big, &options("")).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Limit, "{e}");
    assert!(e.message.contains("232448"), "{e}");
    let spirv = kiln_backends::spirv::Spirv::new(kiln_backends::spirv::Flavour::OpenCl);
    let f16 = module("kernel h(x: ptr<global, f16>) { x[0] = x[1]; }");
    let e = build(&spirv, &f16, &options("")).unwrap_err();
    assert_eq!((e.kind, e.target.as_str()), (ErrorKind::Unsupported, "spirv-cl"), "{e}");
    // Unknown targets are refused by name, listing the known ones.
    let e = registry::target("x87", &TargetOptions::default()).err().unwrap();
    assert!(e.contains("unknown target `x87`") && e.contains("ptx, spirv-cl"), "{e}");
}
