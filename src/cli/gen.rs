//! `kiln gen gemm|conv ...`: print a generated kernel (kiln-gen) as .kir, with a comment
//! saying what it computes, the buffer sizes and the blocking; `--candidates` lists the
//! configurations a tuner would try instead. Without blocking flags the blocking is the
//! winner `kiln tune` stored for the device, else the tuner's model's first choice for it
//! (standard error says which).

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use kiln::generator::{BatchedGemm, ConvFormat, ConvProblem, GemmConfig, GemmProblem, Generated};
use kiln::ir::{Module, Scalar};
use kiln::runtime::device::registry::{self, OpenOptions};
use kiln::tune::{self, TuneOptions};

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
    /// Tensor-core GEMM: f16/bf16 inputs, f32 accumulation, fused element-wise epilogue.
    TcGemm(super::gen_tc::TcGemmArgs),
    /// Tensor-core convolution: NHWC activations, KRSC filters, f16/bf16, f32 accumulation.
    TcConv(super::gen_tc_conv::TcConvArgs),
    /// Attention in one kernel: Q·K^T, online softmax, ·V on matrix operations (bf16/f16).
    TcAttn(super::gen_tc_attn::TcAttnArgs),
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
    /// A batch of N independent GEMMs of this shape in one launch, each operand's matrices
    /// stored one after another (the blocking is chosen for the whole batch, whose
    /// work-groups fill the device together).
    #[arg(long, value_name = "N")]
    batch: Option<i64>,
    #[command(flatten)]
    common: Common,
}

/// A convolution's geometry on the command line (`kiln gen conv` and `kiln gen tc-conv`).
#[derive(Args, Debug)]
pub(super) struct ConvGeomArgs {
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
}

impl ConvGeomArgs {
    /// The convolution of this geometry (ConvProblem's defaults otherwise).
    pub(super) fn problem(&self) -> ConvProblem {
        let c = self;
        ConvProblem::new(c.mb, c.ic, c.input.0, c.input.1, c.oc, c.kernel.0, c.kernel.1)
            .with_stride(c.stride.0, c.stride.1)
            .with_padding(c.pad.0, c.pad.1)
            .with_dilation(c.dilation.0, c.dilation.1)
    }
}

#[derive(Args, Debug)]
pub(super) struct ConvArgs {
    #[command(flatten)]
    geom: ConvGeomArgs,
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
    /// Work-items of a work-group along M x N (default 8x8 when another blocking flag is
    /// given; with none, the stored winner or the model's choice for `--device`).
    #[arg(long, value_name = "MxN", value_parser = pair)]
    wg: Option<(i64, i64)>,
    /// Register block per work-item, M x N (default 2x2).
    #[arg(long, value_name = "MxN", value_parser = pair)]
    tile: Option<(i64, i64)>,
    /// Reduction depth of a local-memory tile (default 8).
    #[arg(long, value_name = "N")]
    k_tile: Option<u32>,
    /// Local-memory buffers per operand: 1, 2 (double buffering, the default) or 3 (triple).
    #[arg(long, value_name = "N")]
    slm: Option<u32>,
    /// Fully unroll the constant-trip inner loops.
    #[arg(long)]
    unroll: bool,
    /// Vector width of local-memory reads, tile copies and C's stores: 1 (default), 2, 4 or 8.
    #[arg(long, value_name = "N")]
    vec: Option<u32>,
    /// Split-K: cut the reduction into at most N slices (1, the default: no split); the
    /// output then holds two kernels, the partial products and their ordered sum.
    #[arg(long, value_name = "N")]
    split_k: Option<u32>,
    /// Without blocking flags: the device whose stored winner (`kiln tune`) is used, and whose
    /// model ranks the blockings otherwise (default `cpu`).
    #[arg(long, value_name = "DEVICE")]
    device: Option<String>,
    /// Print the configurations a tuner would try for this problem, one per line, instead.
    #[arg(long)]
    candidates: bool,
    /// Write the kernel here instead of standard output.
    #[arg(short, long, value_name = "PATH")]
    output: Option<PathBuf>,
}

