//! Autotuning (kiln::tune, `kiln tune`): a search on the cpu device stores its winner, and
//! the next tuner (another process, or a fresh cache handle on the same directory) takes it
//! from the cache without timing; `KILN_TUNE=0` and the interpreter use the heuristic.

mod common;

use common::{fresh_dir, tune_opts};

use std::process::Command;

use kiln::generator::tuner::{self, Target};
use kiln::generator::{ConvProblem, GemmConfig, GemmProblem};
use kiln::ir::Scalar;
use kiln::runtime::device::registry::{open, OpenOptions};
use kiln::tune::{bucket, heuristic, target, tune, How, Problem, TuneOptions};
use kiln::Config;

#[test]
fn second_tune_is_a_cache_hit() {
    let d = fresh_dir("tune-hit");
    let cpu = open("cpu", &OpenOptions::default()).unwrap();
    let p = GemmProblem { m: 20, n: 24, k: 9, trans_a: false, trans_b: true, ty: Scalar::F32 };
    let first = tune(&Problem::gemm(&p), &*cpu, &tune_opts(&d, true)).unwrap();
    let How::Searched { timings, errors } = &first.how else { panic!("{:?}", first.how) };
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(timings.len(), 3);
    // The fastest, or the default (timed first) when within tuner::DEFAULT_MARGIN of it.
    let found = tuner::Searched { timings: timings.clone(), errors: Vec::new() };
    let default = heuristic([20, 24, 9], &target(&*cpu));
    assert_eq!(timings[0].0, default);
    assert_eq!(Some(first.config), tuner::winner(&found, &default));
    assert_eq!(first.key, "gemm NT f32 m32 n32 k16");
    // Another problem of the same bucket, through a new cache handle (as the next process
    // would): no timing, the stored winner.
    let q = GemmProblem { m: 32, n: 17, ..p };
    let second = tune(&Problem::gemm(&q), &*cpu, &tune_opts(&d, true)).unwrap();
    assert_eq!((second.how.clone(), second.config), (How::Cached, first.config));
    // With the search off the stored winner is still used.
    let third = tune(&Problem::gemm(&q), &*cpu, &tune_opts(&d, false)).unwrap();
    assert_eq!(third.how, How::Cached);
    // The winner generates a correct kernel for the other shape too (edges masked).
    let g = q.generate(&second.config).unwrap();
    assert!(g.kernel.name().starts_with("gemm"));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn search_off_or_interpreter_use_the_heuristic_and_store_nothing() {
    let d = fresh_dir("tune-off");
    let cfg = Config::from_lookup(|n| (n == "KILN_TUNE").then(|| "0".into())).unwrap();
    assert!(cfg.tune_disabled);
    assert!(!TuneOptions::from_config(&cfg).search);
    let cpu = open("cpu", &OpenOptions::default()).unwrap();
    let p = GemmProblem { m: 100, n: 64, k: 64, trans_a: false, trans_b: false, ty: Scalar::F32 };
    let t = tune(&Problem::gemm(&p), &*cpu, &tune_opts(&d, false)).unwrap();
    assert!(matches!(&t.how, How::Heuristic(w) if w.contains("KILN_TUNE=0")), "{:?}", t.how);
    assert_eq!(t.config, heuristic([100, 64, 64], &target(&*cpu)));
    let interp = open("interp", &OpenOptions::default()).unwrap();
    let conv = ConvProblem::new(1, 4, 6, 6, 8, 3, 3).with_padding(1, 1);
    let t = tune(&Problem::conv(&conv).unwrap(), &*interp, &tune_opts(&d, true)).unwrap();
    assert!(matches!(&t.how, How::Heuristic(w) if w.contains("interpreter")), "{:?}", t.how);
    // Nothing was stored: the cpu search now runs.
    let t = tune(&Problem::gemm(&p), &*cpu, &tune_opts(&d, true)).unwrap();
    assert!(matches!(t.how, How::Searched { .. }));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn heuristic_fits_and_configs_print_and_parse() {
    for mnk in [[1, 1, 1], [3, 17, 1000], [4096, 4096, 64], [1000, 3, 17]] {
        let c = heuristic(mnk, &Target::h100());
        c.validate().unwrap();
        let back: GemmConfig = c.to_string().parse().unwrap();
        assert_eq!(back, c);
    }
    assert!("wg=8x8 tile=2x2 k=8 slm=2 unroll=0"
        .parse::<GemmConfig>()
        .unwrap_err()
        .contains("vec"));
    assert!("wg=8x8 tile=2x2 k=8 slm=5 unroll=0 vec=1".parse::<GemmConfig>().is_err());
    assert_eq!((bucket(0), bucket(1), bucket(17), bucket(64)), (1, 1, 32, 64));
}

#[test]
fn cli_second_process_takes_the_stored_winner() {
    let d = fresh_dir("tune-cli");
    let run = |extra: &[(&str, &str)]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_kiln"));
        c.args(["tune", "--device", "cpu", "--max-candidates", "2", "--repeat", "1"])
            .args(["gemm", "16", "16", "16"])
            .env("KILN_CACHE_DIR", &d);
        for (k, v) in extra {
            c.env(k, v);
        }
        let out = c.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let first = run(&[]);
    assert!(first.contains("winner of 2 timed on") && first.contains("(stored)"), "{first}");
    let second = run(&[]);
    assert!(second.contains("stored winner for `gemm NN f32 m16 n16 k16`"), "{second}");
    let winner = first.lines().last().unwrap().split(':').next().unwrap();
    assert!(second.starts_with(winner), "{first}\n{second}");
    let _ = std::fs::remove_dir_all(&d);
}

/// A device that miscompiles one blocking: it runs kernels on the interpreter but, for
/// launches of the given global and local sizes (the first candidate's), corrupts the first
/// element of C, as a backend bug in that blocking's code would.
struct Miscompiles([u32; 3], [u32; 3]);

impl kiln::runtime::IrExecutor for Miscompiles {
    fn name(&self) -> String {
        "miscompiles-4x4".into()
    }
    fn kind(&self) -> kiln::runtime::DeviceKind {
        kiln::runtime::DeviceKind::Cuda
    }
    fn version(&self) -> String {
        "test".into()
    }
    fn run(
        &self,
        k: &kiln::ir::Kernel,
        r: &kiln::ir::launch::NdRange,
        a: &[kiln::ir::launch::Arg],
        b: &mut [kiln::ir::launch::Buffer],
    ) -> Result<(), String> {
        kiln::ir::interp::run(k, r, a, b).map_err(|e| e.to_string())?;
        if (r.global, r.local) == (self.1, Some(self.0)) {
            b[2].as_bytes_mut()[1] ^= 0x40;
        }
        Ok(())
    }
}

fn miscompiling_device(
    g: &kiln::generator::Generated,
) -> std::sync::Arc<dyn kiln::runtime::Device> {
    let r = g.range();
    std::sync::Arc::new(kiln::runtime::IrDevice(Miscompiles(r.local.unwrap(), r.global)))
}

/// Issue 29: the tuner stored the fastest candidate without looking at its output, so a fast
/// miscompiled blocking would be cached and used. A candidate whose output differs from the
/// interpreter's is dropped when it would win, reported, and never stored.
#[test]
fn a_miscompiled_candidate_cannot_win() {
    let d = fresh_dir("tune-wrong");
    let p = GemmProblem { m: 20, n: 24, k: 9, trans_a: false, trans_b: false, ty: Scalar::F32 };
    // The search's first candidate on this device (a Cuda-kind device: the H100 model).
    let first = tuner::search([20, 24, 9], &Target::h100(), 1, &mut |_| Ok(1.0)).timings[0].0;
    let dev = miscompiling_device(&p.generate(&first).unwrap());
    // The miscompiled candidate alone: no winner, and the error says why.
    let one = TuneOptions { max_candidates: 1, ..tune_opts(&d, true) };
    match tune(&Problem::gemm(&p), &*dev, &one) {
        Ok(t) => panic!("{} won ({:?})", t.config, t.how),
        Err(e) => assert!(e.contains("no candidate ran") && e.contains("wrong output"), "{e}"),
    }
    // Nothing was stored for the bucket.
    let stored = tune(&Problem::gemm(&p), &*dev, &tune_opts(&d, false)).unwrap();
    assert!(matches!(stored.how, How::Heuristic(_)), "{:?}", stored.how);
    // With more candidates, another one wins (those launched like the first are
    // miscompiled too) and the miscompiled one is reported.
    let more = TuneOptions { max_candidates: 8, ..tune_opts(&d, true) };
    let t = tune(&Problem::gemm(&p), &*dev, &more).unwrap_or_else(|e| panic!("{e}"));
    let How::Searched { timings, errors } = &t.how else { panic!("{:?}", t.how) };
    assert_ne!(t.config, first);
    // Candidates are checked fastest first until one passes: the miscompiled one was either
    // checked (faster than the winner), dropped from the timings and reported, or it was
    // slower than the winner and never could win.
    let winner = timings.iter().find(|(c, _)| *c == t.config).expect("the winner was timed").1;
    let reported =
        errors.iter().any(|(c, e)| *c == first && e.contains("wrong output") && e.contains("C[0]"));
    let slower = timings.iter().any(|(c, s)| *c == first && *s >= winner);
    assert!(reported != slower, "{timings:?} {errors:?}");
    let _ = std::fs::remove_dir_all(&d);
}

/// Issue 29, U4: `tune` of a GEMM with a zero size offered a heuristic blocking for
/// `gemm NN f32 m1 n1 k1` (on the interpreter, or with the search off) or built every
/// candidate before failing. It is refused first, in the generator's words.
#[test]
fn impossible_problems_are_refused_before_anything_else() {
    let d = fresh_dir("tune-bad");
    let interp = open("interp", &OpenOptions::default()).unwrap();
    let cpu = open("cpu", &OpenOptions::default()).unwrap();
    let zero = GemmProblem { m: 0, n: 1, k: 1, trans_a: false, trans_b: false, ty: Scalar::F32 };
    let huge = GemmProblem { m: 1 << 32, ..zero };
    for (p, why) in [(zero, "must be positive: M = 0"), (huge, "at most 1073741823")] {
        for dev in [&interp, &cpu] {
            let e = tune(&Problem::gemm(&p), &**dev, &tune_opts(&d, true)).unwrap_err();
            assert!(e.contains(why) && !e.contains("m1 "), "{e}");
        }
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// Issue 26: `kiln gen` without blocking flags takes the winner `kiln tune` stored for the
/// device, and says so; with nothing stored, the model's first choice for the device.
#[test]
fn gen_without_blocking_flags_uses_the_stored_winner_else_the_model() {
    let d = fresh_dir("tune-gen");
    let kiln = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args(args)
            .env("KILN_CACHE_DIR", &d)
            .output()
            .unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        (text(&out.stdout), text(&out.stderr))
    };
    let cpu = open("cpu", &OpenOptions::default()).unwrap();
    let model = heuristic([20, 24, 9], &target(&*cpu));
    let (kir, err) = kiln(&["gen", "gemm", "20", "24", "9"]);
    assert!(err.contains(&format!("blocking {model}: the model's first choice for")), "{err}");
    assert!(kir.contains(&format!("// Blocking: {model};")), "{kir}");
    // Blocking flags are used as given, and nothing is said about them.
    let (kir, err) = kiln(&["gen", "gemm", "20", "24", "9", "--tile", "1x1"]);
    assert!(
        kir.contains("// Blocking: wg=8x8 tile=1x1 k=8 slm=2 unroll=0 vec=1;") && err.is_empty()
    );
    let (tuned, _) = kiln(
        &["tune", "--device", "cpu", "--max-candidates", "2", "--repeat", "1"]
            .iter()
            .chain(&["gemm", "20", "24", "9"])
            .copied()
            .collect::<Vec<_>>(),
    );
    let winner = tuned.lines().last().unwrap().split(':').next().unwrap().to_string();
    let (kir, err) = kiln(&["gen", "gemm", "30", "17", "16"]);
    assert!(
        err.contains(&format!(
            "blocking {winner}: the winner stored for `gemm NN f32 m32 n32 k16` on"
        )),
        "{err}"
    );
    assert!(kir.contains(&format!("// Blocking: {winner};")), "{kir}");
    let _ = std::fs::remove_dir_all(&d);
}

/// Issue 26: the exhaustive-subset mode times every blocking of the documented subset.
#[test]
fn exhaustive_mode_times_the_whole_subset() {
    let d = fresh_dir("tune-exhaustive");
    let cpu = open("cpu", &OpenOptions::default()).unwrap();
    let p = GemmProblem { m: 8, n: 8, k: 8, trans_a: true, trans_b: false, ty: Scalar::F32 };
    let o = TuneOptions { exhaustive: true, ..tune_opts(&d, true) };
    let t = tune(&Problem::gemm(&p), &*cpu, &o).unwrap();
    let How::Searched { timings, errors } = &t.how else { panic!("{:?}", t.how) };
    assert!(errors.is_empty(), "{errors:?}");
    let subset = tuner::subset([8, 8, 8]);
    assert!(subset.len() >= 4);
    assert_eq!(timings.iter().map(|(c, _)| *c).collect::<Vec<_>>(), subset);
    let fastest = timings.iter().min_by(|a, b| a.1.total_cmp(&b.1)).unwrap().0;
    assert_eq!(t.config, fastest);
    let _ = std::fs::remove_dir_all(&d);
}

/// C = alpha * op(A) op(B) + beta * C in f64 (exact for the small integers used here).
fn reference(p: &GemmProblem, a: &[f32], b: &[f32], c: &[f32], alpha: f32, beta: f32) -> Vec<f32> {
    let (m, n, k) = (p.m as usize, p.n as usize, p.k as usize);
    let at = |i: usize, l: usize| if p.trans_a { a[l * m + i] } else { a[i * k + l] } as f64;
    let bt = |l: usize, j: usize| if p.trans_b { b[j * k + l] } else { b[l * n + j] } as f64;
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let s: f64 = (0..k).map(|l| at(i, l) * bt(l, j)).sum();
            let old = if beta == 0.0 { 0.0 } else { beta as f64 * c[i * n + j] as f64 };
            out[i * n + j] = (alpha as f64 * s + old) as f32;
        }
    }
    out
}

/// Runs a generated GEMM (split-K: both kernels, through a workspace) on `dev`.
fn run_on(
    dev: &dyn kiln::runtime::Device,
    g: &kiln::generator::Generated,
    bufs: [Vec<f32>; 3],
    alpha: f32,
    beta: f32,
) -> Vec<f32> {
    use kiln::ir::launch::{Arg, Buffer};
    let mut kernels = vec![g.kernel.clone()];
    kernels.extend(g.split.iter().map(|s| s.reduce.clone()));
    let module = kiln::ir::Verified::new(kiln::ir::Module::new(kernels)).unwrap();
    let opts = kiln::backends::options::BuildOptions::parse("-O").unwrap();
    let program = dev.load(&dev.build(&module, &opts).unwrap()).unwrap();
    let mut b: Vec<Buffer> = bufs.iter().map(|v| Buffer::from_slice(v)).collect();
    let (sa, sb) = (Arg::scalar(alpha), Arg::scalar(beta));
    match &g.split {
        None => {
            let k = dev.kernel(&program, g.kernel.name()).unwrap();
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), sa, sb];
            dev.run(&k, &g.range(), &args, &mut b).unwrap();
        }
        Some(s) => {
            b.push(Buffer::zeroed(Scalar::F32, s.workspace_elems));
            let k = dev.kernel(&program, g.kernel.name()).unwrap();
            dev.run(&k, &g.range(), &[Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(3)], &mut b)
                .unwrap();
            let r = dev.kernel(&program, s.reduce.name()).unwrap();
            dev.run(&r, &s.range(), &[Arg::Buffer(3), Arg::Buffer(2), sa, sb], &mut b).unwrap();
        }
    }
    b[2].to_vec::<f32>().unwrap()
}

