//! Autotuning of tensor-core kernels (`kiln::generator::{TcGemmProblem, TcConvProblem}`):
//! the blockings [`kiln_gen::tc_tune`]'s model ranks first are timed on a CUDA device, the
//! fastest whose output is right is stored in the persistent cache under the problem's key,
//! and the next tuner takes it from there without timing, as [`crate::tune`] does for the
//! f32 kernels (same options, same cache, same device identity in the key).
//!
//! The key is the problem with its implicit GEMM sizes bucketed (each rounded up to a power
//! of two): `tc-gemm NT bf16->f32 m4096 n4096 k4096`, `tc-conv bf16->f16 c8 m.. n.. k..`
//! (`c8`: the input channels are a multiple of 8, which picks the gather's 16-byte copies).
//! The epilogue is not part of it: the blocking is chosen for the product.
//!
//! Only CUDA times tensor-core kernels: the cpu device does not lower matrix operations and
//! the interpreter is no timing device. Elsewhere, and with the search off (`KILN_TUNE=0`),
//! a stored winner is still used, else the model's first choice ([`heuristic`]).
//!
//! Before a candidate can win, its output on a small problem of the same kind (inputs of
//! small integers, where every sum is exact in any order) must be the interpreter's bits.

use std::sync::Arc;
use std::time::Instant;

use kiln_backends::options::BuildOptions;
use kiln_gen::tc_tune;
use kiln_gen::{ConvProblem, Epilogue, TcConfig, TcConvProblem, TcGemmProblem, TcGenerated};
use kiln_ir::launch::{Arg, Buffer};
use kiln_ir::Verified;
use kiln_runtime::cache::PersistentCache;
use kiln_runtime::device::ResidentBuffer;
use kiln_runtime::{Device, DeviceKind};

pub use crate::tune::WRONG_OUTPUT;
use crate::tune::{
    bucket, disk_key, first_checked, median_time, small_conv, TuneOptions, WARM_UP_S,
};
use kiln_gen::tuner::Target;

/// Generates a tensor-core problem's kernel for a blocking.
pub type TcGenerateFn<'a> = Box<dyn Fn(&TcConfig) -> Result<TcGenerated, String> + 'a>;

/// A tensor-core problem to tune: its cache key, implicit GEMM sizes and generators.
pub struct TcProblem<'a> {
    /// The problem with bucketed sizes (see the module docs).
    pub key: String,
    /// The implicit GEMM's M, N and K.
    pub mnk: [u64; 3],
    /// Generates the kernel (without epilogue) for a blocking.
    pub generate: TcGenerateFn<'a>,
    /// Generates the kernel of a small problem of the same kind: what a candidate's output
    /// is checked on.
    pub small: TcGenerateFn<'a>,
}

impl TcProblem<'static> {
    /// A tensor-core GEMM (its epilogue left out).
    pub fn gemm(p: &TcGemmProblem) -> TcProblem<'static> {
        let t = |b: bool| if b { 'T' } else { 'N' };
        let p = TcGemmProblem { epilogue: Epilogue::default(), ..p.clone() };
        let key = format!(
            "tc-gemm {}{} {}->{} m{} n{} k{}",
            t(p.trans_a),
            t(p.trans_b),
            p.ty,
            p.out,
            bucket(p.m as u64),
            bucket(p.n as u64),
            bucket(p.k as u64)
        );
        let small = TcGemmProblem { m: p.m.min(37), n: p.n.min(37), k: p.k.min(19), ..p.clone() };
        TcProblem {
            key,
            mnk: [p.m as u64, p.n as u64, p.k as u64],
            generate: Box::new(move |c| p.generate(c)),
            small: Box::new(move |c| small.generate(c)),
        }
    }

    /// A tensor-core convolution (its epilogue left out).
    pub fn conv(p: &TcConvProblem) -> TcProblem<'static> {
        let p = TcConvProblem { epilogue: Epilogue::default(), ..p.clone() };
        let g = p.gemm();
        let mnk = [g.m.max(0) as u64, g.n.max(0) as u64, g.k.max(0) as u64];
        let key = format!(
            "tc-conv {}->{} c{} m{} n{} k{}",
            p.ty,
            p.out,
            if p.geom.ic % 8 == 0 { 8 } else { 1 },
            bucket(mnk[0]),
            bucket(mnk[1]),
            bucket(mnk[2])
        );
        // The f32 tuner's cut-down geometry, with input channels that take the same path
        // (a multiple of 8, or not).
        let mut geom: ConvProblem = small_conv(&p.geom);
        geom.ic = if p.geom.ic % 8 == 0 { 8 } else { p.geom.ic % 8 };
        let small = TcConvProblem { geom, ..p.clone() };
        TcProblem {
            key,
            mnk,
            generate: Box::new(move |c| p.generate(c)),
            small: Box::new(move |c| small.generate(c)),
        }
    }
}