/// `AxB` with positive numbers that fit a u32 (or 0, for padding and dilation).
pub(super) fn pair(s: &str) -> Result<(i64, i64), String> {
    let bad = || format!("`{s}` is not of the form AxB (e.g. 3x3)");
    let (a, b) = s.split_once('x').ok_or_else(bad)?;
    let n = |t: &str| t.parse::<u32>().map(i64::from).map_err(|_| bad());
    Ok((n(a)?, n(b)?))
}

impl Common {
    /// The blocking the flags give, the defaults filling those left out; `None` when no
    /// blocking flag is given.
    fn config(&self) -> Result<Option<GemmConfig>, Error> {
        let given = self.wg.is_some()
            || self.tile.is_some()
            || self.k_tile.is_some()
            || self.slm.is_some()
            || self.unroll
            || self.vec.is_some()
            || self.split_k.is_some();
        if !given {
            return Ok(None);
        }
        let d = GemmConfig::default();
        let u = |v: i64| u32::try_from(v).map_err(|_| Error::Message(format!("{v} is too large")));
        let (wg, tile) = (self.wg.unwrap_or((8, 8)), self.tile.unwrap_or((2, 2)));
        let cfg = GemmConfig {
            wg_m: u(wg.0)?,
            wg_n: u(wg.1)?,
            tm: u(tile.0)?,
            tn: u(tile.1)?,
            k_tile: self.k_tile.unwrap_or(d.k_tile),
            slm_depth: self.slm.unwrap_or(d.slm_depth),
            unroll: self.unroll,
            vec: self.vec.unwrap_or(d.vec),
            split_k: self.split_k.unwrap_or(d.split_k),
        };
        cfg.validate().map_err(Error::Message)?;
        Ok(Some(cfg))
    }