/// Issue 26: split-K and transposed operands (vector loads kept, transposed through local
/// memory) on random shapes, odd sizes included, on the cpu device and the interpreter,
/// against a plain Rust reference (bit-exact on small integers).
#[test]
fn split_k_and_transposed_operands_on_the_cpu_device_and_interpreter() {
    let mut devs = vec![open("cpu", &OpenOptions::default()).unwrap()];
    devs.push(open("interp", &OpenOptions::default()).unwrap());
    // Vulkan (lavapipe here) too, where it is installed.
    let vulkan = open("vulkan", &OpenOptions::default());
    devs.extend(kiln::ir::testing::require("KILN_REQUIRE_TOOLS", vulkan));
    let mut seed = 0x2600_1234_5678_9abcu64;
    let mut rnd = |hi: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % hi
    };
    let mut split = 0;
    for i in 0..8 {
        let dims = [1, 5, 17, 31, 40];
        let p = GemmProblem {
            m: dims[rnd(5) as usize],
            n: dims[rnd(5) as usize],
            k: [7, 33, 64, 150][rnd(4) as usize],
            trans_a: i % 2 == 1,
            trans_b: i % 4 >= 2,
            ty: Scalar::F32,
        };
        let cfg = GemmConfig {
            wg_m: 4,
            wg_n: [4, 8][rnd(2) as usize],
            tm: 4,
            tn: 4,
            k_tile: [4, 8][rnd(2) as usize],
            slm_depth: 1 + rnd(3) as u32,
            unroll: true,
            vec: [1, 4][rnd(2) as usize],
            split_k: [1, 2, 3, 4][rnd(4) as usize],
        };
        let g = p.generate(&cfg).unwrap();
        split += g.split.is_some() as usize;
        let mut fill = |n: usize| (0..n).map(|_| rnd(7) as f32 - 3.0).collect::<Vec<f32>>();
        let (a, b, c) = (fill(g.buffer_elems[0]), fill(g.buffer_elems[1]), fill(g.buffer_elems[2]));
        let (alpha, beta) = (2.0, 0.5);
        let want = reference(&p, &a, &b, &c, alpha, beta);
        for dev in &devs {
            let got = run_on(&**dev, &g, [a.clone(), b.clone(), c.clone()], alpha, beta);
            assert_eq!(got, want, "{} {p:?} {cfg}", dev.name());
        }
    }
    assert!(split >= 3, "only {split} of the cases split K");
    // A transposed operand with vectors loads its tiles with vector loads.
    let p = GemmProblem { m: 64, n: 64, k: 64, trans_a: false, trans_b: true, ty: Scalar::F32 };
    let cfg: GemmConfig = "wg=8x8 tile=4x4 k=8 slm=2 unroll=1 vec=4".parse().unwrap();
    let text = p.generate(&cfg).unwrap().kernel.to_string();
    assert!(text.contains("vload4(b, ") && text.contains("vload4(a, "), "{text}");
}