/// Where a tuned tensor-core blocking came from.
#[derive(Clone, Debug, PartialEq)]
pub enum TcHow {
    /// The persistent cache held a winner for the key: nothing was timed.
    Cached,
    /// Timed now (the model's best `max_candidates` that run), each with its median time in
    /// seconds; failures and wrong outputs are in `errors`. The winner was stored.
    Searched {
        /// Candidates and their median times, in the order timed (the model's).
        timings: Vec<(TcConfig, f64)>,
        /// Candidates that failed to generate, build or run, or gave wrong output.
        errors: Vec<(TcConfig, String)>,
    },
    /// The model's first choice, and why no search ran.
    Heuristic(String),
}

/// A tuned tensor-core blocking.
#[derive(Clone, Debug)]
pub struct TcTuned {
    /// The blocking.
    pub config: TcConfig,
    /// Where it came from.
    pub how: TcHow,
    /// The cache key it is (or would be) stored under.
    pub key: String,
}

/// The blocking chosen without timing: the model's first choice (the model assumes an
/// H100: tensor-core kernels are timed on CUDA only).
pub fn heuristic(problem: &TcProblem) -> TcConfig {
    tc_tune::first_choice(problem.mnk, &Target::h100())
}

/// The winner stored for `problem` on `dev` in `cache`, if any.
pub fn stored(problem: &TcProblem, dev: &dyn Device, cache: &PersistentCache) -> Option<TcConfig> {
    let bytes = cache.get(&disk_key(dev, &problem.key))?;
    String::from_utf8(bytes).ok()?.parse().ok()
}

/// Tunes `problem` on `dev`: the stored winner when there is one, else (on CUDA, with the
/// search on) a search that times the model's best candidates, else the model's first
/// choice.
pub fn tune_tc(
    problem: &TcProblem,
    dev: &dyn Device,
    opts: &TuneOptions,
) -> Result<TcTuned, String> {
    let repeats = opts.repeats.max(1);
    let why = if !opts.search {
        Some("the search is off (KILN_TUNE=0)".to_string())
    } else if dev.kind() != DeviceKind::Cuda {
        Some(format!("only CUDA times tensor-core kernels, not `{}`", dev.name()))
    } else {
        None
    };
    search_with(problem, dev, opts, why, &mut |c| time_one(problem, dev, c, repeats))
}

/// [`tune_tc`] with the timing given: `time` gives a candidate's time in seconds, and `why`,
/// when set, says why no search runs (the model's choice is then taken unless a winner is
/// stored). A search checks the fastest candidate's output on `dev` (then the next fastest,
/// if it is wrong) and stores the winner.
pub fn search_with(
    problem: &TcProblem,
    dev: &dyn Device,
    opts: &TuneOptions,
    why: Option<String>,
    time: &mut dyn FnMut(&TcConfig) -> Result<f64, String>,
) -> Result<TcTuned, String> {
    // A problem that cannot be generated at all is refused first, in the generator's words.
    let first = heuristic(problem);
    (problem.generate)(&first)?;
    let key = problem.key.clone();
    if let Some(config) = opts.cache.as_ref().and_then(|c| stored(problem, dev, c)) {
        return Ok(TcTuned { config, how: TcHow::Cached, key });
    }
    if let Some(why) = why {
        return Ok(TcTuned { config: first, how: TcHow::Heuristic(why), key });
    }
    let check = Check::new(problem, &first)
        .map_err(|e| format!("tuning `{key}`: cannot check candidates: {e}"))?;
    let (mut timings, mut errors) = (Vec::new(), Vec::new());
    // A candidate that fails (one the device cannot build or launch) does not take the
    // place of one that runs: the ranking is walked until `max_candidates` have been timed.
    for e in tc_tune::rank(problem.mnk, &Target::h100()) {
        if timings.len() >= opts.max_candidates.max(1) {
            break;
        }
        match time(&e.config) {
            Ok(t) => timings.push((e.config, t)),
            Err(why) => errors.push((e.config, why)),
        }
    }
    let mut order = timings.clone();
    order.sort_by(|a, b| a.1.total_cmp(&b.1));
    let config = first_checked(order, &mut timings, &mut errors, &key, dev, |c| {
        check.candidate(problem, dev, c)
    })?;
    if let Some(cache) = &opts.cache {
        cache.put(&disk_key(dev, &key), config.to_string().as_bytes());
    }
    Ok(TcTuned { config, how: TcHow::Searched { timings, errors }, key })
}

/// The small problem's inputs and what the interpreter computes from them.
struct Check {
    inputs: Vec<Buffer>,
    expected: Buffer,
}

