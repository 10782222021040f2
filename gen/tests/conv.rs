//! Generated 2-D convolutions (implicit GEMM over views) on the interpreter against a naive
//! f64 reference: NCHW and NHWC, strides, padding, dilation, odd sizes, random
//! configurations, f32 and f16 storage; each kernel also round-trips through the text
//! format and lowers to PTX and SPIR-V.

mod common;

use common::{check_generated, compare, run_generated, Rng};
use kiln_gen::{ConvFormat, ConvProblem, GemmConfig};
use kiln_ir::Scalar;

/// Logical (n, c, h, w) to the buffer index for a format; weights are (o, i, h, w).
fn act_index(f: ConvFormat, d: [i64; 4], x: [i64; 4]) -> usize {
    let [_, c, h, w] = d;
    (match f {
        ConvFormat::Nchw => ((x[0] * c + x[1]) * h + x[2]) * w + x[3],
        ConvFormat::Nhwc => ((x[0] * h + x[2]) * w + x[3]) * c + x[1],
    }) as usize
}

fn wei_index(f: ConvFormat, d: [i64; 4], x: [i64; 4]) -> usize {
    let [o, i, h, w] = d;
    (match f {
        ConvFormat::Nchw => ((x[0] * i + x[1]) * h + x[2]) * w + x[3],
        ConvFormat::Nhwc => ((x[2] * w + x[3]) * i + x[1]) * o + x[0],
    }) as usize
}

fn reference(
    p: &ConvProblem,
    src: &[f64],
    wei: &[f64],
    dst: &[f64],
    alpha: f64,
    beta: f64,
) -> (Vec<f64>, Vec<f64>) {
    let [sd, wd, dd] = p.shapes();
    let mut out = dst.to_vec();
    let mut scale = vec![0.0; dst.len()];
    for n in 0..p.mb {
        for oc in 0..p.oc {
            for oh in 0..p.oh() {
                for ow in 0..p.ow() {
                    let (mut s, mut t) = (0.0, 0.0);
                    for ic in 0..p.ic {
                        for kh in 0..p.kh {
                            for kw in 0..p.kw {
                                let ih = oh * p.stride[0] + kh * (p.dilation[0] + 1) - p.padding[0];
                                let iw = ow * p.stride[1] + kw * (p.dilation[1] + 1) - p.padding[1];
                                if ih < 0 || ih >= p.ih || iw < 0 || iw >= p.iw {
                                    continue;
                                }
                                let x = src[act_index(p.format, sd, [n, ic, ih, iw])];
                                let y = wei[wei_index(p.format, wd, [oc, ic, kh, kw])];
                                s += x * y;
                                t += (x * y).abs();
                            }
                        }
                    }
                    let o = act_index(p.format, dd, [n, oc, oh, ow]);
                    let old = if beta == 0.0 { 0.0 } else { beta * dst[o] };
                    out[o] = alpha * s + old;
                    scale[o] = (alpha * t).abs() + old.abs();
                }
            }
        }
    }
    (out, scale)
}

fn case(p: ConvProblem, cfg: GemmConfig, seed: u64) {
    let mut r = Rng(seed | 1);
    let g = p.generate(&cfg).unwrap_or_else(|e| panic!("{p:?} {cfg}: {e}"));
    check_generated(&g);
    let [sd, wd, dd] = p.shapes();
    let len = |d: [i64; 4]| d.iter().product::<i64>() as usize;
    assert_eq!(g.buffer_elems, [len(sd), len(wd), len(dd)]);
    let exact = seed.is_multiple_of(2);
    let data = |r: &mut Rng, n| if exact { r.ints(n) } else { r.reals(n, p.ty) };
    let (src, wei, dst) = (data(&mut r, len(sd)), data(&mut r, len(wd)), data(&mut r, len(dd)));
    for (alpha, beta) in [(1.0f32, 0.0f32), (0.5, 2.0)] {
        let (want, scale) = reference(&p, &src, &wei, &dst, alpha as f64, beta as f64);
        let mut got = dst.clone();
        run_generated(&g, p.ty, &src, &wei, &mut got, alpha, beta);
        let what = format!("{p:?} {cfg} alpha={alpha} beta={beta}");
        if exact && p.ty == Scalar::F32 {
            assert_eq!(got, want, "{what}");
        } else {
            compare(&what, &got, &want, &scale, p.ty);
        }
    }
}

#[test]
fn conv_3x3_padded_both_formats() {
    for format in [ConvFormat::Nchw, ConvFormat::Nhwc] {
        let p = ConvProblem::new(2, 3, 5, 5, 4, 3, 3).with_padding(1, 1).with_format(format);
        case(p, GemmConfig::default(), 2);
        case(p, GemmConfig { slm_depth: 1, unroll: true, ..GemmConfig::default() }, 3);
    }
}

