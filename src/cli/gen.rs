//! `kiln gen gemm|conv ...`: print a generated kernel (kiln-gen) as .kir, with a comment
//! saying what it computes, the buffer sizes and the blocking; `--candidates` lists the
//! configurations a tuner would try instead.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use kiln::generator::{ConvFormat, ConvProblem, GemmConfig, GemmProblem, Generated};
use kiln::ir::{Module, Scalar};

use super::Error;

/// Arguments of `kiln gen`.
#[derive(Args, Debug)]
pub struct GenArgs {
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand, Debug)]
pub(super) enum What {
    /// C = alpha * op(A) · op(B) + beta * C, row-major (A is M x K, B is K x N).
    Gemm(GemmArgs),
    /// 2-D convolution forward as an implicit GEMM (M = mb·oh·ow, N = oc, K = ic·kh·kw).
    Conv(ConvArgs),
}

#[derive(Args, Debug)]
pub(super) struct GemmArgs {
    /// Rows of C.
    m: i64,
    /// Columns of C.
    n: i64,
    /// The reduction size.
    k: i64,
    /// A is stored transposed (K x M).
    #[arg(long)]
    trans_a: bool,
    /// B is stored transposed (N x K).
    #[arg(long)]
    trans_b: bool,
    #[command(flatten)]
    common: Common,
}