    /// The blocking for `problem`: the flags', else the winner stored for `--device`, else
    /// the model's first choice for it; standard error says which of the last two.
    fn blocking(&self, problem: &kiln::tune::Problem) -> Result<GemmConfig, Error> {
        if let Some(cfg) = self.config()? {
            return Ok(cfg);
        }
        let dev = match registry::open(
            self.device.as_deref().unwrap_or("cpu"),
            &OpenOptions::default(),
        ) {
            Ok(dev) => dev,
            // No cpu device on this host and none asked for: the cpu model, nothing stored.
            Err(e) if self.device.is_none() => {
                let target = tune::Target::cpu(1);
                let cfg = tune::heuristic(problem.dims(), &target);
                eprintln!("kiln: gen: blocking {cfg}: the model's first choice for the cpu ({e})");
                return Ok(cfg);
            }
            Err(e) => return Err(Error::Message(e.to_string())),
        };
        let cache = TuneOptions::from_config(super::config()).cache;
        let found = cache.as_ref().and_then(|c| tune::stored(problem, &*dev, c));
        for w in cache.iter().flat_map(|c| c.warnings()) {
            eprintln!("kiln: warning: {w}");
        }
        let cfg = match found {
            Some(cfg) => {
                eprintln!(
                    "kiln: gen: blocking {cfg}: the winner stored for `{}` on {}",
                    problem.key,
                    dev.name()
                );
                cfg
            }
            None => {
                let target = tune::target(&*dev);
                let cfg = tune::heuristic(problem.dims(), &target);
                eprintln!(
                    "kiln: gen: blocking {cfg}: the model's first choice for {} ({}; no winner \
                     stored for `{}`)",
                    dev.name(),
                    target.name,
                    problem.key
                );
                cfg
            }
        };
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

    /// The batched problem with `--batch`.
    pub(super) fn batched(&self) -> Option<BatchedGemm> {
        self.batch.map(|b| self.problem().batched(b))
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
        c.geom
            .problem()
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
    let (cfg, generated, what) = match &a.what {
        What::TcGemm(t) => return super::gen_tc::main(t),
        What::TcConv(t) => return super::gen_tc_conv::main(t),
        What::TcAttn(t) => return super::gen_tc_attn::main(t),
        What::Gemm(g) => {
            let p = g.problem();
            if g.common.candidates {
                p.views().map_err(Error::Message)?;
                return candidates(p.m as u64, p.n as u64, p.k as u64);
            }
            let mut what = format!(
                "C = alpha * {}·{} + beta * C, M = {}, N = {}, K = {}, row-major {}",
                if p.trans_a { "A^T" } else { "A" },
                if p.trans_b { "B^T" } else { "B" },
                p.m,
                p.n,
                p.k,
                p.ty
            );
            p.views().map_err(Error::Message)?;
            match g.batched() {
                Some(bp) => {
                    bp.views().map_err(Error::Message)?;
                    what = format!(
                        "a batch of {} GEMMs (dimension 2 of the launch), each {what}; matrix i \
                         of a, b and c at element i * {}, i * {}, i * {}",
                        bp.batch, bp.strides[0], bp.strides[1], bp.strides[2]
                    );
                    let cfg = g.common.blocking(&tune::Problem::batched_gemm(&bp))?;
                    (cfg, bp.generate(&cfg), what)
                }
                None => {
                    let cfg = g.common.blocking(&tune::Problem::gemm(&p))?;
                    (cfg, p.generate(&cfg), what)
                }
            }
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
            let cfg = c.common.blocking(&tune::Problem::conv(&p).map_err(Error::Message)?)?;
            (cfg, p.generate(&cfg), what)
        }
    };
    let output = match &a.what {
        What::Gemm(g) => g.output(),
        What::Conv(c) => c.output(),
        What::TcGemm(t) => t.output.as_ref(),
        What::TcConv(t) => t.output.as_ref(),
        What::TcAttn(t) => t.output.as_ref(),
    };
    let g = generated.map_err(Error::Message)?;
    let text = render(&g, &what, &cfg);
    write_output(output, &text)
}

fn candidates(m: u64, n: u64, k: u64) -> Result<(), Error> {
    let text: String = GemmConfig::candidates(m, n, k).iter().map(|c| format!("{c}\n")).collect();
    write_stdout(&text)
}

/// Writes `text` to the file `output` (`-o`), else to standard output.
pub(super) fn write_output(output: Option<&PathBuf>, text: &str) -> Result<(), Error> {
    match output {
        Some(path) => std::fs::write(path, text)
            .map_err(|e| Error::Message(format!("cannot write `{}`: {e}", path.display()))),
        None => write_stdout(text),
    }
}

/// Writes to standard output; a closed pipe (`kiln gen ... | head`) is not an error.
pub(super) fn write_stdout(text: &str) -> Result<(), Error> {
    out!("{text}");
    Ok(())
}

/// The kernel as a .kir module after a comment header (kept by `kiln fmt`).
pub(super) fn render(g: &Generated, what: &str, cfg: &GemmConfig) -> String {
    // C is the third parameter, or the reduction's second with split-K.
    let c_param = match &g.split {
        Some(s) => &s.reduce.params()[1],
        None => &g.kernel.params()[2],
    };
    let names: Vec<String> = [&g.kernel.params()[0], &g.kernel.params()[1], c_param]
        .map(|p| p.name().to_string())
        .into();
    let [ea, eb, ec] = g.buffer_elems;
    let range = g.range();
    let mut kernels = vec![g.kernel.clone()];
    let mut split = String::new();
    if let Some(s) = &g.split {
        kernels.push(s.reduce.clone());
        split = format!(
            "// Split-K into {} slices: run `{}` (a, b, w) with w of {} f32 elements, then `{}` \
             (w, c, alpha, beta), each over its #nd_range.\n",
            s.slices,
            g.kernel.name(),
            s.workspace_elems,
            s.reduce.name()
        );
    }
    format!(
        "// Generated by kiln gen: {what}.\n\
         // Buffers: {} {ea}, {} {eb}, {} {ec} elements; scalars alpha, beta (f32).\n\
         // Blocking: {cfg}; launch: global {:?}, local {:?} (#nd_range).\n{split}{}",
        names[0],
        names[1],
        names[2],
        &range.global[..range.dims],
        range.local.map(|l| l[..range.dims].to_vec()).unwrap_or_default(),
        Module::new(kernels)
    )
}