/// Split-K on convolutions (K = channels x filter taps cut into slices, summed in order by
/// the second kernel), both formats, padded and strided.
#[test]
fn conv_split_k() {
    for (i, format) in [ConvFormat::Nchw, ConvFormat::Nhwc].into_iter().enumerate() {
        let p = ConvProblem::new(2, 6, 7, 6, 5, 3, 3)
            .with_padding(1, 1)
            .with_stride(1 + i as i64, 1)
            .with_format(format);
        let cfg = GemmConfig { k_tile: 4, split_k: 3 + i as u32, ..GemmConfig::default() };
        let g = p.generate(&cfg).unwrap();
        assert!(g.split.as_ref().is_some_and(|s| s.slices > 1), "{format:?}");
        case(p, cfg, 5 + i as u64);
    }
}

#[test]
fn conv_random_shapes_strides_dilations() {
    let mut r = Rng(0xdead_beef_cafe_f00d);
    let mut done = 0;
    while done < 10 {
        let format = if r.range(0, 1) == 1 { ConvFormat::Nhwc } else { ConvFormat::Nchw };
        let p = ConvProblem::new(
            r.range(1, 2),
            [1, 3, 4][r.range(0, 2) as usize],
            r.range(1, 9),
            r.range(1, 9),
            [1, 3, 5][r.range(0, 2) as usize],
            r.range(1, 3),
            r.range(1, 3),
        )
        .with_stride(r.range(1, 3), r.range(1, 2))
        .with_padding(r.range(0, 2), r.range(0, 1))
        .with_dilation(r.range(0, 1), r.range(0, 1))
        .with_format(format)
        .with_type(if done % 4 == 3 { Scalar::F16 } else { Scalar::F32 });
        if p.oh() == 0 || p.ow() == 0 {
            assert!(p.generate(&GemmConfig::default()).unwrap_err().contains("does not fit"));
            continue;
        }
        let pick = |r: &mut Rng, v: &[u32]| v[r.range(0, v.len() as i64 - 1) as usize];
        let cfg = GemmConfig {
            wg_m: pick(&mut r, &[2, 4, 8]),
            wg_n: pick(&mut r, &[1, 2, 4]),
            tm: pick(&mut r, &[1, 2, 3]),
            tn: pick(&mut r, &[1, 2]),
            k_tile: pick(&mut r, &[1, 4, 9, 16]),
            slm_depth: pick(&mut r, &[1, 2, 3]),
            vec: pick(&mut r, &[1, 2, 4]),
            split_k: 1,
            unroll: r.range(0, 1) == 1,
        };
        case(p, cfg, r.next());
        done += 1;
    }
}

#[test]
fn bad_convolutions_are_refused() {
    let p = ConvProblem::new(1, 1, 2, 2, 1, 3, 3);
    assert!(p.generate(&GemmConfig::default()).unwrap_err().contains("does not fit"));
    let p = ConvProblem::new(1, 1, 5, 5, 1, 3, 3).with_stride(0, 1);
    assert!(p.generate(&GemmConfig::default()).unwrap_err().contains("strides"));
    let p = ConvProblem::new(1, 0, 5, 5, 1, 3, 3);
    assert!(p.generate(&GemmConfig::default()).unwrap_err().contains("ic = 0"));
}

/// The output position of a tile row (mb, oh, ow: divisions of the flat row by OH * OW and
/// OW) does not change from one reduction step to the next: in the double-buffered loop,
/// after the default pipeline, it is computed before the k loop, not in it (the loop takes
/// apart only the reduction index), and no division by a constant is left.
#[test]
fn conv_row_positions_are_computed_outside_the_k_loop() {
    let p = ConvProblem::new(4, 8, 14, 14, 16, 3, 3).with_stride(2, 2).with_padding(1, 1);
    assert_eq!((p.oh(), p.ow()), (7, 7));
    for unroll in [false, true] {
        let cfg = GemmConfig {
            wg_m: 8,
            wg_n: 8,
            tm: 2,
            tn: 2,
            k_tile: 8,
            slm_depth: 2,
            unroll,
            vec: 1,
            split_k: 1,
        };
        let g = p.generate(&cfg).unwrap();
        let text = kiln_passes::pipeline::optimize(&g.kernel).to_string();
        let at = text.find("for kt").unwrap_or_else(|| panic!("no k loop:\n{text}"));
        let (before, rest) = text.split_at(at);
        // The loop ends at the first line indented as its header (`for kt` is indented 4).
        let end = rest.find("\n    }").unwrap_or_else(|| panic!("no loop end:\n{text}"));
        let in_loop = &rest[..end];
        assert!(before.contains("let la_mb0") && before.contains("let la_oh0"), "{text}");
        assert!(!in_loop.contains("let la_mb") && !in_loop.contains("let la_oh"), "{text}");
        assert!(
            in_loop.contains("let la_kh"),
            "the reduction index is taken apart in the loop:\n{text}"
        );
        // Without a division: those by constants are shifts and multiplications (ptxas
        // would divide with its generic sequence, some twenty instructions each).
        assert!(!text.contains(" / ") && !text.contains(" % "), "{text}");
        case(p, cfg, 3);
    }
}
