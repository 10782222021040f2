//! Autotuning of generated kernels: time candidate blockings ([`GemmConfig::candidates`]) of
//! a GEMM or convolution on a device, keep the fastest in the persistent cache under the
//! problem's key, and let the next process take it from there without searching.
//!
//! The key is the problem with its sizes *bucketed* (each of M, N, K rounded up to a power
//! of two, transpositions, layout and type kept exactly) and the device's identity (its
//! name, driver version and kiln's codegen version, [`Device::identity`]). A blocking is
//! valid for every shape (edges are masked), so a winner serves its whole bucket.
//!
//! The search times each candidate's kernel on zero-filled buffers: one launch to warm up,
//! then the median of `repeats` launches. The interpreter is no timing device: on it, and
//! whenever the search is off (`KILN_TUNE=0`, [`Config::tune_disabled`]) with no stored
//! winner, the blocking is [`heuristic`]'s.
//!
//! ```no_run
//! use kiln::generator::GemmProblem;
//! use kiln::ir::Scalar;
//! use kiln::tune::{tune, Problem, TuneOptions};
//! let p = GemmProblem { m: 1024, n: 1024, k: 1024, trans_a: false, trans_b: false, ty: Scalar::F32 };
//! let dev = kiln::runtime::device::registry::open("cuda", &Default::default()).unwrap();
//! let tuned = tune(&Problem::gemm(&p), &*dev, &TuneOptions::from_config(&kiln::Config::from_env_lenient())).unwrap();
//! println!("{} ({:?})", tuned.config, tuned.how);
//! ```

use std::time::Instant;

use kiln_backends::options::BuildOptions;
use kiln_gen::{ConvProblem, DimKind, GemmConfig, GemmProblem, Generated};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{Scalar, Verified};
use kiln_runtime::cache::{DiskKey, PersistentCache};
use kiln_runtime::{Config, Device, DeviceKind};

/// Generates a problem's kernel for a blocking.
pub type GenerateFn<'a> = Box<dyn Fn(&GemmConfig) -> Result<Generated, String> + 'a>;

/// A problem to tune: its cache key and implicit GEMM sizes, and how to generate its kernel
/// for a blocking.
pub struct Problem<'a> {
    /// The problem with bucketed sizes, e.g. `gemm NN f32 m1024 n1024 k64`.
    pub key: String,
    /// The implicit GEMM's M, N and K (the candidates depend on them).
    pub mnk: [u64; 3],
    /// Generates the kernel for a blocking.
    pub generate: GenerateFn<'a>,
}

/// `x` rounded up to a power of two: the size buckets of tuning keys.
pub fn bucket(x: u64) -> u64 {
    x.max(1).next_power_of_two()
}

