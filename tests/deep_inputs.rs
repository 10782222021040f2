//! Deep and long inputs (issue 12): expression chains 8,000 and 100,000 levels deep, built with
//! the builders and written as text, through parse, verify, the interpreter, every pass, `-O`,
//! the printer and every backend, on a thread with the default 2 MiB test stack; and the same
//! through the `kiln` binary with generated files. Results are compared with the
//! interpreter's, which computes the same chain as plain wrapping Rust arithmetic.

use std::path::{Path, PathBuf};
use std::process::Command;

use kiln::backends::amdgpu;
use kiln::backends::ptx;
use kiln::backends::spirv::{self, Flavour};
use kiln::ir::depth::{max_expr_depth, MAX_EXPR_DEPTH};
use kiln::ir::interp;
use kiln::ir::launch::{Arg, Buffer, NdRange};
use kiln::ir::{parse_module, verify_kernel, AddrSpace, BinOp, Expr, Kernel, Scalar, Stmt, Type};
use kiln::ir::{Var, Visitor};
use kiln::passes::manager::PASSES;
use kiln::passes::pipeline::try_optimize;

/// Work items (and elements of the buffer).
const N: usize = 4;

/// The operator and constant of step `i` of every chain here.
fn step(i: usize) -> (BinOp, i32) {
    let c = (i % 7) as i32 + 1;
    match i % 4 {
        0 => (BinOp::Add, c),
        1 => (BinOp::Mul, c),
        2 => (BinOp::Xor, c),
        _ => (BinOp::Sub, c),
    }
}

/// What the chain of `n` steps computes from `v`, as the interpreter defines it (wrapping).
fn expected(mut v: i32, n: usize) -> i32 {
    for i in 0..n {
        v = match step(i) {
            (BinOp::Add, c) => v.wrapping_add(c),
            (BinOp::Mul, c) => v.wrapping_mul(c),
            (BinOp::Xor, c) => v ^ c,
            (_, c) => v.wrapping_sub(c),
        };
    }
    v
}

fn input() -> Vec<i32> {
    (0..N as i32).map(|i| i * 1000 - 7).collect()
}

/// `x[g] = chain(x[g])` with the chain as one expression `n` levels deep.
fn deep_kernel(n: usize) -> Kernel {
    let x = Var::new("x", Type::ptr(AddrSpace::Global, Scalar::I32));
    let g = Var::new("g", Type::U32);
    let mut e = x.load(&g);
    for i in 0..n {
        let (op, c) = step(i);
        e = Expr::binary(op, e, Expr::i32(c));
    }
    assert_eq!(e.depth(), n + 2);
    let body = Stmt::block([Stmt::let_(&g, Expr::global_id(0)), Stmt::store(&x, &g, e)]);
    Kernel::new("deep", vec![x], body)
}

/// Runs `k` in the interpreter on [`input`].
fn interpret(k: &Kernel) -> Vec<i32> {
    let mut bufs = vec![Buffer::from_slice(&input())];
    interp::run(k, &NdRange::new(&[N as u32]), &[Arg::Buffer(0)], &mut bufs)
        .unwrap_or_else(|e| panic!("{e}"));
    bufs[0].to_vec::<i32>().unwrap()
}

/// Runs `f` on a thread with the default 2 MiB test stack.
fn on_test_stack(f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new().stack_size(2 << 20).spawn(f).unwrap().join().unwrap();
}

/// True if no statement's expression is deeper than MAX_EXPR_DEPTH (depths are cached, so
/// visiting only the top of each expression is enough).
fn has_no_deep_expr(k: &Kernel) -> bool {
    struct Max(usize);
    impl Visitor for Max {
        fn visit_expr(&mut self, e: &Expr) {
            // Depth is cached: no need to descend.
            self.0 = self.0.max(e.depth());
        }
    }
    let mut m = Max(0);
    m.visit_kernel(k);
    m.0 <= MAX_EXPR_DEPTH
}

/// Passes that take more than a few seconds on a 100,000-deep chain in a test build
/// (super-linear, see passes/benches/long.rs): run at 8,000 deep only, to keep CI fast.
const SLOW_AT_100K: [&str; 1] = ["simplify"];

