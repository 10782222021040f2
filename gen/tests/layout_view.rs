//! Layouts and views, property-tested: every element's offset against a direct formula
//! computed here, notation round trips, masks that never let an access leave the buffer,
//! composition of views, and located errors.

use std::collections::HashSet;

use kiln_gen::{Base, DimKind, Layout, TDim, VDim, View};
use kiln_ir::Scalar;
use proptest::prelude::*;

/// Every index tuple of a box, last dimension fastest.
fn all(dims: &[i64]) -> Vec<Vec<i64>> {
    let mut out = vec![vec![]];
    for &d in dims {
        out = out
            .into_iter()
            .flat_map(|p| (0..d).map(move |x| [p.clone(), vec![x]].concat()))
            .collect();
    }
    out
}

/// A blocked layout description: per dimension its size and an optional inner block size,
/// and an order of the blocks (outermost first) as (dim, inner?) pairs.
/// Dimension sizes, optional inner block size per dimension, block order.
type Blocked = (Vec<i64>, Vec<Option<i64>>, Vec<(usize, bool)>);

fn arb_blocked() -> impl Strategy<Value = Blocked> {
    (1usize..=4)
        .prop_flat_map(|n| {
            (
                proptest::collection::vec(1i64..=7, n),
                proptest::collection::vec(proptest::option::of(2i64..=4), n),
                any::<u64>(),
            )
        })
        .prop_map(|(dims, inner, seed)| {
            let mut order: Vec<(usize, bool)> = (0..dims.len()).map(|d| (d, false)).collect();
            for (d, i) in inner.iter().enumerate() {
                if i.is_some() {
                    order.push((d, true));
                }
            }
            // A seeded shuffle; then a dimension's inner block goes right of its outer one
            // (in the notation, the rightmost block of a dimension is its innermost).
            let mut s = seed | 1;
            for i in (1..order.len()).rev() {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                order.swap(i, (s % (i as u64 + 1)) as usize);
            }
            for d in 0..dims.len() {
                let o = order.iter().position(|&b| b == (d, false)).unwrap();
                if let Some(i) = order.iter().position(|&b| b == (d, true)) {
                    if i < o {
                        order.swap(i, o);
                    }
                }
            }
            (dims, inner, order)
        })
}

const NAMES: &str = "abcd";

fn notation(dims: &[i64], inner: &[Option<i64>], order: &[(usize, bool)]) -> String {
    order
        .iter()
        .map(|&(d, is_inner)| {
            let l = NAMES.chars().nth(d).unwrap();
            match (is_inner, inner[d]) {
                (true, Some(b)) => format!("{b}{l}"),
                (false, Some(b)) => format!("{}{l}", (dims[d] + b - 1) / b),
                _ => format!("{}{l}", dims[d]),
            }
        })
        .collect()
}

