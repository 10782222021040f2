//! Tensor-core 2-D convolution forward as an implicit GEMM: NHWC activations, KRSC filters
//! (`oc, kh, kw, ic`, the input channel fastest), f16 or bf16 inputs, f32 accumulation, an
//! f32, f16 or bf16 NHWC output, with the GEMM's fused epilogues.
//!
//! `y[n, p, q, o]` is the sum over `(r, s, c)` of `x[n, h, v, c] · w[o, r, s, c]` with
//! `h = p SH + r (DH + 1) - PH` and `v = q SW + s (DW + 1) - PW`, out-of-image taps reading 0,
//! with [`ConvProblem`]'s conventions (a dilation of 0 is a dense filter; the same output
//! sizes).
//!
//! As a GEMM: M = (n, p, q), N = o, K = (r, s, c) in that order, c fastest. The filter is then
//! a plain N x K matrix (B stored transposed) and the output a plain M x N one, so the kernel
//! is [`crate::tc`]'s, tile loop, pipeline, multiply and store included; only A's tiles are
//! gathered from the image instead of copied from a matrix (`GatherA`). KRSC rather than
//! RSCK because K then runs along a filter row in memory, as along an image pixel: both
//! operands' tiles are copied 16 bytes at a time.
//!
//! A's copies: each work-item's tile rows (output pixels) are split into `(n, p, q)` once at
//! the kernel's entry; per K-tile a chunk of 8 consecutive k is one tap `(r, s)` and 8
//! consecutive channels when `ic` is a multiple of 8, copied with one `copy_async` (or zeros
//! when the tap is outside the image, or past M or K); otherwise element by element.
//!
//! On the interpreter the f32 result is the sequential sum over k = (r, s, c), bit for bit
//! (zero taps add nothing), as for the GEMM.

use kiln_ir::matrix::MatrixOp;
use kiln_ir::{AddrSpace, Expr, Func, Scalar, Stmt, Type, Var};

use crate::conv::ConvProblem;
use crate::ix::{self, c};
use crate::tc::{nn_div, nn_rem, u32_of, zero, ATile, GatherA, TcConfig, TcGemmProblem, Variant};
use crate::tc_epilogue::Epilogue;
use crate::TcGenerated;

/// A tensor-core convolution problem (see the module docs for the layouts).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TcConvProblem {
    /// The geometry: batch, channels, image and filter sizes, stride, padding and dilation
    /// (its `format` and `ty` are not used: the layouts are NHWC / KRSC, the type `ty`).
    pub geom: ConvProblem,
    /// The activations' and filters' element type: f16 or bf16.
    pub ty: Scalar,
    /// The output's element type: f32, f16 or bf16 (rounded once from the f32 result).
    pub out: Scalar,
    /// What is applied to each f32 element before the store (`bias` is per output channel,
    /// `add` an NHWC tensor of the output's shape).
    pub epilogue: Epilogue,
}

impl TcConvProblem {
    /// A plain convolution (no epilogue) with an f32 output.
    pub fn new(geom: ConvProblem, ty: Scalar) -> TcConvProblem {
        TcConvProblem { geom, ty, out: Scalar::F32, epilogue: Epilogue::default() }
    }

    /// `tc_conv_<in>_<out>_<mb>x<ih>x<iw>x<ic>_<oc>x<kh>x<kw>[_s..][_p..][_d..][_<epilogue>]`.
    pub fn name(&self) -> String {
        let g = &self.geom;
        let mut s = format!(
            "tc_conv_{}_{}_{}x{}x{}x{}_{}x{}x{}",
            self.ty, self.out, g.mb, g.ih, g.iw, g.ic, g.oc, g.kh, g.kw
        );
        for (tag, [h, w], dflt) in [("s", g.stride, 1), ("p", g.padding, 0), ("d", g.dilation, 0)] {
            if h != dflt || w != dflt {
                s.push_str(&format!("_{tag}{h}x{w}"));
            }
        }
        s + &self.epilogue.suffix()
    }

    /// The implicit GEMM: M = mb·oh·ow, N = oc, K = kh·kw·ic, B (the filters) stored N x K.
    pub fn gemm(&self) -> TcGemmProblem {
        let g = &self.geom;
        TcGemmProblem {
            m: g.mb * g.oh() * g.ow(),
            n: g.oc,
            k: g.kh * g.kw * g.ic,
            trans_a: false,
            trans_b: true,
            ty: self.ty,
            out: self.out,
            epilogue: self.epilogue.clone(),
        }
    }