fn check_everything(k: Kernel, n: usize) {
    let want: Vec<i32> = input().into_iter().map(|v| expected(v, n)).collect();
    verify_kernel(&k).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(interpret(&k), want, "interpreter");
    for (name, pass, _) in PASSES {
        if n > 10_000 && SLOW_AT_100K.contains(name) {
            continue;
        }
        let out = pass(&k);
        verify_kernel(&out).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(interpret(&out), want, "after {name}");
    }
    let mut kernels = vec![k.clone()];
    if n <= 10_000 {
        let opt = try_optimize(&k).unwrap_or_else(|e| panic!("{e}"));
        assert!(has_no_deep_expr(&opt), "-O leaves depth {}", max_expr_depth(opt.body()));
        assert_eq!(interpret(&opt), want, "after -O");
        kernels.push(opt);
    }
    for kernel in &kernels {
        // Printed text parses back, to a kernel computing the same.
        let text = kernel.to_string();
        let back = parse_module(&text).unwrap_or_else(|d| panic!("{d}"));
        assert_eq!(interpret(&back.kernels[0]), want, "printed and parsed back");
        for flavour in [Flavour::Vulkan, Flavour::OpenCl] {
            let m = spirv::emit(kernel, flavour).unwrap_or_else(|e| panic!("{e}"));
            assert!(!m.to_bytes().is_empty());
        }
        let text = ptx::emit_kernel(kernel, &ptx::Options::default()).unwrap();
        assert!(text.contains(".entry deep"));
        let c = amdgpu::compile(kernel).unwrap_or_else(|e| panic!("{e}"));
        let mut bufs = vec![Buffer::from_slice(&input())];
        let range = NdRange::new(&[N as u32]);
        amdgpu::sim::run(&c, kernel, &range, &[Arg::Buffer(0)], &mut bufs).unwrap();
        assert_eq!(bufs[0].to_vec::<i32>().unwrap(), want, "AMDGPU simulator");
    }
}

/// Issue 12, item 2: an 8,000-deep chain built with the builders, through everything.
#[test]
fn deep_chain_8000_built_through_every_stage() {
    on_test_stack(|| check_everything(deep_kernel(8000), 8000));
}

/// Issue 12, item 2: a 100,000-deep chain built with the builders, through everything but
/// the slow passes and -O (see [`SLOW_AT_100K`]).
#[test]
fn deep_chain_100000_built_through_every_stage() {
    on_test_stack(|| check_everything(deep_kernel(100_000), 100_000));
}

/// A chain of `n` steps as flat text, `x[g] + 1 - 2 + 3 ...` (`+` and `-` only, one
/// precedence level), which is one nesting level for the parser however long.
fn flat_text(n: usize) -> String {
    let mut s = String::from("kernel deep(x: ptr<global, i32>) {\n  let g: u32 = global_id(0);\n");
    s.push_str("  x[g] = x[g]");
    for i in 0..n {
        let c = (i % 7) + 1;
        s.push_str(if i % 2 == 0 { " + " } else { " - " });
        s.push_str(&c.to_string());
    }
    s.push_str(";\n}\n");
    s
}

fn flat_expected(v: i32, n: usize) -> i32 {
    (0..n).fold(v, |v, i| {
        let c = (i % 7) as i32 + 1;
        if i % 2 == 0 {
            v.wrapping_add(c)
        } else {
            v.wrapping_sub(c)
        }
    })
}

/// `let v0 = x[g]; let v1 = v0 op c; ...; x[g] = vn;`: `-O` inlines it into one deep chain.
fn lets_text(n: usize) -> String {
    let mut s = String::from(
        "kernel deep(x: ptr<global, i32>) {\n  let g: u32 = global_id(0);\n  let v0: i32 = x[g];\n",
    );
    for i in 0..n {
        let (op, c) = step(i);
        s.push_str(&format!("  let v{}: i32 = v{i} {} {c};\n", i + 1, op.symbol()));
    }
    s.push_str(&format!("  x[g] = v{n};\n}}\n"));
    s
}

/// Issue 12, items 2 and 4: 8,000- and 100,000-term flat sums as text parse (one nesting
/// level), and run through every stage like the built chains.
#[test]
fn deep_chain_as_flat_text_through_every_stage() {
    on_test_stack(|| {
        for n in [8000, 100_000] {
            let m = parse_module(&flat_text(n)).unwrap_or_else(|d| panic!("{d}"));
            let want: Vec<i32> = input().into_iter().map(|v| flat_expected(v, n)).collect();
            assert_eq!(interpret(&m.kernels[0]), want);
            let opt = if n <= 10_000 {
                try_optimize(&m.kernels[0]).unwrap()
            } else {
                m.kernels[0].clone()
            };
            assert_eq!(interpret(&opt), want);
            let back = parse_module(&opt.to_string()).unwrap_or_else(|d| panic!("{d}"));
            assert_eq!(interpret(&back.kernels[0]), want);
        }
    });
}