/// The offset by the definition: each block's index times the product of the sizes of the
/// blocks inside it.
fn direct(x: &[i64], dims: &[i64], inner: &[Option<i64>], order: &[(usize, bool)]) -> i64 {
    let size = |&(d, is_inner): &(usize, bool)| match (is_inner, inner[d]) {
        (true, Some(b)) => b,
        (false, Some(b)) => (dims[d] + b - 1) / b,
        _ => dims[d],
    };
    let mut off = 0;
    for (i, blk) in order.iter().enumerate() {
        let stride: i64 = order[i + 1..].iter().map(size).product();
        let (d, is_inner) = *blk;
        let idx = match (is_inner, inner[d]) {
            (true, Some(b)) => x[d] % b,
            (false, Some(b)) => x[d] / b,
            _ => x[d],
        };
        off += idx * stride;
    }
    off
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn layout_offsets_match_the_definition((dims, inner, order) in arb_blocked()) {
        let text = notation(&dims, &inner, &order);
        let l = Layout::parse_named(&text, NAMES, Scalar::F32, Some(&dims)).unwrap();
        prop_assert_eq!(l.notation(NAMES), text.clone());
        let back = Layout::parse_named(&l.notation(NAMES), NAMES, Scalar::F32, Some(&dims)).unwrap();
        prop_assert_eq!(&back, &l);
        let size = l.size_elems().unwrap();
        let mut seen = HashSet::new();
        // The symbolic offset, evaluated, agrees too (one variable per dimension).
        let vars: Vec<kiln_ir::Var> =
            (0..dims.len()).map(|d| kiln_ir::Var::new(format!("x{d}"), kiln_ir::Type::I32)).collect();
        let sym = l.offset(&vars.iter().map(|v| v.expr()).collect::<Vec<_>>());
        for x in all(&dims) {
            let want = direct(&x, &dims, &inner, &order);
            prop_assert_eq!(l.offset_of(&x), want, "{} at {:?}", text, x);
            let env = vars.iter().zip(&x).map(|(v, &i)| (v.clone(), kiln_gen::ix::imm(i))).collect();
            prop_assert_eq!(kiln_gen::ix::eval_i64(&sym, &env).unwrap(), want);
            prop_assert!(want >= 0 && want < size);
            prop_assert!(seen.insert(want), "two elements at offset {}", want);
        }
    }

    #[test]
    fn conv_view_masks_never_leave_the_buffer(
        mb in 1i64..=2, ic in 1i64..=2, ih in 1i64..=6, iw in 1i64..=6,
        kh in 1i64..=3, kw in 1i64..=3, sh in 1i64..=3, sw in 1i64..=2,
        ph in 0i64..=2, pw in 0i64..=2, dh in 0i64..=1, dw in 0i64..=1, nhwc in any::<bool>(),
    ) {
        let p = kiln_gen::ConvProblem::new(mb, ic, ih, iw, 1, kh, kw)
            .with_stride(sh, sw).with_padding(ph, pw).with_dilation(dh, dw)
            .with_format(if nhwc { kiln_gen::ConvFormat::Nhwc } else { kiln_gen::ConvFormat::Nchw });
        prop_assume!(p.oh() > 0 && p.ow() > 0);
        let v = p.views().unwrap().a;
        let size = v.layout().size_elems().unwrap();
        let dims: Vec<i64> = v.vdims().iter().map(|d| d.size).collect();
        for x in all(&dims) {
            let [n, oh, ow, c, r, s] = [x[0], x[1], x[2], x[3], x[4], x[5]];
            let (y, z) = (oh * sh + r * (dh + 1) - ph, ow * sw + s * (dw + 1) - pw);
            let got = v.offset_at(&x).unwrap();
            if y < 0 || y >= ih || z < 0 || z >= iw {
                prop_assert_eq!(got, None, "{:?} reads padding", x);
            } else {
                let want = if nhwc { ((n * ih + y) * iw + z) * ic + c } else { ((n * ic + c) * ih + y) * iw + z };
                prop_assert_eq!(got, Some(want));
                prop_assert!(want < size);
            }
        }
    }

    #[test]
    fn composed_views_agree_with_stepwise_evaluation(rows in 1i64..=6, cols in 1i64..=6, shift in -3i64..=3) {
        // Inner: the transpose of a rows x cols matrix. Outer: that transpose shifted by
        // `shift` columns, masked to stay inside.
        let l = Layout::dense(Scalar::F32, &[rows, cols], &[0, 1]).unwrap();
        let (i, j) = (VDim::new("i", cols, DimKind::M), VDim::new("j", rows, DimKind::K));
        let inner = View::new(Base::Layout(l), vec![i.clone(), j.clone()],
            vec![TDim::new("r", j.var()), TDim::new("c", i.var())]).unwrap();
        let (p, q) = (VDim::new("p", cols, DimKind::M), VDim::new("q", rows, DimKind::K));
        let outer = View::new(Base::View(Box::new(inner.clone())), vec![p.clone(), q.clone()],
            vec![TDim::bounded("i", p.var() + shift as i32, cols), TDim::new("j", q.var())]).unwrap();
        for x in all(&[cols, rows]) {
            let s = x[0] + shift;
            let want = if s < 0 || s >= cols { None } else { inner.offset_at(&[s, x[1]]).unwrap() };
            prop_assert_eq!(outer.offset_at(&x).unwrap(), want);
            if let Some(o) = want {
                prop_assert_eq!(o, x[1] * cols + s);
            }
        }
    }
}

#[test]
fn seed_example_blocked_layout() {
    let l = Layout::parse_named("4n2c7h7w32n32c", "nchw", Scalar::F32, None).unwrap();
    assert_eq!(l.dims(), &[128, 64, 7, 7]);
    assert_eq!(l.blocks().len(), 6);
    assert_eq!(l.notation("nchw"), "4n2c7h7w32n32c");
    // Same as oneDNN's NChw32n32c given the sizes.
    let tag =
        Layout::parse_named("NChw32n32c", "nchw", Scalar::F32, Some(&[128, 64, 7, 7])).unwrap();
    assert_eq!(tag, l);
    // Padding: 3 channels in 32c blocks.
    let p = Layout::parse_named("nChw32c", "nchw", Scalar::F16, Some(&[2, 3, 4, 4])).unwrap();
    assert_eq!(p.notation("nchw"), "2n1c4h4w32c");
    assert_eq!(p.size_elems(), Some(2 * 32 * 4 * 4));
    // Explicit strides round-trip.
    let s = Layout::parse("3a[10]4b", Scalar::F32, None).unwrap();
    assert_eq!(s.offset_of(&[2, 3]), 23);
    assert_eq!(s.notation(kiln_gen::layout::DEFAULT_NAMES), "3a[10]4b");
    assert_eq!(Layout::parse("3a[10]4b", Scalar::F32, None).unwrap(), s);
}

