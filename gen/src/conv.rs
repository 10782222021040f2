//! 2-D convolution forward as a GEMM over views (implicit GEMM, no im2col buffer).
//!
//! `dst[mb, oc, oh, ow] = alpha * sum(src[mb, ic, ih, iw] * wei[oc, ic, kh, kw]) + beta * dst`
//! with `ih = oh * SH + kh * (DH + 1) - PH` and `iw = ow * SW + kw * (DW + 1) - PW`
//! (oneDNN's convention: a dilation of 0 is a dense filter), and out-of-image taps reading
//! 0. `OH = (IH + 2 PH - ((KH - 1)(DH + 1) + 1)) / SH + 1`, and the same for `OW`.
//!
//! As a GEMM: M = (mb, oh, ow), N = oc, K = (ic, kh, kw). Layouts: `NCHW` activations
//! with `OIHW` weights, or `NHWC` activations with `HWIO` weights.
//!
//! ```
//! use kiln_gen::{ConvFormat, ConvProblem, GemmConfig};
//! use kiln_ir::Scalar;
//! let p = ConvProblem::new(2, 3, 7, 7, 4, 3, 3).with_stride(2, 2).with_padding(1, 1);
//! assert_eq!((p.oh(), p.ow()), (4, 4));
//! let g = p.generate(&GemmConfig::default()).unwrap();
//! assert_eq!(g.mnk, [2 * 4 * 4, 4, 3 * 3 * 3]);
//! ```

use kiln_ir::Scalar;

use crate::codegen::{generate, GemmViews, Generated};
use crate::config::GemmConfig;
use crate::ix;
use crate::layout::Layout;
use crate::view::{Base, DimKind, TDim, VDim, View};

/// How a convolution's tensors are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConvFormat {
    /// `NCHW` activations, `OIHW` weights.
    Nchw,
    /// `NHWC` activations, `HWIO` weights.
    Nhwc,
}

/// A 2-D convolution forward problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvProblem {
    /// Batch size.
    pub mb: i64,
    /// Input channels.
    pub ic: i64,
    /// Input height.
    pub ih: i64,
    /// Input width.
    pub iw: i64,
    /// Output channels.
    pub oc: i64,
    /// Filter height.
    pub kh: i64,
    /// Filter width.
    pub kw: i64,
    /// Strides (height, width), at least 1.
    pub stride: [i64; 2],
    /// Padding on each side (height, width).
    pub padding: [i64; 2],
    /// Dilation (height, width), oneDNN's convention: 0 is a dense filter.
    pub dilation: [i64; 2],
    /// The storage layouts.
    pub format: ConvFormat,
    /// The storage type: f32 or f16.
    pub ty: Scalar,
}

impl ConvProblem {
    /// An f32 `NCHW` convolution with stride 1, no padding and no dilation.
    pub fn new(mb: i64, ic: i64, ih: i64, iw: i64, oc: i64, kh: i64, kw: i64) -> ConvProblem {
        ConvProblem {
            mb,
            ic,
            ih,
            iw,
            oc,
            kh,
            kw,
            stride: [1, 1],
            padding: [0, 0],
            dilation: [0, 0],
            format: ConvFormat::Nchw,
            ty: Scalar::F32,
        }
    }

    /// The same with the given strides.
    pub fn with_stride(mut self, sh: i64, sw: i64) -> ConvProblem {
        self.stride = [sh, sw];
        self
    }

    /// The same with the given padding.
    pub fn with_padding(mut self, ph: i64, pw: i64) -> ConvProblem {
        self.padding = [ph, pw];
        self
    }

    /// The same with the given dilation (0 = dense).
    pub fn with_dilation(mut self, dh: i64, dw: i64) -> ConvProblem {
        self.dilation = [dh, dw];
        self
    }

    /// The same with the given format.
    pub fn with_format(mut self, format: ConvFormat) -> ConvProblem {
        self.format = format;
        self
    }

    /// The same with the given storage type.
    pub fn with_type(mut self, ty: Scalar) -> ConvProblem {
        self.ty = ty;
        self
    }

    fn out(i: i64, k: i64, s: i64, p: i64, d: i64) -> i64 {
        // Sizes past i64 (from a command line) leave no room: the filter does not fit.
        let room = (|| {
            let span = (k - 1).checked_mul(d.checked_add(1)?)?.checked_add(1)?;
            i.checked_add(p.checked_mul(2)?)?.checked_sub(span)
        })();
        match room {
            Some(r) if r >= 0 && s > 0 => r / s + 1,
            _ => 0,
        }
    }

    /// Output height (0 when the filter does not fit).
    pub fn oh(&self) -> i64 {
        Self::out(self.ih, self.kh, self.stride[0], self.padding[0], self.dilation[0])
    }

    /// Output width (0 when the filter does not fit).
    pub fn ow(&self) -> i64 {
        Self::out(self.iw, self.kw, self.stride[1], self.padding[1], self.dilation[1])
    }

    /// The kernel's name: `conv_<nchw|nhwc>_<type>`.
    pub fn name(&self) -> String {
        let f = match self.format {
            ConvFormat::Nchw => "nchw",
            ConvFormat::Nhwc => "nhwc",
        };
        format!("conv_{f}_{}", self.ty)
    }

