//! Tensor-core convolution (kiln_gen::tc_conv) on the interpreter against a direct
//! convolution: f16 and bf16 inputs, f32/f16/bf16 outputs, stride, padding, dilation, channel
//! counts that are and are not multiples of 8 (16-byte copies or element by element), odd
//! sizes (masked edge tiles) and a fused epilogue. The reference sums the taps in the
//! kernel's k order (r, s, c), so every comparison is bit for bit. ptxas (sm_80) assembles
//! the PTX where `KILN_PTXAS` is set.

mod common;

use common::tc::{buffer, round, to_f32, vals};
use kiln_gen::{ConvProblem, EpOp, Epilogue, TcConfig, TcConvProblem};
use kiln_ir::interp::{run_with, RunOptions};
use kiln_ir::launch::{Arg, Buffer};
use kiln_ir::Scalar;

/// The direct convolution, NHWC x KRSC -> NHWC (f32), each output the sequential f32 sum over
/// r, s, c (products exact), out-of-image taps skipped.
fn reference(p: &TcConvProblem, x: &[f32], w: &[f32]) -> Vec<f32> {
    let g = &p.geom;
    let (oh, ow) = (g.oh(), g.ow());
    let mut y = Vec::new();
    for n in 0..g.mb {
        for pp in 0..oh {
            for q in 0..ow {
                for o in 0..g.oc {
                    let mut s = 0.0f32;
                    for r in 0..g.kh {
                        for t in 0..g.kw {
                            let h = pp * g.stride[0] + r * (g.dilation[0] + 1) - g.padding[0];
                            let v = q * g.stride[1] + t * (g.dilation[1] + 1) - g.padding[1];
                            if h < 0 || h >= g.ih || v < 0 || v >= g.iw {
                                continue;
                            }
                            for ch in 0..g.ic {
                                let xi = ((n * g.ih + h) * g.iw + v) * g.ic + ch;
                                let wi = ((o * g.kh + r) * g.kw + t) * g.ic + ch;
                                s += x[xi as usize] * w[wi as usize];
                            }
                        }
                    }
                    y.push(s);
                }
            }
        }
    }
    y
}

/// Runs the generated convolution (also in the interpreter's reverse schedule, which must
/// give the same bits) and compares with the reference, rounded once to the output type and
/// with the epilogue (bias per output channel, then relu) where the problem has one.
fn check(p: &TcConvProblem, cfg: &TcConfig) {
    let g = p.generate(cfg).unwrap_or_else(|e| panic!("{}: {cfg}: {e}", p.name()));
    let text = kiln_ir::Module::new(vec![g.kernel.clone()]).to_string();
    let parsed = kiln_ir::parse_module(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
    assert!(parsed.kernels[0].is_equal(&g.kernel), "round trip of {}", g.kernel.name());
    let [xn, wn, yn] = g.buffer_elems;
    let (x, w) = (vals(xn, 11), vals(wn, 12));
    let bias = vals(p.geom.oc as usize, 13);
    let mut results = Vec::new();
    for reverse in [false, true] {
        let mut bufs = vec![buffer(p.ty, &x), buffer(p.ty, &w), Buffer::zeroed(p.out, yn)];
        let mut args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)];
        if p.epilogue.0.contains(&EpOp::Bias) {
            bufs.push(buffer(Scalar::F32, &bias));
            args.push(Arg::Buffer(3));
        }
        let opts = RunOptions { reverse_order: reverse, ..RunOptions::default() };
        run_with(&g.kernel, &g.range(), &args, &mut bufs, &opts)
            .unwrap_or_else(|e| panic!("{}: {e}", p.name()));
        results.push(bufs.swap_remove(2));
    }
    assert_eq!(results[0].as_bytes(), results[1].as_bytes(), "schedule-dependent result");
    let got = to_f32(&results[0]);
    let oc = p.geom.oc as usize;
    let want: Vec<f32> = reference(p, &x, &w)
        .into_iter()
        .enumerate()
        .map(|(i, mut v)| {
            for op in &p.epilogue.0 {
                v = match op {
                    EpOp::Bias => v + bias[i % oc],
                    EpOp::Relu => v.max(0.0),
                    op => panic!("{op:?} is not checked here"),
                };
            }
            round(p.out, v)
        })
        .collect();
    assert_eq!(got.len(), want.len());
    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
        assert_eq!(a.to_bits(), b.to_bits(), "{} {cfg}: element {i}: {a} != {b}", p.name());
    }
    common::tc::assemble_mma_sm80(&g.kernel, "tc-conv");
}