    /// Elements of x (`mb·ih·iw·ic`), w (`oc·kh·kw·ic`) and y (`mb·oh·ow·oc`).
    pub fn buffer_elems(&self) -> [usize; 3] {
        let g = &self.geom;
        [g.mb * g.ih * g.iw * g.ic, g.oc * g.kh * g.kw * g.ic, g.mb * g.oh() * g.ow() * g.oc]
            .map(|e| e as usize)
    }

    /// Why the problem cannot be generated, if it cannot.
    pub fn validate(&self) -> Result<(), String> {
        // The geometry's checks are the f32 convolution's (sizes, strides, the filter fits).
        ConvProblem { ty: Scalar::F32, ..self.geom }.views()?;
        if !matches!(self.ty, Scalar::F16 | Scalar::BF16) {
            return Err(format!(
                "tensor-core convolution of {}: the inputs must be f16 or bf16",
                self.ty
            ));
        }
        let g = &self.geom;
        let sizes = [
            ("x", product(&[g.mb, g.ih, g.iw, g.ic])),
            ("w", product(&[g.oc, g.kh, g.kw, g.ic])),
            ("y", product(&[g.mb, g.oh(), g.ow(), g.oc])),
            ("the implicit GEMM's A (M x K)", product(&[g.mb, g.oh(), g.ow(), g.kh, g.kw, g.ic])),
        ];
        if let Some((what, _)) = sizes.iter().find(|(_, e)| e.is_none_or(|e| e >= 1 << 31)) {
            return Err(format!(
                "tensor-core convolution: {what} has 2^31 elements or more (kernels index with \
                 32-bit integers)"
            ));
        }
        self.gemm().validate()
    }

    /// Generates the kernel with blocking `cfg`; parameters `(x, w, y)` then the epilogue's
    /// ([`Epilogue::params`]).
    pub fn generate(&self, cfg: &TcConfig) -> Result<TcGenerated, String> {
        self.validate()?;
        let gather = Im2col { p: self };
        let variant = Variant { name: self.name(), bufs: ["x", "w", "y"], gather: &gather };
        let mut g = self.gemm().generate_variant(cfg, Some(&variant))?;
        g.buffer_elems = self.buffer_elems();
        Ok(g)
    }
}

/// A's tiles gathered from the NHWC image.
struct Im2col<'a> {
    p: &'a TcConvProblem,
}

impl Im2col<'_> {
    fn chunks(t: &ATile<'_>) -> (i64, i64) {
        let per_row = t.cols / 8;
        let chunks = t.rows * per_row;
        (per_row, (chunks + t.threads - 1) / t.threads)
    }

    /// The names of chunk `e`'s row, column, pixel base and tap origin, set by `setup`.
    fn vars(e: i64) -> [Var; 6] {
        ["q", "r", "cc", "nb", "h0", "w0"].map(|n| Var::new(format!("x_{n}{e}"), Type::I32))
    }

    /// Tap `k` (an expression) of chunk `e`: whether it lies inside the image and inside M
    /// (`m_in`) and K (checked when `check_k`), and its element's offset in x.
    fn tap(&self, e: i64, k: &Expr, m_in: Option<Expr>, check_k: bool) -> (Option<Expr>, Expr) {
        let g = &self.p.geom;
        let [_, _, _, nb, h0, w0] = Self::vars(e);
        let kk = g.kh * g.kw * g.ic;
        let (ch, rs) = (nn_rem(k, g.ic), nn_div(k, g.ic));
        let (r, s) = (nn_div(&rs, g.kw), nn_rem(&rs, g.kw));
        let h = ix::add(&h0.expr(), &ix::mul(&r, &c(g.dilation[0] + 1)));
        let w = ix::add(&w0.expr(), &ix::mul(&s, &c(g.dilation[1] + 1)));
        // Without padding every tap of a pixel inside M is inside the image.
        let inside = |v: &Expr, pad: i64, size: i64| {
            (pad != 0).then(|| v.cast(Scalar::U32).cmp_lt(Expr::u32(size as u32)))
        };
        let cond = ix::and(
            ix::and(m_in, check_k.then(|| k.cmp_lt(c(kk)))),
            ix::and(inside(&h, g.padding[0], g.ih), inside(&w, g.padding[1], g.iw)),
        );
        let at = ix::add(&ix::mul(&ix::add(&ix::mul(&h, &c(g.iw)), &w), &c(g.ic)), &ch);
        (cond, ix::add(&nb.expr(), &at))
    }
}