#[test]
fn layout_errors_are_located() {
    let e = |t: &str, d: Option<&[i64]>| {
        Layout::parse_named(t, "nchw", Scalar::F32, d).unwrap_err().to_string()
    };
    assert_eq!(
        e("4n2x", None),
        "layout `4n2x`, column 4: `x` is not a dimension (dimensions are named by `nchw`)"
    );
    assert_eq!(
        e("4n32", None),
        "layout `4n32`, column 5: a size must be followed by a dimension letter"
    );
    assert!(e("NC", None).contains("column 1: the block of `n` has no size"), "{}", e("NC", None));
    assert!(e("nchwn", Some(&[1, 2, 3, 4])).contains("column 5: `n` has two blocks without a size"));
    assert!(e("4N", None).contains("column 1: `N` is an outer block and takes no size"));
    assert!(e("2n3c", Some(&[2, 3, 1, 1])).contains("dimension `h` has no block"));
    assert!(e("2n3c", Some(&[4, 3])).contains("span 2 indices, fewer than its size 4"));
    assert!(e("", None).contains("empty layout"));
    assert!(e("0n", None).contains("column 1: block sizes must be between"));
    assert!(e("2n[", None).contains("column 3: `[` needs a stride and `]`"));
    assert!(e("2n[3", None).contains("column 3: `[` needs a stride and `]`"));
}

#[test]
fn views_refuse_unmasked_out_of_range_mappings() {
    let l = Layout::dense(Scalar::F32, &[4], &[0]).unwrap();
    let i = VDim::new("i", 4, DimKind::M);
    let err =
        View::new(Base::Layout(l.clone()), vec![i.clone()], vec![TDim::new("x", i.var() + 1)])
            .unwrap_err();
    assert_eq!(err, "`x = i + 1` ranges over 1..=4, outside 0..4, and has no mask");
    let err = View::new(
        Base::Layout(l.clone()),
        vec![i.clone()],
        vec![TDim::new("x", i.var() * i.var() / i.var())],
    )
    .unwrap_err();
    assert!(err.contains("cannot bound"), "{err}");
    let j = VDim::new("j", 4, DimKind::M);
    let err = View::new(Base::Layout(l.clone()), vec![i.clone()], vec![TDim::new("x", j.var())])
        .unwrap_err();
    assert!(err.contains("uses `j`, not a virtual dimension"), "{err}");
    // With a mask it is fine, and the masked element reads as nothing.
    let v = View::new(Base::Layout(l), vec![i.clone()], vec![TDim::bounded("x", i.var() + 1, 4)])
        .unwrap();
    assert_eq!(v.offset_at(&[3]).unwrap(), None);
    assert_eq!(v.offset_at(&[2]).unwrap(), Some(3));
}

#[test]
fn tensor_tiles() {
    let t =
        kiln_gen::Tensor::new(vec![2, 3], vec![kiln_gen::ix::c(4), kiln_gen::ix::c(5)]).unwrap();
    assert_eq!(t.elems(), 6);
    let at = t.outer_coords(&[kiln_gen::ix::c(1), kiln_gen::ix::c(2)]);
    assert_eq!(at, vec![kiln_gen::ix::c(5), kiln_gen::ix::c(7)]);
    assert!(kiln_gen::Tensor::new(vec![2], vec![]).is_err());
}

#[test]
fn conv_view_prints_as_documented() {
    // docs/generator.md shows this view; keep the two in step.
    let p = kiln_gen::ConvProblem::new(2, 3, 7, 7, 8, 3, 3).with_stride(2, 2).with_padding(1, 1);
    let want = "view mb:2:M oh:4:M ow:4:M ic:3:K kh:3:K kw:3:K
  n = mb
  c = ic
  h = oh * 2 + kh - 1  if h >= 0 && h < 7
  w = ow * 2 + kw - 1  if w >= 0 && w < 7
  of f32 2a3b7c7d";
    assert_eq!(p.views().unwrap().a.to_string(), want);
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/generator.md"))
        .unwrap();
    assert!(doc.contains(want), "docs/generator.md does not show the view as it prints");
}