impl<'a> Problem<'a> {
    /// A GEMM.
    pub fn gemm(p: &'a GemmProblem) -> Problem<'a> {
        let t = |b: bool| if b { 'T' } else { 'N' };
        let key = format!(
            "gemm {}{} {} m{} n{} k{}",
            t(p.trans_a),
            t(p.trans_b),
            p.ty,
            bucket(p.m as u64),
            bucket(p.n as u64),
            bucket(p.k as u64)
        );
        Problem {
            key,
            mnk: [p.m as u64, p.n as u64, p.k as u64],
            generate: Box::new(move |c| p.generate(c)),
        }
    }

    /// A convolution, keyed by its layout, type and bucketed implicit GEMM sizes.
    pub fn conv(p: &'a ConvProblem) -> Result<Problem<'a>, String> {
        let v = p.views()?;
        let size = |view: &kiln_gen::View, k| {
            view.dims_of(k).iter().map(|d| d.size as u64).product::<u64>()
        };
        let mnk = [size(&v.a, DimKind::M), size(&v.b, DimKind::N), size(&v.a, DimKind::K)];
        let key = format!(
            "conv {:?} {} m{} n{} k{}",
            p.format,
            p.ty,
            bucket(mnk[0]),
            bucket(mnk[1]),
            bucket(mnk[2])
        );
        Ok(Problem { key, mnk, generate: Box::new(move |c| p.generate(c)) })
    }
}

/// How a search runs.
pub struct TuneOptions {
    /// Search at all; off, a stored winner or the heuristic is used (`KILN_TUNE=0`).
    pub search: bool,
    /// Where winners are kept; `None`: nowhere (every call searches).
    pub cache: Option<PersistentCache>,
    /// Most candidates timed: spread evenly over [`GemmConfig::candidates`]' list.
    pub max_candidates: usize,
    /// Timed launches per candidate (after one warm-up launch).
    pub repeats: u32,
}

impl TuneOptions {
    /// The settings `config` gives: search unless `KILN_TUNE=0`, winners in the on-disk
    /// cache at its root (whether or not programs are cached there), 24 candidates, 5
    /// launches each.
    pub fn from_config(config: &Config) -> TuneOptions {
        TuneOptions {
            search: !config.tune_disabled,
            // With no directory for it, a cache that is off and whose warning says why.
            cache: Some(config.persistent_cache().unwrap_or_else(|| {
                PersistentCache::unavailable(&config.cache_root().err().unwrap_or_default())
            })),
            max_candidates: 24,
            repeats: 5,
        }
    }
}

/// Where a tuned blocking came from.
#[derive(Clone, Debug, PartialEq)]
pub enum How {
    /// The persistent cache held a winner for the key: nothing was timed.
    Cached,
    /// Timed now; each candidate with its median launch time in seconds (failures are left
    /// out and reported in `errors`). The winner was stored.
    Searched {
        /// Candidates and their median times, in the order timed.
        timings: Vec<(GemmConfig, f64)>,
        /// Candidates that failed to generate, build or run, with why.
        errors: Vec<(GemmConfig, String)>,
    },
    /// [`heuristic`]'s choice, and why no search ran.
    Heuristic(String),
}

/// A tuned blocking.
#[derive(Clone, Debug)]
pub struct Tuned {
    /// The blocking.
    pub config: GemmConfig,
    /// Where it came from.
    pub how: How,
    /// The cache key it is (or would be) stored under.
    pub key: String,
}

/// The blocking chosen without timing: among the candidates, the one with the largest
/// work-group tile (`tile_m * tile_n`) that fits the problem (`tile_m <= M`, `tile_n <= N`),
/// preferring vector width 4 and then unrolling on ties; the first candidate if none fits.
pub fn heuristic(mnk: [u64; 3]) -> GemmConfig {
    let cands = GemmConfig::candidates(mnk[0], mnk[1], mnk[2]);
    let fits = |c: &&GemmConfig| c.tile_m() as u64 <= mnk[0] && c.tile_n() as u64 <= mnk[1];
    let score = |c: &GemmConfig| (c.tile_m() * c.tile_n(), c.vec == 4, c.unroll, c.slm_depth);
    cands.iter().filter(fits).max_by_key(|c| score(c)).copied().unwrap_or(cands[0])
}

fn disk_key(dev: &dyn Device, key: &str) -> DiskKey {
    DiskKey {
        device: dev.identity(),
        image: format!("kiln-tune/1 {key}").into_bytes(),
        spec_consts: Vec::new(),
        build_options: "tune".into(),
    }
}

/// Tunes `problem` on `dev`: the stored winner when there is one, else a search (stored),
/// else the heuristic (see the module docs).
pub fn tune(problem: &Problem, dev: &dyn Device, opts: &TuneOptions) -> Result<Tuned, String> {
    let key = problem.key.clone();
    let dk = disk_key(dev, &key);
    if let Some(cache) = &opts.cache {
        let stored = cache.get(&dk).and_then(|b| String::from_utf8(b).ok());
        // A record that does not parse (another version's) is searched again, not trusted.
        if let Some(config) = stored.and_then(|s| s.parse::<GemmConfig>().ok()) {
            return Ok(Tuned { config, how: How::Cached, key });
        }
    }
    let why = if !opts.search {
        Some("the search is off (KILN_TUNE=0)".to_string())
    } else if dev.kind() == DeviceKind::Interp {
        Some(format!("`{}` is the interpreter, not a timing device", dev.name()))
    } else {
        None
    };
    if let Some(why) = why {
        return Ok(Tuned { config: heuristic(problem.mnk), how: How::Heuristic(why), key });
    }
    let cands = GemmConfig::candidates(problem.mnk[0], problem.mnk[1], problem.mnk[2]);
    let n = opts.max_candidates.clamp(1, cands.len());
    // Evenly spread, the first and the last included.
    let picked: Vec<GemmConfig> =
        (0..n).map(|i| cands[if n == 1 { 0 } else { i * (cands.len() - 1) / (n - 1) }]).collect();
    let mut timings = Vec::new();
    let mut errors = Vec::new();
    for c in picked {
        match time_one(problem, dev, &c, opts.repeats.max(1)) {
            Ok(t) => timings.push((c, t)),
            Err(e) => errors.push((c, e)),
        }
    }
    let Some(&(config, _)) = timings.iter().min_by(|a, b| a.1.total_cmp(&b.1)) else {
        let first = errors.first().map(|(c, e)| format!("{c}: {e}")).unwrap_or_default();
        return Err(format!(
            "tuning `{key}` on {}: no candidate ran ({} failed; first: {first})",
            dev.name(),
            errors.len()
        ));
    };
    if let Some(cache) = &opts.cache {
        cache.put(&dk, config.to_string().as_bytes());
    }
    Ok(Tuned { config, how: How::Searched { timings, errors }, key })
}

/// The median time of `repeats` launches of `c`'s kernel (after one warm-up launch).
fn time_one(
    problem: &Problem,
    dev: &dyn Device,
    c: &GemmConfig,
    repeats: u32,
) -> Result<f64, String> {
    let g = (problem.generate)(c)?;
    let module = Verified::kernel(g.kernel.clone()).map_err(|e| format!("{e:?}"))?;
    let opts = BuildOptions::parse("-O")?;
    let bin = dev.build(&module, &opts).map_err(|e| e.to_string())?;
    let program = dev.load(&bin).map_err(|e| e.to_string())?;
    let kernel = dev.kernel(&program, g.kernel.name()).map_err(|e| e.to_string())?;
    let mut buffers: Vec<Buffer> = g
        .kernel
        .params()
        .iter()
        .take(3)
        .zip(g.buffer_elems)
        .map(|(p, n)| Buffer::zeroed(p.ty().elem().unwrap_or(Scalar::F32), n.max(1)))
        .collect();
    let args =
        [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(1.0f32), Arg::scalar(0.0f32)];
    let range = NdRange::new(&g.global).with_local(&g.local);
    let mut run = || dev.run(&kernel, &range, &args, &mut buffers).map_err(|e| e.to_string());
    run()?;
    let mut times = Vec::with_capacity(repeats as usize);
    for _ in 0..repeats {
        let t0 = Instant::now();
        run()?;
        times.push(t0.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}
