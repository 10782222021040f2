//! Autotuning (kiln::tune, `kiln tune`): a search on the cpu device stores its winner, and
//! the next tuner (another process, or a fresh cache handle on the same directory) takes it
//! from the cache without timing; `KILN_TUNE=0` and the interpreter use the heuristic.

use std::process::Command;

use kiln::generator::{ConvProblem, GemmConfig, GemmProblem};
use kiln::ir::Scalar;
use kiln::runtime::cache::PersistentCache;
use kiln::runtime::device::registry::{open, OpenOptions};
use kiln::tune::{bucket, heuristic, tune, How, Problem, TuneOptions};
use kiln::Config;

fn dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("kiln-tune-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn opts(cache: &std::path::Path, search: bool) -> TuneOptions {
    TuneOptions { search, cache: Some(PersistentCache::new(cache)), max_candidates: 3, repeats: 1 }
}

#[test]
fn second_tune_is_a_cache_hit() {
    let d = dir("hit");
    let cpu = open("cpu", &OpenOptions::default()).unwrap();
    let p = GemmProblem { m: 20, n: 24, k: 9, trans_a: false, trans_b: true, ty: Scalar::F32 };
    let first = tune(&Problem::gemm(&p), &*cpu, &opts(&d, true)).unwrap();
    let How::Searched { timings, errors } = &first.how else { panic!("{:?}", first.how) };
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(timings.len(), 3);
    let fastest = timings.iter().min_by(|a, b| a.1.total_cmp(&b.1)).unwrap().0;
    assert_eq!(first.config, fastest);
    assert_eq!(first.key, "gemm NT f32 m32 n32 k16");
    // Another problem of the same bucket, through a new cache handle (as the next process
    // would): no timing, the stored winner.
    let q = GemmProblem { m: 32, n: 17, ..p };
    let second = tune(&Problem::gemm(&q), &*cpu, &opts(&d, true)).unwrap();
    assert_eq!((second.how.clone(), second.config), (How::Cached, first.config));
    // With the search off the stored winner is still used.
    let third = tune(&Problem::gemm(&q), &*cpu, &opts(&d, false)).unwrap();
    assert_eq!(third.how, How::Cached);
    // The winner generates a correct kernel for the other shape too (edges masked).
    let g = q.generate(&second.config).unwrap();
    assert!(g.kernel.name().starts_with("gemm"));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn search_off_or_interpreter_use_the_heuristic_and_store_nothing() {
    let d = dir("off");
    let cfg = Config::from_lookup(|n| (n == "KILN_TUNE").then(|| "0".into())).unwrap();
    assert!(cfg.tune_disabled);
    assert!(!TuneOptions::from_config(&cfg).search);
    let cpu = open("cpu", &OpenOptions::default()).unwrap();
    let p = GemmProblem { m: 100, n: 64, k: 64, trans_a: false, trans_b: false, ty: Scalar::F32 };
    let t = tune(&Problem::gemm(&p), &*cpu, &opts(&d, false)).unwrap();
    assert!(matches!(&t.how, How::Heuristic(w) if w.contains("KILN_TUNE=0")), "{:?}", t.how);
    assert_eq!(t.config, heuristic([100, 64, 64]));
    let interp = open("interp", &OpenOptions::default()).unwrap();
    let conv = ConvProblem::new(1, 4, 6, 6, 8, 3, 3).with_padding(1, 1);
    let t = tune(&Problem::conv(&conv).unwrap(), &*interp, &opts(&d, true)).unwrap();
    assert!(matches!(&t.how, How::Heuristic(w) if w.contains("interpreter")), "{:?}", t.how);
    // Nothing was stored: the cpu search now runs.
    let t = tune(&Problem::gemm(&p), &*cpu, &opts(&d, true)).unwrap();
    assert!(matches!(t.how, How::Searched { .. }));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn heuristic_fits_and_configs_print_and_parse() {
    for mnk in [[1, 1, 1], [3, 17, 1000], [4096, 4096, 64], [1000, 3, 17]] {
        let c = heuristic(mnk);
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
    let d = dir("cli");
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
    assert!(first.contains("fastest of 2 on") && first.contains("(stored)"), "{first}");
    let second = run(&[]);
    assert!(second.contains("stored winner for `gemm NN f32 m16 n16 k16`"), "{second}");
    let winner = first.lines().last().unwrap().split(':').next().unwrap();
    assert!(second.starts_with(winner), "{first}\n{second}");
    let _ = std::fs::remove_dir_all(&d);
}

/// A device that miscompiles one blocking: it runs kernels on the interpreter but, for
/// work-groups of 4 x 4 (the first candidate's), corrupts the first element of C, as a
/// backend bug in that blocking's code would.
struct Miscompiles;

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
        if r.local == Some([4, 4, 1]) {
            b[2].as_bytes_mut()[1] ^= 0x40;
        }
        Ok(())
    }
}

fn miscompiling_device() -> std::sync::Arc<dyn kiln::runtime::Device> {
    std::sync::Arc::new(kiln::runtime::IrDevice(Miscompiles))
}

/// Issue 29: the tuner stored the fastest candidate without looking at its output, so a fast
/// miscompiled blocking would be cached and used. A candidate whose output differs from the
/// interpreter's is dropped, reported, and never stored.
#[test]
fn a_miscompiled_candidate_cannot_win() {
    let d = dir("wrong");
    let dev = miscompiling_device();
    let p = GemmProblem { m: 20, n: 24, k: 9, trans_a: false, trans_b: false, ty: Scalar::F32 };
    let first = GemmConfig::candidates(20, 24, 9)[0];
    assert_eq!((first.wg_m, first.wg_n), (4, 4), "the candidate the device miscompiles");
    // The miscompiled candidate alone: no winner, and the error says why.
    let one = TuneOptions { max_candidates: 1, ..opts(&d, true) };
    match tune(&Problem::gemm(&p), &*dev, &one) {
        Ok(t) => panic!("{} won ({:?})", t.config, t.how),
        Err(e) => assert!(e.contains("no candidate ran") && e.contains("wrong output"), "{e}"),
    }
    // Nothing was stored for the bucket.
    let stored = tune(&Problem::gemm(&p), &*dev, &opts(&d, false)).unwrap();
    assert!(matches!(stored.how, How::Heuristic(_)), "{:?}", stored.how);
    // With another candidate, that one wins and the miscompiled one is reported.
    let two = TuneOptions { max_candidates: 2, ..opts(&d, true) };
    let t = tune(&Problem::gemm(&p), &*dev, &two).unwrap();
    let How::Searched { timings, errors } = &t.how else { panic!("{:?}", t.how) };
    assert_eq!(timings.len(), 1, "{timings:?}");
    assert_ne!(t.config, first);
    assert!(
        errors.iter().any(|(c, e)| *c == first && e.contains("wrong output") && e.contains("C[0]")),
        "{errors:?}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// Issue 29, U4: `tune` of a GEMM with a zero size offered a heuristic blocking for
/// `gemm NN f32 m1 n1 k1` (on the interpreter, or with the search off) or built every
/// candidate before failing. It is refused first, in the generator's words.
#[test]
fn impossible_problems_are_refused_before_anything_else() {
    let d = dir("bad");
    let interp = open("interp", &OpenOptions::default()).unwrap();
    let cpu = open("cpu", &OpenOptions::default()).unwrap();
    let zero = GemmProblem { m: 0, n: 1, k: 1, trans_a: false, trans_b: false, ty: Scalar::F32 };
    let huge = GemmProblem { m: 1 << 32, ..zero };
    for (p, why) in [(zero, "must be positive: M = 0"), (huge, "at most 1073741823")] {
        for dev in [&interp, &cpu] {
            let e = tune(&Problem::gemm(&p), &**dev, &opts(&d, true)).unwrap_err();
            assert!(e.contains(why) && !e.contains("m1 "), "{e}");
        }
    }
    let _ = std::fs::remove_dir_all(&d);
}