/// Issue 12, items 1 and 2: 8,000 chained lets as text, which `-O` turns into deep chains,
/// through every stage like the built chains.
#[test]
fn deep_chain_8000_as_lets_text_through_every_stage() {
    on_test_stack(|| {
        let m = parse_module(&lets_text(8000)).unwrap_or_else(|d| panic!("{d}"));
        check_everything(m.kernels[0].clone(), 8000);
    });
}

// ---- through the binary ------------------------------------------------------------------

fn kiln() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-deep-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `kiln run` output for `file` on the usual input.
fn run_file(file: &Path) -> String {
    let dir = file.parent().unwrap();
    let npy = dir.join("x.npy");
    write_npy_i32(&npy, &input());
    run_ok(
        kiln()
            .arg("run")
            .arg(file)
            .arg("--global")
            .arg(N.to_string())
            .arg("--arg")
            .arg(format!("x=@{}", npy.display())),
    )
}

/// A 1-D int32 `.npy` file.
fn write_npy_i32(path: &Path, values: &[i32]) {
    let mut header =
        format!("{{'descr': '<i4', 'fortran_order': False, 'shape': ({},), }}", values.len());
    while !(10 + header.len() + 1).is_multiple_of(64) {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    values.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
    std::fs::write(path, out).unwrap();
}

/// Issue 12, item 1: `kiln opt -O` on 8,000 chained lets printed a chain nested deeper than
/// the parser accepts. Its output now parses back, runs to the same result, and emits for
/// every target (item 2: the SPIR-V emitter overflowed the stack on it).
#[test]
fn opt_output_of_8000_let_chain_parses_back_and_emits() {
    let dir = scratch("lets8000");
    let src = dir.join("lets.kir");
    std::fs::write(&src, lets_text(8000)).unwrap();
    let opt = dir.join("opt.kir");
    run_ok(kiln().arg("opt").arg("-O").arg(&src).arg("-o").arg(&opt));
    run_ok(kiln().arg("check").arg(&opt));
    let want = run_file(&src);
    let expect: Vec<String> = input().iter().map(|&v| expected(v, 8000).to_string()).collect();
    assert!(want.contains(&expect.join(", ")), "{want}");
    assert_eq!(run_file(&opt), want);
    for file in [&src, &opt] {
        for target in ["spirv-vk", "spirv-cl", "ptx", "amdgpu"] {
            let out = dir.join(format!("out.{target}"));
            run_ok(kiln().arg("emit").arg("--target").arg(target).arg(file).arg("-o").arg(&out));
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 12, items 2, 3 and 4: a 100,000-term flat sum and 100,000 chained lets through the
/// binary (run, `opt --passes let-opt`, which was quadratic, and emit); the optimized text
/// parses back and computes the same.
#[test]
fn hundred_thousand_deep_inputs_through_the_binary() {
    let dir = scratch("deep100k");
    let flat = dir.join("flat.kir");
    std::fs::write(&flat, flat_text(100_000)).unwrap();
    let lets = dir.join("lets.kir");
    std::fs::write(&lets, lets_text(100_000)).unwrap();
    for (file, want) in [(&flat, flat_expected as fn(i32, usize) -> i32), (&lets, expected)] {
        let expect: Vec<String> = input().iter().map(|&v| want(v, 100_000).to_string()).collect();
        assert!(run_file(file).contains(&expect.join(", ")));
        let opt = dir.join("opt.kir");
        run_ok(kiln().arg("opt").arg("--passes").arg("let-opt").arg(file).arg("-o").arg(&opt));
        assert!(run_file(&opt).contains(&expect.join(", ")));
        for target in ["spirv-vk", "ptx"] {
            let out = dir.join(format!("out.{target}"));
            run_ok(kiln().arg("emit").arg("--target").arg(target).arg(&opt).arg("-o").arg(&out));
        }
    }
    let out = dir.join("out.s");
    run_ok(kiln().arg("emit").arg("--target").arg("amdgpu").arg(&flat).arg("-o").arg(&out));
    // 100,000 parentheses: a located error, exit 1, no crash.
    let parens = dir.join("parens.kir");
    let text = format!(
        "kernel k(x: ptr<global, i32>) {{\n  x[0] = {}1{};\n}}\n",
        "(".repeat(100_000),
        ")".repeat(100_000)
    );
    std::fs::write(&parens, text).unwrap();
    let out = kiln().arg("check").arg(&parens).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("parens.kir:2:") && err.contains("too deep"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