#[derive(Args, Debug)]
pub(super) struct ConvArgs {
    /// Batch size.
    #[arg(long, value_name = "N")]
    mb: i64,
    /// Input channels.
    #[arg(long, value_name = "N")]
    ic: i64,
    /// Output channels.
    #[arg(long, value_name = "N")]
    oc: i64,
    /// Input height x width.
    #[arg(long, value_name = "HxW", value_parser = pair)]
    input: (i64, i64),
    /// Filter height x width.
    #[arg(long, value_name = "HxW", value_parser = pair)]
    kernel: (i64, i64),
    /// Strides, height x width.
    #[arg(long, value_name = "HxW", value_parser = pair, default_value = "1x1")]
    stride: (i64, i64),
    /// Padding on each side, height x width.
    #[arg(long, value_name = "HxW", value_parser = pair, default_value = "0x0")]
    pad: (i64, i64),
    /// Dilation, height x width (oneDNN's convention: 0 is a dense filter).
    #[arg(long, value_name = "HxW", value_parser = pair, default_value = "0x0")]
    dilation: (i64, i64),
    /// Layouts: `nchw` (OIHW weights) or `nhwc` (HWIO weights).
    #[arg(long, value_enum, default_value = "nchw")]
    format: Format,
    #[command(flatten)]
    common: Common,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Format {
    Nchw,
    Nhwc,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Ty {
    F32,
    F16,
}

#[derive(Args, Debug)]
struct Common {
    /// Storage type (f16 is storage only: the kernel accumulates in f32).
    #[arg(long = "type", value_enum, default_value = "f32")]
    ty: Ty,
    /// Work-items of a work-group along M x N.
    #[arg(long, value_name = "MxN", value_parser = pair, default_value = "8x8")]
    wg: (i64, i64),
    /// Register block per work-item, M x N.
    #[arg(long, value_name = "MxN", value_parser = pair, default_value = "2x2")]
    tile: (i64, i64),
    /// Reduction depth of a local-memory tile.
    #[arg(long, value_name = "N", default_value_t = 8)]
    k_tile: u32,
    /// Local-memory buffers per operand: 1, 2 (double buffering) or 3 (triple).
    #[arg(long, value_name = "N", default_value_t = 2)]
    slm: u32,
    /// Fully unroll the constant-trip inner loops.
    #[arg(long)]
    unroll: bool,
    /// Vector width of local-memory reads, tile copies and C's stores: 1, 2, 4 or 8.
    #[arg(long, value_name = "N", default_value_t = 1)]
    vec: u32,
    /// Print the configurations a tuner would try for this problem, one per line, instead.
    #[arg(long)]
    candidates: bool,
    /// Write the kernel here instead of standard output.
    #[arg(short, long, value_name = "PATH")]
    output: Option<PathBuf>,
}

/// `AxB` with positive numbers that fit a u32 (or 0, for padding and dilation).
fn pair(s: &str) -> Result<(i64, i64), String> {
    let bad = || format!("`{s}` is not of the form AxB (e.g. 3x3)");
    let (a, b) = s.split_once('x').ok_or_else(bad)?;
    let n = |t: &str| t.parse::<u32>().map(i64::from).map_err(|_| bad());
    Ok((n(a)?, n(b)?))
}

impl Common {
    fn config(&self) -> Result<GemmConfig, Error> {
        let u = |v: i64| u32::try_from(v).map_err(|_| Error::Message(format!("{v} is too large")));
        let cfg = GemmConfig {
            wg_m: u(self.wg.0)?,
            wg_n: u(self.wg.1)?,
            tm: u(self.tile.0)?,
            tn: u(self.tile.1)?,
            k_tile: self.k_tile,
            slm_depth: self.slm,
            unroll: self.unroll,
            vec: self.vec,
        };
        cfg.validate().map_err(Error::Message)?;
        Ok(cfg)
    }

    fn scalar(&self) -> Scalar {
        match self.ty {
            Ty::F32 => Scalar::F32,
            Ty::F16 => Scalar::F16,
        }
    }
}

impl GemmArgs {
    /// The problem these arguments describe.
    pub(super) fn problem(&self) -> GemmProblem {
        GemmProblem {
            m: self.m,
            n: self.n,
            k: self.k,
            trans_a: self.trans_a,
            trans_b: self.trans_b,
            ty: self.common.scalar(),
        }
    }

    /// Where to write the kernel (`-o`).
    pub(super) fn output(&self) -> Option<&PathBuf> {
        self.common.output.as_ref()
    }
}

impl ConvArgs {
    /// The problem these arguments describe.
    pub(super) fn problem(&self) -> ConvProblem {
        let c = self;
        ConvProblem::new(c.mb, c.ic, c.input.0, c.input.1, c.oc, c.kernel.0, c.kernel.1)
            .with_stride(c.stride.0, c.stride.1)
            .with_padding(c.pad.0, c.pad.1)
            .with_dilation(c.dilation.0, c.dilation.1)
            .with_format(match c.format {
                Format::Nchw => ConvFormat::Nchw,
                Format::Nhwc => ConvFormat::Nhwc,
            })
            .with_type(c.common.scalar())
    }

    /// Where to write the kernel (`-o`).
    pub(super) fn output(&self) -> Option<&PathBuf> {
        self.common.output.as_ref()
    }
}

/// Runs `kiln gen`.
pub fn main(a: &GenArgs) -> Result<(), Error> {
    let (common, generated, what) = match &a.what {
        What::Gemm(g) => {
            let p = g.problem();
            if g.common.candidates {
                p.views().map_err(Error::Message)?;
                return candidates(p.m as u64, p.n as u64, p.k as u64);
            }
            let what = format!(
                "C = alpha * {}·{} + beta * C, M = {}, N = {}, K = {}, row-major {}",
                if p.trans_a { "A^T" } else { "A" },
                if p.trans_b { "B^T" } else { "B" },
                p.m,
                p.n,
                p.k,
                p.ty
            );
            (&g.common, p.generate(&g.common.config()?), what)
        }
        What::Conv(c) => {
            let p = c.problem();
            if c.common.candidates {
                let views = p.views().map_err(Error::Message)?;
                let size = |v: &kiln::generator::View, k| {
                    v.dims_of(k).iter().map(|d| d.size as u64).product::<u64>()
                };
                use kiln::generator::DimKind::{K, M, N};
                return candidates(size(&views.a, M), size(&views.b, N), size(&views.a, K));
            }
            let what = format!(
                "convolution {:?} {}: src {:?}, wei {:?}, dst {:?} (logical n,c,h,w / o,i,h,w)",
                c.format,
                p.ty,
                p.shapes()[0],
                p.shapes()[1],
                p.shapes()[2]
            );
            (&c.common, p.generate(&c.common.config()?), what)
        }
    };
    let g = generated.map_err(Error::Message)?;
    let text = render(&g, &what, &common.config()?);
    match &common.output {
        Some(path) => std::fs::write(path, text)
            .map_err(|e| Error::Message(format!("cannot write `{}`: {e}", path.display()))),
        None => write_stdout(&text),
    }
}

fn candidates(m: u64, n: u64, k: u64) -> Result<(), Error> {
    let text: String = GemmConfig::candidates(m, n, k).iter().map(|c| format!("{c}\n")).collect();
    write_stdout(&text)
}

/// Writes to standard output; a closed pipe (`kiln gen ... | head`) is not an error.
pub(super) fn write_stdout(text: &str) -> Result<(), Error> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Error::Message(format!("cannot write to standard output: {e}")))
        }
        _ => Ok(()),
    }
}

/// The kernel as a .kir module after a comment header (kept by `kiln fmt`).
pub(super) fn render(g: &Generated, what: &str, cfg: &GemmConfig) -> String {
    let names: Vec<String> =
        g.kernel.params().iter().take(3).map(|p| p.name().to_string()).collect();
    let [ea, eb, ec] = g.buffer_elems;
    format!(
        "// Generated by kiln gen: {what}.\n\
         // Buffers: {} {ea}, {} {eb}, {} {ec} elements; scalars alpha, beta (f32).\n\
         // Blocking: {cfg}; launch: global {:?}, local {:?} (#nd_range).\n{}",
        names[0],
        names[1],
        names[2],
        g.global,
        g.local,
        Module::new(vec![g.kernel.clone()])
    )
}