impl GatherA for Im2col<'_> {
    fn setup(&self, t: &ATile<'_>) -> Vec<Stmt> {
        let g = &self.p.geom;
        let (oh, ow) = (g.oh(), g.ow());
        let (per_row, n_chunks) = Self::chunks(t);
        let mut out = Vec::new();
        for e in 0..n_chunks {
            let [q, r, cc, nb, h0, w0] = Self::vars(e);
            let m = ix::add(&t.m0.expr(), &r.expr());
            let pix = nn_rem(&m, oh * ow);
            out.extend([
                Stmt::let_(&q, ix::add(t.lid, &c(e * t.threads))),
                Stmt::let_(&r, nn_div(&q.expr(), per_row)),
                Stmt::let_(&cc, ix::mul(&nn_rem(&q.expr(), per_row), &c(8))),
                Stmt::let_(&nb, ix::mul(&nn_div(&m, oh * ow), &c(g.ih * g.iw * g.ic))),
                Stmt::let_(
                    &h0,
                    ix::sub(&ix::mul(&nn_div(&pix, ow), &c(g.stride[0])), &c(g.padding[0])),
                ),
                Stmt::let_(
                    &w0,
                    ix::sub(&ix::mul(&nn_rem(&pix, ow), &c(g.stride[1])), &c(g.padding[1])),
                ),
            ]);
        }
        out
    }

    fn fill(&self, t: &ATile<'_>, k0: &Expr, base: &Expr, tag: &str) -> Vec<Stmt> {
        let p = self.p;
        let gm = p.gemm();
        let x = Var::new("x", Type::ptr(AddrSpace::Global, p.ty));
        let (per_row, n_chunks) = Self::chunks(t);
        let chunks = t.rows * per_row;
        let mut out = Vec::new();
        for e in 0..n_chunks {
            let [q, r, cc, ..] = Self::vars(e);
            let m_in =
                (gm.m % t.rows != 0).then(|| ix::add(&t.m0.expr(), &r.expr()).cmp_lt(c(gm.m)));
            let k = Var::new(format!("{tag}_k{e}"), Type::I32);
            let dst = ix::add(base, &ix::add(&ix::mul(&r.expr(), &c(t.ls)), &cc.expr()));
            let mut body = vec![Stmt::let_(&k, ix::add(k0, &cc.expr()))];
            if p.geom.ic % 8 == 0 {
                // The chunk is one tap and 8 channels: 16 aligned bytes of x, or zeros.
                let (cond, src) = self.tap(e, &k.expr(), m_in, gm.k % t.cols != 0);
                let copy = Stmt::call(
                    Func::matrix(MatrixOp::CopyAsync(8)),
                    [t.local.expr(), u32_of(&dst), x.expr(), u32_of(&src)],
                );
                body.push(match cond {
                    Some(cond) => {
                        let zeros: Vec<Stmt> = (0..8)
                            .map(|j| Stmt::store(t.local, ix::add(&dst, &c(j)), zero(p.ty)))
                            .collect();
                        Stmt::if_else(cond, copy, Stmt::block(zeros))
                    }
                    None => copy,
                });
            } else {
                for j in 0..8 {
                    let kj = ix::add(&k.expr(), &c(j));
                    let d = ix::add(&dst, &c(j));
                    // Element j of a chunk may pass K even where the tile does not.
                    let (cond, src) = self.tap(e, &kj, m_in.clone(), true);
                    let cond = cond.unwrap_or_else(|| Expr::bool(true));
                    body.push(Stmt::if_else(
                        cond,
                        Stmt::store(t.local, d.clone(), x.load(src)),
                        Stmt::store(t.local, d, zero(p.ty)),
                    ));
                }
            }
            let mut item = Vec::new();
            if (e + 1) * t.threads > chunks {
                item.push(Stmt::if_(q.expr().cmp_lt(c(chunks)), Stmt::block(body)));
            } else {
                item.extend(body);
            }
            out.push(Stmt::block(item));
        }
        out
    }
}

/// The product of `v`, or None past i64.
fn product(v: &[i64]) -> Option<i64> {
    v.iter().try_fold(1i64, |a, &b| a.checked_mul(b))
}