fn small() -> TcConfig {
    TcConfig { bm: 32, bn: 16, bk: 32, warps_m: 2, warps_n: 1, stages: 3 }
}

#[test]
fn tc_conv_padded_strided_channels_of_8() {
    // 16 channels: each chunk of 8 k is one tap, copied with copy_async or zero-filled.
    let geom = ConvProblem::new(2, 16, 7, 6, 12, 3, 3).with_stride(2, 1).with_padding(1, 1);
    let p = TcConvProblem::new(geom, Scalar::F16);
    let text = p.generate(&small()).unwrap().kernel.to_string();
    assert!(text.contains("copy_async("), "{text}");
    check(&p, &small());
    let bf = TcConvProblem { out: Scalar::BF16, ..TcConvProblem::new(geom, Scalar::BF16) };
    check(&bf, &TcConfig { bm: 16, bn: 16, bk: 16, warps_m: 1, warps_n: 2, stages: 2 });
}

#[test]
fn tc_conv_odd_channels_dilation_and_epilogue() {
    // 3 channels (an image's first layer): element by element; dilation 1 (every other
    // pixel) and asymmetric padding; K = 27 is not a multiple of the k-tile.
    let geom = ConvProblem::new(1, 3, 9, 8, 5, 3, 3).with_padding(2, 1).with_dilation(1, 0);
    let p = TcConvProblem {
        out: Scalar::F16,
        epilogue: Epilogue(vec![EpOp::Bias, EpOp::Relu]),
        ..TcConvProblem::new(geom, Scalar::BF16)
    };
    let text = p.generate(&small()).unwrap().kernel.to_string();
    assert!(!text.contains("copy_async("), "{text}");
    check(&p, &small());
}

#[test]
fn tc_conv_1x1_and_unpadded() {
    // A 1x1 filter with stride 2 (the image subsampled) and an unpadded 3x3 (no image
    // bounds checks): both with 8-channel chunks.
    let one = ConvProblem::new(2, 24, 5, 5, 8, 1, 1).with_stride(2, 2);
    check(&TcConvProblem::new(one, Scalar::F16), &small());
    let three = ConvProblem::new(1, 8, 6, 6, 16, 3, 3);
    let cfg = TcConfig { bm: 16, bn: 16, bk: 32, warps_m: 1, warps_n: 1, stages: 4 };
    check(&TcConvProblem::new(three, Scalar::BF16), &cfg);
}

#[test]
fn tc_conv_refusals_say_why() {
    let geom = ConvProblem::new(1, 8, 4, 4, 8, 3, 3);
    let e = TcConvProblem::new(geom, Scalar::F32).generate(&small()).unwrap_err();
    assert!(e.contains("must be f16 or bf16"), "{e}");
    let tiny = ConvProblem::new(1, 8, 2, 2, 8, 3, 3);
    let e = TcConvProblem::new(tiny, Scalar::F16).generate(&small()).unwrap_err();
    assert!(e.contains("does not fit"), "{e}");
    let big = ConvProblem::new(1024, 256, 128, 128, 64, 3, 3).with_padding(1, 1);
    let e = TcConvProblem::new(big, Scalar::F16).generate(&small()).unwrap_err();
    assert!(e.contains("2^31 elements or more"), "{e}");
}
