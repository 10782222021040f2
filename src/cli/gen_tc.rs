//! `kiln gen tc-gemm M N K ...`: print a tensor-core GEMM (kiln-gen's `tc`) as .kir, with a
//! comment saying what it computes, its buffers and its blocking; `--candidates` lists the
//! blockings a tuner would try instead.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use kiln::generator::{tc90, Epilogue, Tc90Config, TcConfig, TcGemmProblem};
use kiln::ir::{Module, Scalar};

use super::gen::{write_output, write_stdout};
use super::Error;

/// Input element types of tensor-core kernels.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub(super) enum InTy {
    F16,
    Bf16,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Arch {
    /// mma.sync, ldmatrix and cp.async (sm_80 and newer).
    #[value(name = "sm_80")]
    Sm80,
    /// wgmma, tensor copies and barrier objects (sm_90a: the H100).
    #[value(name = "sm_90")]
    Sm90,
}

/// Output element types of tensor-core kernels.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub(super) enum OutTy {
    F32,
    F16,
    Bf16,
}

impl InTy {
    pub(super) fn scalar(self) -> Scalar {
        match self {
            InTy::F16 => Scalar::F16,
            InTy::Bf16 => Scalar::BF16,
        }
    }
}

impl OutTy {
    pub(super) fn scalar(self) -> Scalar {
        match self {
            OutTy::F32 => Scalar::F32,
            OutTy::F16 => Scalar::F16,
            OutTy::Bf16 => Scalar::BF16,
        }
    }
}

/// The tensor-core blocking flags of `kiln gen tc-gemm` and `kiln gen tc-conv`.
#[derive(Args, Debug)]
pub(super) struct TcBlockArgs {
    /// Rows x columns of the output per work-group (default 128x128).
    #[arg(long, value_name = "MxN", value_parser = super::gen::pair)]
    pub(super) block: Option<(i64, i64)>,
    /// Warps along M x N (default 2x4).
    #[arg(long, value_name = "MxN", value_parser = super::gen::pair)]
    pub(super) warps: Option<(i64, i64)>,
    /// Reduction depth of a local-memory tile, a multiple of 16 (default 32).
    #[arg(long, value_name = "N")]
    pub(super) k_tile: Option<u32>,
    /// Local-memory tiles in flight: 2, 3 or 4 (default 2).
    #[arg(long, value_name = "N")]
    pub(super) stages: Option<u32>,
}

impl TcBlockArgs {
    /// The blocking these flags give, the defaults filling those left out.
    pub(super) fn config(&self) -> Result<TcConfig, Error> {
        let d = TcConfig::default();
        let u = |v: i64| u32::try_from(v).map_err(|_| Error::Message(format!("{v} is too large")));
        let (bm, bn) = self.block.unwrap_or((d.bm as i64, d.bn as i64));
        let (wm, wn) = self.warps.unwrap_or((d.warps_m as i64, d.warps_n as i64));
        let cfg = TcConfig {
            bm: u(bm)?,
            bn: u(bn)?,
            bk: self.k_tile.unwrap_or(d.bk),
            warps_m: u(wm)?,
            warps_n: u(wn)?,
            stages: self.stages.unwrap_or(d.stages),
        };
        cfg.validate().map_err(Error::Message)?;
        Ok(cfg)
    }
}

/// Arguments of `kiln gen tc-gemm`.
#[derive(Args, Debug)]
pub(super) struct TcGemmArgs {
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
    /// A's and B's element type.
    #[arg(long = "type", value_enum, default_value = "bf16")]
    ty: InTy,
    /// C's element type (rounded once from the f32 result).
    #[arg(long = "out", value_enum, default_value = "f32")]
    out: OutTy,
    /// Element-wise operations fused into the store, in order, comma-separated: bias (+ a
    /// per-column f32 vector), relu, gelu, scale (* an f32 scalar), add (+ an M x N tensor).
    #[arg(long, value_name = "OPS", default_value = "")]
    epilogue: String,
    #[command(flatten)]
    blocking: TcBlockArgs,
    /// Which tensor-core tier the kernel uses: sm_80 (default) or sm_90 (warpgroup
    /// operations; block 128xN with N 64, 128 or 256, stored rows a multiple of 8 elements,
    /// emitted for sm_90a).
    #[arg(long, value_enum, default_value = "sm_80")]
    arch: Arch,
    /// sm_90 only: persistent tiles, at most G work-groups (default 132, the H100's and
    /// H200's multiprocessors; as few as need no more rounds of tiles), each computing every
    /// n-th tile for n work-groups; 0: one work-group per tile.
    #[arg(long, value_name = "G")]
    persistent: Option<u32>,
    /// sm_90 only: the producer warpgroup gives registers to the consumers (setmaxnreg 40 and
    /// 232).
    #[arg(long)]
    setmaxnreg: bool,
    /// Print the blockings a tuner would try for this problem, one per line, instead.
    #[arg(long)]
    candidates: bool,
    /// Write the kernel here instead of standard output.
    #[arg(short, long, value_name = "PATH")]
    pub(super) output: Option<PathBuf>,
}

