//! Shared helpers: run a generated kernel on the interpreter, naive references, and the
//! checks every generated kernel gets (print/parse round trip, PTX and SPIR-V emission and,
//! where the validators are configured, validation).

#![allow(dead_code)]

pub mod tc;

use std::io::Write;
use std::process::{Command, Stdio};

use kiln_gen::Generated;
use kiln_ir::interp::{run, run_with, RunOptions};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::testing::tool;
use kiln_ir::{parse_module, Kernel, Module, Scalar};

/// A small deterministic generator (xorshift), so cases are reproducible from a seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform in lo..=hi.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo + 1) as u64) as i64
    }
    /// Small integers (exact in f16 and in f32 sums of a few thousand terms).
    pub fn ints(&mut self, n: usize) -> Vec<f64> {
        (0..n).map(|_| self.range(-3, 3) as f64).collect()
    }
    /// Reals in [-1, 1), representable in `ty`.
    pub fn reals(&mut self, n: usize, ty: Scalar) -> Vec<f64> {
        (0..n)
            .map(|_| {
                let v = (self.next() % 2000) as f64 / 1000.0 - 1.0;
                kiln_ir::expr::round_float(ty, v)
            })
            .collect()
    }
}

pub fn buffer(ty: Scalar, v: &[f64]) -> Buffer {
    match ty {
        Scalar::F32 => Buffer::from_slice(&v.iter().map(|&x| x as f32).collect::<Vec<_>>()),
        Scalar::F16 => {
            Buffer::from_slice(&v.iter().map(|&x| half::f16::from_f64(x)).collect::<Vec<_>>())
        }
        t => panic!("type {t}"),
    }
}

pub fn values(b: &Buffer) -> Vec<f64> {
    match b.elem() {
        Scalar::F32 => b.to_vec::<f32>().unwrap().into_iter().map(f64::from).collect(),
        Scalar::F16 => b.to_vec::<half::f16>().unwrap().into_iter().map(|h| h.to_f64()).collect(),
        t => panic!("type {t}"),
    }
}

/// Runs `g` with buffers `a`, `b`, `c` (C updated in place) and scalars alpha, beta; also
/// in the interpreter's reverse schedule, which must give the same bits (a missing barrier
/// around the local-memory tiles would show as a difference). A split-K kernel runs its
/// partial products into a workspace and then its reduction.
pub fn run_generated(
    g: &Generated,
    ty: Scalar,
    a: &[f64],
    b: &[f64],
    c: &mut Vec<f64>,
    alpha: f32,
    beta: f32,
) {
    let fresh = || {
        let mut v = vec![buffer(ty, a), buffer(ty, b), buffer(ty, c)];
        if let Some(s) = &g.split {
            v.push(Buffer::zeroed(Scalar::F32, s.workspace_elems));
        }
        v
    };
    let bufs = launch(g, fresh(), alpha, beta, &mut |k, r, args, bufs| {
        run(k, r, args, bufs).map_err(|e| e.to_string())
    });
    let opts = RunOptions { reverse_order: true, ..RunOptions::default() };
    let rev = launch(g, fresh(), alpha, beta, &mut |k, r, args, bufs| {
        run_with(k, r, args, bufs, &opts).map_err(|e| e.to_string())
    });
    assert_eq!(rev[2].as_bytes(), bufs[2].as_bytes(), "schedule-dependent result:\n{}", g.kernel);
    // The AMDGPU backend's listing, run on its wave simulator, gives the same bits. It
    // compiles every generated kernel (none was refused when this was written): a refusal
    // fails, rather than leaving the kernel unchecked there.
    let sim = launch(g, fresh(), alpha, beta, &mut |k, r, args, bufs| {
        let compiled = kiln_backends::amdgpu::compile(k)
            .unwrap_or_else(|e| panic!("amdgpu refuses `{}`: {e}\n{k}", k.name()));
        kiln_backends::amdgpu::sim::run(&compiled, k, r, args, bufs)
            .map_err(|e| format!("amdgpu sim: {e}"))
    });
    assert_eq!(sim[2].as_bytes(), bufs[2].as_bytes(), "amdgpu sim differs:\n{}", g.kernel);
    *c = values(&bufs[2]);
}

/// A runner of one kernel launch.
type Runner<'a> = dyn FnMut(&Kernel, &NdRange, &[Arg], &mut [Buffer]) -> Result<(), String> + 'a;