/// Tuning on a device with memory of its own (Vulkan; lavapipe here) times its candidates
/// on buffers kept there, and every candidate passes the check.
#[test]
fn tuning_on_vulkan_uses_device_memory() {
    let vulkan = open("vulkan", &OpenOptions::default());
    let Some(vk) = kiln::ir::testing::require("KILN_REQUIRE_TOOLS", vulkan) else {
        return;
    };
    assert!(vk.memory_space().is_some());
    let d = fresh_dir("tune-vulkan");
    let p = GemmProblem { m: 5, n: 6, k: 8, trans_a: false, trans_b: true, ty: Scalar::F32 };
    let t =
        tune(&Problem::gemm(&p), &*vk, &TuneOptions { max_candidates: 2, ..tune_opts(&d, true) })
            .unwrap();
    let How::Searched { timings, errors } = &t.how else { panic!("{:?}", t.how) };
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(timings.len(), 2);
    let _ = std::fs::remove_dir_all(&d);
}

/// Issue 26 item 3: a GEMM of row-major A and transposed B is K-major to the model (it takes
/// the target's K-major seeds; see gen/tests/tuner.rs), every other transposition is not,
/// and on the H100 target the untimed blocking of 4096^3 B^T is the K-major seed.
#[test]
fn gemm_problems_say_whether_they_are_k_major() {
    for (trans_a, trans_b) in [(false, false), (true, false), (false, true), (true, true)] {
        let p = GemmProblem { m: 64, n: 64, k: 64, trans_a, trans_b, ty: Scalar::F32 };
        assert_eq!(Problem::gemm(&p).dims().k_major, !trans_a && trans_b, "{p:?}");
        let b = p.batched(2);
        assert_eq!(Problem::batched_gemm(&b).dims().k_major, !trans_a && trans_b, "{p:?}");
    }
    let p =
        GemmProblem { m: 4096, n: 4096, k: 4096, trans_a: false, trans_b: true, ty: Scalar::F32 };
    let h100 = Target::h100();
    assert_eq!(heuristic(Problem::gemm(&p).dims(), &h100), h100.k_major_seeds[0]);
}

/// Issue 26 item 3: a GEMM of transposed A and row-major B is M/N-major to the model, every
/// other transposition is not; on the H100 target the untimed blocking of 4096^3 A^T is not
/// the large seed (measured 0.765x cuBLAS there against the first seed's 0.916x), while
/// 4096^3 with neither or both transposed takes it.
#[test]
fn gemm_problems_with_only_a_transposed_skip_the_large_seed() {
    let h100 = Target::h100();
    for (trans_a, trans_b) in [(false, false), (true, false), (false, true), (true, true)] {
        let p = GemmProblem { m: 64, n: 64, k: 64, trans_a, trans_b, ty: Scalar::F32 };
        assert_eq!(Problem::gemm(&p).dims().mn_major, trans_a && !trans_b, "{p:?}");
        let b = p.batched(2);
        assert_eq!(Problem::batched_gemm(&b).dims().mn_major, trans_a && !trans_b, "{p:?}");
        let big = GemmProblem { m: 4096, n: 4096, k: 4096, ..p };
        let first = heuristic(Problem::gemm(&big).dims(), &h100);
        let large = h100.large_seeds.contains(&first);
        // B^T alone takes the K-major seed first.
        assert_eq!(large, trans_a == trans_b, "{big:?}: {first}");
    }
}