impl TcGemmArgs {
    /// The problem these arguments describe.
    pub(super) fn problem(&self) -> Result<TcGemmProblem, Error> {
        Ok(TcGemmProblem {
            m: self.m,
            n: self.n,
            k: self.k,
            trans_a: self.trans_a,
            trans_b: self.trans_b,
            ty: self.ty.scalar(),
            out: self.out.scalar(),
            epilogue: Epilogue::parse(&self.epilogue).map_err(Error::Message)?,
        })
    }

    fn config90(&self) -> Result<Tc90Config, Error> {
        let d = Tc90Config::default();
        if self.blocking.warps.is_some() || self.blocking.k_tile.is_some() || self.candidates {
            return Err(Error::Message(
                "--arch sm_90 takes no --warps, --k-tile or --candidates: its work-group is \
                 a producer and two consumer warpgroups, its k-tile 64"
                    .into(),
            ));
        }
        let (bm, bn) = self.blocking.block.unwrap_or((tc90::BM as i64, d.bn as i64));
        if bm != tc90::BM as i64 {
            return Err(Error::Message(format!(
                "--arch sm_90 blocks have {} rows (two warpgroups of 64), not {bm}",
                tc90::BM
            )));
        }
        let cfg = Tc90Config {
            bn: u32::try_from(bn).map_err(|_| Error::Message(format!("{bn} is too large")))?,
            stages: self.blocking.stages.unwrap_or(d.stages),
            persistent: self.persistent.unwrap_or(d.persistent),
            setmaxnreg: self.setmaxnreg,
        };
        cfg.validate().map_err(Error::Message)?;
        Ok(cfg)
    }

    fn config(&self) -> Result<TcConfig, Error> {
        self.blocking.config()
    }
}

/// Runs `kiln gen tc-gemm`.
pub(super) fn main(a: &TcGemmArgs) -> Result<(), Error> {
    let p = a.problem()?;
    p.validate().map_err(Error::Message)?;
    if a.candidates && a.arch == Arch::Sm80 {
        let text: String = TcConfig::candidates(p.m as u64, p.n as u64, p.k as u64)
            .iter()
            .map(|c| format!("{c}\n"))
            .collect();
        return write_stdout(&text);
    }
    let (g, cfg) = if a.arch == Arch::Sm90 {
        let cfg = a.config90()?;
        (tc90::generate(&p, &cfg).map_err(Error::Message)?, cfg.to_string())
    } else {
        if a.persistent.is_some() || a.setmaxnreg {
            return Err(Error::Message(
                "--persistent and --setmaxnreg are options of the sm_90 kernel (--arch sm_90)"
                    .into(),
            ));
        }
        let cfg = a.config()?;
        (p.generate(&cfg).map_err(Error::Message)?, cfg.to_string())
    };
    let extra: Vec<String> =
        p.epilogue.params(p.out).iter().map(|v| format!("{}: {}", v.name(), v.ty())).collect();
    let range = g.range();
    let text = format!(
        "// Generated by kiln gen tc-gemm: C = {}({}·{}), M = {}, N = {}, K = {}, row-major {} \
         inputs, f32 accumulation, {} output.\n\
         // Buffers: a {}, b {}, c {} elements{}{}.\n\
         // Blocking: {cfg}; launch: global {:?}, local {:?} (#nd_range).\n{}",
        if p.epilogue.0.is_empty() { String::new() } else { format!("[{}]", p.epilogue) },
        if p.trans_a { "A^T" } else { "A" },
        if p.trans_b { "B^T" } else { "B" },
        p.m,
        p.n,
        p.k,
        p.ty,
        p.out,
        g.buffer_elems[0],
        g.buffer_elems[1],
        g.buffer_elems[2],
        if extra.is_empty() { "" } else { "; epilogue parameters " },
        extra.join(", "),
        &range.global[..range.dims],
        range.local.map(|l| l[..range.dims].to_vec()).unwrap_or_default(),
        Module::new(vec![g.kernel])
    );
    write_output(a.output.as_ref(), &text)
}