impl Check {
    fn new(problem: &TcProblem, reference: &TcConfig) -> Result<Check, String> {
        let g = (problem.small)(reference)?;
        let inputs = inputs(&g, |i, b| ((i * (2 * b + 5) + b) % 7) as f32 - 3.0);
        let interp: Arc<dyn Device> =
            kiln_runtime::device::registry::open("interp", &Default::default())
                .map_err(|e| e.to_string())?;
        let mut out = inputs.clone();
        Loaded::new(&*interp, &g)?.run(&mut out)?;
        Ok(Check { inputs, expected: out.swap_remove(2) })
    }

    fn candidate(&self, problem: &TcProblem, dev: &dyn Device, c: &TcConfig) -> Result<(), String> {
        let g = (problem.small)(c)?;
        let mut out = self.inputs.clone();
        Loaded::new(dev, &g)?.run(&mut out)?;
        let (got, want) = (out[2].as_bytes(), self.expected.as_bytes());
        if got == want {
            return Ok(());
        }
        let size = self.expected.elem().size_bytes();
        let i = got.chunks(size).zip(want.chunks(size)).position(|(a, b)| a != b).unwrap_or(0);
        Err(format!(
            "{WRONG_OUTPUT}, dropped: on the check problem, element {i} of the output differs \
             from the interpreter's"
        ))
    }
}

/// The kernel's three buffers, element `i` of buffer `b` being `value(i, b)` in its type.
fn inputs(g: &TcGenerated, value: impl Fn(usize, usize) -> f32) -> Vec<Buffer> {
    (0..3)
        .map(|b| {
            let elem = g.kernel.params()[b].ty().elem().unwrap_or(kiln_ir::Scalar::F32);
            let mut buf = Buffer::zeroed(elem, g.buffer_elems[b].max(1));
            for i in 0..buf.len() {
                // Within the buffer, of its float type: cannot fail.
                let _ = buf.set(i, kiln_ir::Imm::float(elem, value(i, b) as f64));
            }
            buf
        })
        .collect()
}

/// A generated kernel built and loaded on a device.
struct Loaded<'d> {
    dev: &'d dyn Device,
    kernel: kiln_runtime::Handle,
    g: &'d TcGenerated,
}

const ARGS: [Arg; 3] = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)];

impl<'d> Loaded<'d> {
    fn new(dev: &'d dyn Device, g: &'d TcGenerated) -> Result<Loaded<'d>, String> {
        let module = Verified::new(kiln_ir::Module::new(vec![g.kernel.clone()]))
            .map_err(|e| format!("{e:?}"))?;
        let bin = dev.build(&module, &BuildOptions::parse("-O")?).map_err(|e| e.to_string())?;
        let program = dev.load(&bin).map_err(|e| e.to_string())?;
        let kernel = dev.kernel(&program, g.kernel.name()).map_err(|e| e.to_string())?;
        Ok(Loaded { dev, kernel, g })
    }

    fn run(&self, bufs: &mut [Buffer]) -> Result<(), String> {
        self.dev.run(&self.kernel, &self.g.range(), &ARGS, bufs).map_err(|e| e.to_string())
    }
}

/// The median time of `repeats` launches of `c`'s kernel on resident buffers of small
/// non-zero values, after launches for [`WARM_UP_S`] (see `crate::tune`).
fn time_one(
    problem: &TcProblem,
    dev: &dyn Device,
    c: &TcConfig,
    repeats: u32,
) -> Result<f64, String> {
    let g = (problem.generate)(c)?;
    let loaded = Loaded::new(dev, &g)?;
    let host = inputs(&g, |i, _| ((i * 7 + 3) % 13) as f32 * 0.25 - 1.5);
    let put = |b: &Buffer| -> Result<ResidentBuffer, String> {
        let mem = dev.alloc(b.as_bytes().len().max(1)).map_err(|e| e.to_string())?;
        mem.upload(b.as_bytes()).map_err(|e| e.to_string())?;
        Ok(ResidentBuffer { mem, elem: b.elem(), len: b.len() })
    };
    let resident = host.iter().map(put).collect::<Result<Vec<_>, String>>()?;
    let range = g.range();
    let mut run =
        || dev.run_resident(&loaded.kernel, &range, &ARGS, &resident).map_err(|e| e.to_string());
    let mut finish = || match dev.finish(None) {
        Ok(true) => Ok(()),
        Ok(false) => Err(format!("{}: the device did not finish", dev.name())),
        Err(e) => Err(e.to_string()),
    };
    let start = Instant::now();
    median_time(repeats, WARM_UP_S, &mut run, &mut finish, &mut || start.elapsed().as_secs_f64())
}