    /// The shapes of src (`mb, ic, ih, iw`), wei (`oc, ic, kh, kw`) and dst
    /// (`mb, oc, oh, ow`), logical order whatever the format.
    pub fn shapes(&self) -> [[i64; 4]; 3] {
        [
            [self.mb, self.ic, self.ih, self.iw],
            [self.oc, self.ic, self.kh, self.kw],
            [self.mb, self.oc, self.oh(), self.ow()],
        ]
    }

    /// The problem's views: src (mb, oh, ow: M; ic, kh, kw: K), wei (ic, kh, kw: K; oc: N)
    /// and dst (mb, oh, ow: M; oc: N).
    pub fn views(&self) -> Result<GemmViews, String> {
        let named = [
            ("mb", self.mb),
            ("ic", self.ic),
            ("ih", self.ih),
            ("iw", self.iw),
            ("oc", self.oc),
            ("kh", self.kh),
            ("kw", self.kw),
        ];
        if let Some((n, v)) = named.iter().find(|(_, v)| *v <= 0) {
            return Err(format!("convolution: {n} = {v}; sizes must be positive"));
        }
        let params =
            [("stride", self.stride), ("padding", self.padding), ("dilation", self.dilation)];
        let too_big =
            named.iter().copied().chain(params.iter().flat_map(|&(n, [h, w])| [(n, h), (n, w)]));
        if let Some((n, v)) = too_big.into_iter().find(|(_, v)| *v > crate::MAX_SIZE) {
            return Err(format!(
                "convolution: {n} = {v}; sizes must be at most {} (kernels index with 32-bit \
                 integers)",
                crate::MAX_SIZE
            ));
        }
        if self.stride.iter().any(|&s| s < 1) {
            return Err(format!("convolution: strides {:?} must be at least 1", self.stride));
        }
        if self.padding.iter().chain(&self.dilation).any(|&p| p < 0) {
            return Err("convolution: padding and dilation must not be negative".into());
        }
        let (oh, ow) = (self.oh(), self.ow());
        if oh == 0 || ow == 0 {
            return Err(format!(
                "convolution: the dilated {}x{} filter does not fit the padded {}x{} input",
                self.kh, self.kw, self.ih, self.iw
            ));
        }
        let (act, wei) = match self.format {
            ConvFormat::Nchw => ("NCHW", "OIHW"),
            ConvFormat::Nhwc => ("NHWC", "HWIO"),
        };
        let layout = |tag: &str, names: &str, dims: [i64; 4]| {
            Layout::parse_named(tag, names, self.ty, Some(&dims)).map_err(|e| e.to_string())
        };
        let [src_dims, wei_dims, dst_dims] = self.shapes();
        let src_l = layout(act, "nchw", src_dims)?;
        let wei_l = layout(wei, "oihw", wei_dims)?;
        let dst_l = layout(act, "nchw", dst_dims)?;
        let v = |n: &str, s: i64, k: DimKind| VDim::new(n, s, k);
        let mb = v("mb", self.mb, DimKind::M);
        let voh = v("oh", oh, DimKind::M);
        let vow = v("ow", ow, DimKind::M);
        let ic = v("ic", self.ic, DimKind::K);
        let kh = v("kh", self.kh, DimKind::K);
        let kw = v("kw", self.kw, DimKind::K);
        let oc = v("oc", self.oc, DimKind::N);
        let [sh, sw] = self.stride;
        let [ph, pw] = self.padding;
        let [dh, dw] = self.dilation;
        let tap = |o: &VDim, s: i64, k: &VDim, d: i64, p: i64| {
            let at = ix::add(&ix::mul(&o.var(), &ix::c(s)), &ix::mul(&k.var(), &ix::c(d + 1)));
            ix::sub(&at, &ix::c(p))
        };
        let ih = tap(&voh, sh, &kh, dh, ph);
        let iw = tap(&vow, sw, &kw, dw, pw);
        let src = View::new(
            Base::Layout(src_l),
            vec![mb.clone(), voh.clone(), vow.clone(), ic.clone(), kh.clone(), kw.clone()],
            vec![
                TDim::new("n", mb.var()),
                TDim::new("c", ic.var()),
                TDim::bounded("h", ih, self.ih),
                TDim::bounded("w", iw, self.iw),
            ],
        )?;
        let weights = View::new(
            Base::Layout(wei_l),
            vec![ic.clone(), kh.clone(), kw.clone(), oc.clone()],
            vec![
                TDim::new("o", oc.var()),
                TDim::new("i", ic.var()),
                TDim::new("h", kh.var()),
                TDim::new("w", kw.var()),
            ],
        )?;
        let dst = View::new(
            Base::Layout(dst_l),
            vec![mb.clone(), voh.clone(), vow.clone(), oc.clone()],
            vec![
                TDim::new("n", mb.var()),
                TDim::new("c", oc.var()),
                TDim::new("h", voh.var()),
                TDim::new("w", vow.var()),
            ],
        )?;
        Ok(GemmViews {
            name: self.name(),
            a: src,
            b: weights,
            c: dst,
            names: ["src".into(), "wei".into(), "dst".into()],
        })
    }

    /// Generates the kernel; parameters `(src, wei, dst, alpha: f32, beta: f32)`.
    pub fn generate(&self, cfg: &GemmConfig) -> Result<Generated, String> {
        if !matches!(self.ty, Scalar::F32 | Scalar::F16) {
            return Err(format!("convolution of {}: the generator supports f32 and f16", self.ty));
        }
        generate(&self.views()?, cfg)
    }
}