/// Launches `g` on `bufs` (A, B, C and, with split-K, the workspace) with `runner`.
fn launch(
    g: &Generated,
    mut bufs: Vec<Buffer>,
    alpha: f32,
    beta: f32,
    runner: &mut Runner,
) -> Vec<Buffer> {
    let (sa, sb) = (Arg::scalar(alpha), Arg::scalar(beta));
    let fail = |e: String, k: &Kernel| panic!("{e}\n{k}");
    match &g.split {
        None => {
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), sa, sb];
            runner(&g.kernel, &g.range(), &args, &mut bufs).unwrap_or_else(|e| fail(e, &g.kernel));
        }
        Some(s) => {
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(3)];
            runner(&g.kernel, &g.range(), &args, &mut bufs).unwrap_or_else(|e| fail(e, &g.kernel));
            let args = [Arg::Buffer(3), Arg::Buffer(2), sa, sb];
            runner(&s.reduce, &s.range(), &args, &mut bufs).unwrap_or_else(|e| fail(e, &s.reduce));
        }
    }
    bufs
}

/// Compares with a tolerance relative to the magnitude of the summed terms.
pub fn compare(what: &str, got: &[f64], want: &[f64], scale: &[f64], ty: Scalar) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let eps = match ty {
        Scalar::F16 => 1.0 / 1024.0,
        _ => 1.0 / (1u64 << 22) as f64,
    };
    for (i, ((g, w), s)) in got.iter().zip(want).zip(scale).enumerate() {
        let tol = eps * (s + w.abs() + 1e-30) * 4.0;
        assert!((g - w).abs() <= tol, "{what}: element {i}: got {g}, want {w} (tolerance {tol})");
    }
}

/// Every generated kernel: verifies, prints and parses back equal, and lowers to PTX (and,
/// with `KILN_PTXAS`, assembles for sm_80) and SPIR-V in both flavours (f16 kernels are
/// refused by the OpenCL flavour, as documented; with `KILN_SPIRV_VAL`, validated).
pub fn check_generated(g: &Generated) {
    check_kernel(&g.kernel);
    if let Some(s) = &g.split {
        check_kernel(&s.reduce);
    }
}

fn check_kernel(k: &Kernel) {
    kiln_ir::verify_kernel(k).unwrap_or_else(|e| panic!("{e:?}\n{k}"));
    let text = Module::new(vec![k.clone()]).to_string();
    let back = parse_module(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
    assert!(back.kernels.len() == 1 && back.kernels[0].is_equal(k), "round trip differs:\n{text}");
    let ptx = kiln_backends::ptx::emit_kernel(k, &kiln_backends::ptx::Options::sm(80))
        .unwrap_or_else(|e| panic!("ptx: {e}\n{k}"));
    if let Some(ptxas) = tool("KILN_PTXAS") {
        let dir = std::env::temp_dir().join(format!("kiln-gen-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // One file per call: tests running in parallel threads generate kernels of the
        // same name, and a shared file was rewritten under ptxas.
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let f = dir.join(format!("{}_{n}.ptx", k.name()));
        std::fs::write(&f, &ptx).unwrap();
        let out = Command::new(ptxas)
            .args(["-arch=sm_80"])
            .arg(&f)
            .arg("-o")
            .arg(dir.join(format!("{}_{n}.cubin", k.name())))
            .output()
            .expect("run ptxas");
        assert!(out.status.success(), "ptxas: {}\n{ptx}", String::from_utf8_lossy(&out.stderr));
    }
    // AMDGPU (gfx900): compiled (it refuses no generated kernel: a refusal fails) and
    // assembled by llvm-mc.
    let c = kiln_backends::amdgpu::compile(k)
        .unwrap_or_else(|e| panic!("amdgpu refuses `{}`: {e}\n{k}", k.name()));
    if let Some(mc) = tool("KILN_LLVM_MC") {
        let mut child = Command::new(mc)
            .args(["-triple=amdgcn-amd-amdhsa", "-mcpu=gfx900", "-filetype=obj", "-o", "/dev/null"])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run llvm-mc");
        child.stdin.take().unwrap().write_all(c.asm.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "llvm-mc: {}", String::from_utf8_lossy(&out.stderr));
    }
    let uses_f16 = text.contains("f16");
    for flavour in [kiln_backends::spirv::Flavour::Vulkan, kiln_backends::spirv::Flavour::OpenCl] {
        let m = match kiln_backends::spirv::emit(k, flavour) {
            Ok(m) => m,
            Err(e) if uses_f16 && flavour == kiln_backends::spirv::Flavour::OpenCl => {
                assert!(e.message.contains("f16 is not supported"), "{e}");
                continue;
            }
            Err(e) => panic!("spirv {flavour:?}: {e}\n{k}"),
        };
        if let Some(val) = tool("KILN_SPIRV_VAL") {
            let mut child = Command::new(val)
                .args(["--target-env", flavour.target_env(), "-"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("run spirv-val");
            child.stdin.take().unwrap().write_all(&m.to_bytes()).unwrap();
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "spirv-val {flavour:?}: {}{}\n{k}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
