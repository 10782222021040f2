//! Tuning tensor-core kernels (kiln::tune_tc, `kiln tune tc-gemm|tc-conv`) where CUDA is
//! absent: a search (here with a given clock, its candidates' outputs checked on the
//! interpreter) stores its winner and the next tuner takes it from the cache without timing;
//! without CUDA or with the search off the model's first choice is used.

mod common;

use common::{fresh_dir, tune_opts};

use kiln::generator::{ConvProblem, TcConfig, TcConvProblem, TcGemmProblem};
use kiln::ir::Scalar;
use kiln::runtime::device::registry::{open, OpenOptions};
use kiln::tune_tc::{heuristic, search_with, tune_tc, TcHow, TcProblem};

#[test]
fn tc_search_stores_its_winner_and_the_next_tune_takes_it() {
    let d = fresh_dir("tune-tc-hit");
    let interp = open("interp", &OpenOptions::default()).unwrap();
    let p = TcGemmProblem { trans_b: true, ..TcGemmProblem::new(300, 200, 100, Scalar::BF16) };
    let problem = TcProblem::gemm(&p);
    assert_eq!(problem.key, "tc-gemm NT bf16->f32 m512 n256 k128");
    // A clock that makes the smallest block the fastest.
    let mut timed = Vec::new();
    let mut clock = |c: &TcConfig| {
        timed.push(*c);
        Ok((c.bm * c.bn) as f64 + c.bk as f64 / 1000.0)
    };
    let first = search_with(&problem, &*interp, &tune_opts(&d, true), None, &mut clock).unwrap();
    let TcHow::Searched { timings, errors } = &first.how else { panic!("{:?}", first.how) };
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(timed.len(), 3);
    // The model's best three, in its order.
    let ranked: Vec<TcConfig> =
        kiln::generator::tc_tune::rank(problem.mnk, &kiln::generator::tuner::Target::h100())
            .iter()
            .take(3)
            .map(|e| e.config)
            .collect();
    assert_eq!(timed, ranked);
    let fastest = timings.iter().min_by(|a, b| a.1.total_cmp(&b.1)).unwrap().0;
    assert_eq!(first.config, fastest);
    // Another problem of the same bucket, through a new cache handle, on a device that does
    // not time tensor-core kernels: the stored winner, nothing timed.
    let q = TcGemmProblem { m: 257, ..p.clone() };
    let second = tune_tc(&TcProblem::gemm(&q), &*interp, &tune_opts(&d, true)).unwrap();
    assert_eq!((second.how.clone(), second.config), (TcHow::Cached, first.config));
    let third = tune_tc(&TcProblem::gemm(&q), &*interp, &tune_opts(&d, false)).unwrap();
    assert_eq!(third.how, TcHow::Cached);
    // Another bucket: nothing stored, the model's first choice.
    let r = TcGemmProblem { m: 4096, ..p };
    let fourth = tune_tc(&TcProblem::gemm(&r), &*interp, &tune_opts(&d, true)).unwrap();
    assert!(matches!(&fourth.how, TcHow::Heuristic(w) if w.contains("only CUDA")), "{fourth:?}");
    assert_eq!(fourth.config, heuristic(&TcProblem::gemm(&r)));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn tc_conv_search_checks_on_a_small_convolution() {
    let d = fresh_dir("tune-tc-conv");
    let interp = open("interp", &OpenOptions::default()).unwrap();
    for ic in [16, 3] {
        let geom = ConvProblem::new(8, ic, 28, 28, 32, 3, 3).with_padding(1, 1);
        let p = TcConvProblem { out: Scalar::F16, ..TcConvProblem::new(geom, Scalar::F16) };
        let problem = TcProblem::conv(&p);
        let c = if ic == 16 { 8 } else { 1 };
        assert_eq!(
            problem.key,
            format!("tc-conv f16->f16 c{c} m8192 n32 k{}", if ic == 16 { 256 } else { 32 })
        );
        let mut o = tune_opts(&d, true);
        o.max_candidates = 2;
        // The model's first candidate fails (as one the device cannot launch would): the
        // next two are timed all the same.
        let first = heuristic(&problem);
        let mut clock = |c: &TcConfig| {
            if *c == first {
                Err("cannot launch".to_string())
            } else {
                Ok(c.bk as f64)
            }
        };
        let t = search_with(&problem, &*interp, &o, None, &mut clock).unwrap();
        let TcHow::Searched { timings, errors } = &t.how else { panic!("{:?}", t.how) };
        assert_eq!(errors, &vec![(first, "cannot launch".to_string())]);
        assert!(timings.len() == 2 && t.config != first, "{timings:?}");
    }
    // A request the generator cannot honour is refused in its words before anything runs.
    let bad = TcConvProblem::new(ConvProblem::new(1, 8, 2, 2, 8, 3, 3), Scalar::F16);
    let e =
        search_with(&TcProblem::conv(&bad), &*interp, &tune_opts(&d, true), None, &mut |_| Ok(1.0))
            .unwrap_err();
    assert!(e.contains("does not fit"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn cli_tune_tc_prints_the_models_choice_without_cuda() {
    let d = fresh_dir("tune-tc-cli");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["tune", "tc-conv", "--mb", "2", "--ic", "64", "--oc", "64", "--input", "14x14"])
        .args(["--kernel", "3x3", "--pad", "1x1", "--type", "f16", "--device", "interp"])
        .env("KILN_CACHE_DIR", &d)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let geom = ConvProblem::new(2, 64, 14, 14, 64, 3, 3).with_padding(1, 1);
    let want = heuristic(&TcProblem::conv(&TcConvProblem::new(geom, Scalar::F16)));
    assert_eq!(
        text.trim_end(),
        format!(
            "{want}: heuristic for `tc-conv f16->f32 c8 m512 n64 k1024` (only CUDA times \
             tensor-core kernels, not `kiln-interp`)"
        )
    );
    let _ = std::fs::remove_dir_all(&d);
}
