//! Autotuning of generated kernels: time blockings of a GEMM or convolution on a device,
//! chosen by [`kiln_gen::tuner`]'s model and search (the default, the target's seeds and the
//! model's best, then the neighbours of the fastest), keep the winner in the persistent
//! cache under the problem's key, and let the next process take it from there without
//! searching.
//!
//! The key is the problem with its sizes *bucketed* (each of M, N, K rounded up to a power
//! of two, transpositions, layout and type kept exactly) and the device's identity (its
//! name, driver version and kiln's codegen version, [`Device::identity`]). A blocking is
//! valid for every shape (edges are masked), so a winner serves its whole bucket.
//!
//! Before a candidate can win its output is checked (the search's winner first, then the
//! fastest of the others if it fails): it runs on the device for a small
//! problem of the same kind ([`Problem::small`]: the same transpositions or layout and type,
//! sizes cut to a few dozen) with inputs of small integers, where every blocking's sums are
//! exact, and must give the interpreter's bits for a reference blocking. A candidate that
//! gives other bits (a miscompiled blocking) is dropped from the timings and reported in
//! [`How::Searched`]'s `errors`, so it can never win and be stored.
//!
//! The search ([`tuner::search_with`]) times the default first, announces the candidates it
//! times next, and those are generated here and built on several threads at once; each is
//! timed on one set of buffers made once per search and filled with pseudo-random values
//! (zeros, or values of few mantissa bits, would let a GPU's clocks boost past what real data
//! gets): launches for 50 ms (at least one) to warm up, then the median of `repeats`
//! samples (a split-K candidate's two kernels together), each a launch, or for a kernel
//! shorter than a millisecond a series of launches, waited for until the device is done (a
//! launch on a GPU returns once submitted). The fastest few and the default are
//! then timed again in interleaved rounds ([`tuner::confirm`]), and the winner is the
//! fastest unless the default timed within [`tuner::DEFAULT_MARGIN`] of it
//! ([`tuner::winner`]). The interpreter is no timing device: on it, and whenever the search
//! is off (`KILN_TUNE=0`, [`Config::tune_disabled`]) with no stored winner, the blocking is
//! [`heuristic`]'s: the model's first choice for the device's [`target`].
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

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use kiln_backends::options::BuildOptions;
pub use kiln_gen::tuner::Target;
use kiln_gen::tuner::{self, Dims};
use kiln_gen::{BatchedGemm, ConvProblem, DimKind, GemmConfig, GemmProblem, Generated};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{Scalar, Verified};
use kiln_runtime::cache::{DiskKey, PersistentCache};
use kiln_runtime::device::ResidentBuffer;
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
    /// How many such GEMMs one launch runs (1 but for a batched GEMM).
    pub batch: u64,
    /// Both operands are stored contiguous along K (a GEMM of row-major A and transposed B;
    /// see [`Dims::k_major`]).
    pub k_major: bool,
    /// A is transposed and B is not (see [`Dims::mn_major`]).
    pub mn_major: bool,
    /// Generates the kernel for a blocking.
    pub generate: GenerateFn<'a>,
    /// Generates the kernel of a small problem of the same kind for a blocking: what each
    /// candidate's output is checked on (see the module docs).
    pub small: GenerateFn<'a>,
}

/// The largest implicit GEMM sizes M, N and K of the problem a candidate is checked on:
/// small enough for the interpreter, odd so that partial tiles are checked too.
const SMALL_MNK: [i64; 3] = [37, 37, 19];

/// `x` rounded up to a power of two: the size buckets of tuning keys.
pub fn bucket(x: u64) -> u64 {
    x.max(1).next_power_of_two()
}

impl<'a> Problem<'a> {
    /// The sizes the model sees: [`Problem::mnk`] and [`Problem::batch`].
    pub fn dims(&self) -> Dims {
        Dims { mnk: self.mnk, batch: self.batch, k_major: self.k_major, mn_major: self.mn_major }
    }

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
        let small = GemmProblem {
            m: p.m.min(SMALL_MNK[0]),
            n: p.n.min(SMALL_MNK[1]),
            k: p.k.min(SMALL_MNK[2]),
            ..*p
        };
        Problem {
            key,
            mnk: [p.m as u64, p.n as u64, p.k as u64],
            batch: 1,
            k_major: !p.trans_a && p.trans_b,
            mn_major: p.trans_a && !p.trans_b,
            generate: Box::new(move |c| p.generate(c)),
            small: Box::new(move |c| small.generate(c)),
        }
    }

    /// A batched GEMM, keyed like [`Problem::gemm`] with the bucketed batch size; the model
    /// counts the work-groups of the whole batch.
    pub fn batched_gemm(p: &'a BatchedGemm) -> Problem<'a> {
        let one = Problem::gemm(&p.gemm);
        let key = one.key.replacen(" m", &format!(" b{} m", bucket(p.batch as u64)), 1);
        let small_gemm = GemmProblem {
            m: p.gemm.m.min(SMALL_MNK[0]),
            n: p.gemm.n.min(SMALL_MNK[1]),
            k: p.gemm.k.min(SMALL_MNK[2]),
            ..p.gemm
        };
        let small = small_gemm.batched(p.batch.min(3));
        Problem {
            key,
            mnk: one.mnk,
            batch: p.batch as u64,
            k_major: one.k_major,
            mn_major: one.mn_major,
            generate: Box::new(move |c| p.generate(c)),
            small: Box::new(move |c| small.generate(c)),
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
        let small = small_conv(p);
        Ok(Problem {
            key,
            mnk,
            batch: 1,
            k_major: false,
            mn_major: false,
            generate: Box::new(move |c| p.generate(c)),
            small: Box::new(move |c| small.generate(c)),
        })
    }
}

/// `p` with its sizes cut down: one image, at most [`SMALL_MNK`] output channels, an output
/// of at most 6 x 6 pixels and few enough input channels that K stays near `SMALL_MNK[2]`;
/// the filter, strides, padding, dilation, layout and type are kept.
pub(crate) fn small_conv(p: &ConvProblem) -> ConvProblem {
    let taps = (p.kh * p.kw).max(1);
    // The input extent that gives `out` outputs, within the problem's own.
    let input = |out: i64, full_out: i64, full_in: i64, k: i64, s: i64, pad: i64, d: i64| {
        let out = out.min(full_out).max(1);
        let need = (out - 1) * s + (k - 1) * (d + 1) + 1 - 2 * pad;
        need.clamp(1, full_in.max(1))
    };
    let mut q = *p;
    q.mb = 1;
    q.oc = p.oc.min(SMALL_MNK[1]);
    q.ic = p.ic.min((SMALL_MNK[2] / taps).max(1));
    q.ih = input(6, p.oh(), p.ih, p.kh, p.stride[0], p.padding[0], p.dilation[0]);
    q.iw = input(6, p.ow(), p.iw, p.kw, p.stride[1], p.padding[1], p.dilation[1]);
    if q.oh() == 0 || q.ow() == 0 {
        // Padding wider than the cut input: keep the problem's own spatial sizes.
        (q.ih, q.iw) = (p.ih, p.iw);
    }
    q
}

/// How a search runs.
pub struct TuneOptions {
    /// Search at all; off, a stored winner or the heuristic is used (`KILN_TUNE=0`).
    pub search: bool,
    /// Where winners are kept; `None`: nowhere (every call searches).
    pub cache: Option<PersistentCache>,
    /// Most candidates timed (see [`tuner::search`]).
    pub max_candidates: usize,
    /// Time every blocking of the documented subset ([`tuner::subset`]) instead, however
    /// many.
    pub exhaustive: bool,
    /// Timed samples per candidate (after 50 ms of warm-up launches): a sample is one
    /// launch, or for a kernel shorter than a millisecond a series of them.
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
            exhaustive: false,
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
        /// Candidates that failed to generate, build or run, or whose output was wrong (the
        /// error begins with [`WRONG_OUTPUT`]), with why.
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

/// The blocking chosen without timing: the model's first choice for the problem on
/// `target` ([`tuner::first_choice`]).
pub fn heuristic(dims: impl Into<Dims>, target: &Target) -> GemmConfig {
    tuner::first_choice(dims, target)
}

/// What the model assumes about `dev`: an H100 for the GPU devices (CUDA, and Vulkan on a
/// GPU), the host's threads for the cpu device, the interpreter and a Vulkan device that
/// runs on the CPU (lavapipe).
pub fn target(dev: &dyn Device) -> Target {
    match dev.kind() {
        DeviceKind::Cuda | DeviceKind::Vulkan if !dev.emulated() => Target::h100(),
        _ => Target::cpu(std::thread::available_parallelism().map_or(1, |n| n.get() as u32)),
    }
}

/// The winner stored for `problem` on `dev` in `cache`, if any (a record that does not parse,
/// another version's, is none).
pub fn stored(problem: &Problem, dev: &dyn Device, cache: &PersistentCache) -> Option<GemmConfig> {
    let stored = cache.get(&disk_key(dev, &problem.key)).and_then(|b| String::from_utf8(b).ok());
    stored.and_then(|s| s.parse::<GemmConfig>().ok())
}

pub(crate) fn disk_key(dev: &dyn Device, key: &str) -> DiskKey {
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
    // A problem that cannot be generated at all (sizes it cannot have) is refused first, in
    // the generator's words: no key is looked up, no candidate built, no heuristic offered.
    let target = target(dev);
    (problem.generate)(&heuristic(problem.dims(), &target))?;
    let key = problem.key.clone();
    let dk = disk_key(dev, &key);
    // A record that does not parse (another version's) is searched again, not trusted.
    if let Some(config) = opts.cache.as_ref().and_then(|c| stored(problem, dev, c)) {
        return Ok(Tuned { config, how: How::Cached, key });
    }
    let why = if !opts.search {
        Some("the search is off (KILN_TUNE=0)".to_string())
    } else if dev.kind() == DeviceKind::Interp {
        Some(format!("`{}` is the interpreter, not a timing device", dev.name()))
    } else {
        None
    };
    if let Some(why) = why {
        let config = heuristic(problem.dims(), &target);
        return Ok(Tuned { config, how: How::Heuristic(why), key });
    }
    // The reference every candidate's output is checked against: the plainest blocking.
    let check = Check::new(problem, &GemmConfig::candidates(1, 1, 1)[0])
        .map_err(|e| format!("tuning `{key}`: cannot check candidates: {e}"))?;
    let mut bench = Bench::new(problem, dev, opts.repeats.max(1));
    let mut searched = if opts.exhaustive {
        tuner::exhaustive_with(problem.mnk, &mut bench)
    } else {
        tuner::search_with(problem.dims(), &target, opts.max_candidates, &mut bench)
    };
    let default = heuristic(problem.dims(), &target);
    tuner::confirm(&mut searched, &default, &mut bench);
    drop(bench);
    let first = tuner::winner(&searched, &default);
    let (mut timings, mut errors) = (searched.timings, searched.errors);
    // The search's winner is checked before it can win (the default when it timed within
    // tuner::DEFAULT_MARGIN of the fastest; checking every candidate built each one twice,
    // half of a search's time); one whose output is wrong is dropped, with why, and the
    // next fastest checked.
    let mut order: Vec<(GemmConfig, f64)> = timings.clone();
    order.sort_by(|a, b| a.1.total_cmp(&b.1));
    order.sort_by_key(|(c, _)| Some(*c) != first);
    let config = first_checked(order, &mut timings, &mut errors, &key, dev, |c| {
        check.candidate(problem, dev, c)
    })?;
    if let Some(cache) = &opts.cache {
        cache.put(&dk, config.to_string().as_bytes());
    }
    Ok(Tuned { config, how: How::Searched { timings, errors }, key })
}

/// The first of `order` (timed candidates, in the order to try them) whose output `check`
/// accepts; each one it rejects moves from `timings` to `errors`, with why. When none passes,
/// an error naming `key`, the device and the first failure.
pub(crate) fn first_checked<C: Copy + PartialEq + std::fmt::Display>(
    order: Vec<(C, f64)>,
    timings: &mut Vec<(C, f64)>,
    errors: &mut Vec<(C, String)>,
    key: &str,
    dev: &dyn Device,
    mut check: impl FnMut(&C) -> Result<(), String>,
) -> Result<C, String> {
    for (c, _) in order {
        match check(&c) {
            Ok(()) => return Ok(c),
            Err(e) => {
                timings.retain(|(x, _)| *x != c);
                errors.push((c, e));
            }
        }
    }
    let first = errors.first().map(|(c, e)| format!("{c}: {e}")).unwrap_or_default();
    Err(format!(
        "tuning `{key}` on {}: no candidate ran ({} failed; first: {first})",
        dev.name(),
        errors.len()
    ))
}

/// A check of candidates' outputs: the small problem's inputs and what the interpreter
/// computes from them with a reference blocking.
struct Check {
    inputs: Vec<Buffer>,
    expected: Buffer,
}

/// How the error of a candidate dropped for its output begins (in [`How::Searched`]'s
/// `errors`).
pub const WRONG_OUTPUT: &str = "wrong output";

/// The small problem's scalars: alpha = 1, beta = 1/2 (C's old contents count, exactly).
const CHECK_SCALARS: [f32; 2] = [1.0, 0.5];

impl Check {
    /// Runs the small problem with blocking `reference` on the interpreter.
    fn new(problem: &Problem, reference: &GemmConfig) -> Result<Check, String> {
        let g = (problem.small)(reference)?;
        let inputs = check_inputs(&g);
        let interp: Arc<dyn Device> =
            kiln_runtime::device::registry::open("interp", &Default::default())
                .map_err(|e| e.to_string())?;
        let mut out = inputs.clone();
        Launcher::new(&*interp, &g)?.run(&mut out, CHECK_SCALARS)?;
        Ok(Check { inputs, expected: out.swap_remove(2) })
    }

    /// Whether `c` gives the reference's bits for the small problem on `dev`; an error
    /// naming the first element that differs.
    fn candidate(&self, problem: &Problem, dev: &dyn Device, c: &GemmConfig) -> Result<(), String> {
        let g = (problem.small)(c)?;
        let mut out = self.inputs.clone();
        Launcher::new(dev, &g)?.run(&mut out, CHECK_SCALARS)?;
        let (got, want) = (out[2].as_bytes(), self.expected.as_bytes());
        if got == want {
            return Ok(());
        }
        let size = self.expected.elem().size_bytes();
        let i = got.chunks(size).zip(want.chunks(size)).position(|(a, b)| a != b).unwrap_or(0);
        let show = |b: &Buffer| {
            b.get(i).and_then(|v| v.as_f64()).map_or_else(|| "missing".into(), |v| format!("{v:?}"))
        };
        Err(format!(
            "{WRONG_OUTPUT}, dropped: on the check problem ({}x{}x{}), C[{i}] is {} but the \
             interpreter computes {:?}",
            g.mnk[0],
            g.mnk[1],
            g.mnk[2],
            show(&out[2]),
            show(&self.expected)
        ))
    }
}

/// A, B and C of a generated problem filled with small integers (|x| <= 3): every product
/// and every partial sum of a small problem is exact, whatever order a blocking adds in.
fn check_inputs(g: &Generated) -> Vec<Buffer> {
    let types = operand_types(g);
    (0..3)
        .map(|b| {
            let mut buf = Buffer::zeroed(types[b], g.buffer_elems[b].max(1));
            for i in 0..buf.len() {
                let v = ((i * (2 * b + 5) + b) % 7) as f64 - 3.0;
                // Within the buffer, of its float type: cannot fail.
                let _ = buf.set(i, kiln_ir::Imm::float(buf.elem(), v));
            }
            buf
        })
        .collect()
}

/// A generated kernel built and loaded on a device, ready to launch (with split-K, its
/// reduction kernel and the workspace too).
struct Launcher<'d> {
    dev: &'d dyn Device,
    kernel: kiln_runtime::Handle,
    range: NdRange,
    reduce: Option<(kiln_runtime::Handle, NdRange, usize)>,
}

/// `g`'s kernels (with split-K, the reduction too) built for `dev` with `-O`.
fn build(dev: &dyn Device, g: &Generated) -> Result<Vec<u8>, String> {
    let mut kernels = vec![g.kernel.clone()];
    kernels.extend(g.split.iter().map(|s| s.reduce.clone()));
    let module = Verified::new(kiln_ir::Module::new(kernels)).map_err(|e| format!("{e:?}"))?;
    let opts = BuildOptions::parse("-O")?;
    dev.build(&module, &opts).map_err(|e| e.to_string())
}

impl<'d> Launcher<'d> {
    fn new(dev: &'d dyn Device, g: &Generated) -> Result<Launcher<'d>, String> {
        Launcher::load(dev, g, &build(dev, g)?)
    }

    /// `g`'s kernels loaded from `bin`, what [`build`] made of them.
    fn load(dev: &'d dyn Device, g: &Generated, bin: &[u8]) -> Result<Launcher<'d>, String> {
        let program = dev.load(bin).map_err(|e| e.to_string())?;
        let handle = |name: &str| dev.kernel(&program, name).map_err(|e| e.to_string());
        let kernel = handle(g.kernel.name())?;
        let reduce = match &g.split {
            Some(s) => Some((handle(s.reduce.name())?, s.range(), s.workspace_elems)),
            None => None,
        };
        Ok(Launcher { dev, kernel, range: g.range(), reduce })
    }

    /// One launch on A, B, C (and, with split-K, the workspace) already in the device's
    /// memory, with the scalars alpha and beta.
    fn run_resident(&self, bufs: &[ResidentBuffer], [alpha, beta]: [f32; 2]) -> Result<(), String> {
        let (sa, sb) = (Arg::scalar(alpha), Arg::scalar(beta));
        let err = |e: kiln_runtime::DeviceError| e.to_string();
        match &self.reduce {
            None => {
                let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), sa, sb];
                self.dev.run_resident(&self.kernel, &self.range, &args, bufs).map_err(err)
            }
            Some((reduce, range, _)) => {
                let part = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(3)];
                self.dev.run_resident(&self.kernel, &self.range, &part, bufs).map_err(err)?;
                let sum = [Arg::Buffer(3), Arg::Buffer(2), sa, sb];
                self.dev.run_resident(reduce, range, &sum, bufs).map_err(err)
            }
        }
    }

    /// One launch on A, B and C with the scalars alpha and beta (split-K: the partial
    /// products into a workspace, then the reduction into C).
    fn run(&self, buffers: &mut Vec<Buffer>, [alpha, beta]: [f32; 2]) -> Result<(), String> {
        let (sa, sb) = (Arg::scalar(alpha), Arg::scalar(beta));
        let Some((reduce, range, elems)) = &self.reduce else {
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), sa, sb];
            return self
                .dev
                .run(&self.kernel, &self.range, &args, buffers)
                .map_err(|e| e.to_string());
        };
        buffers.push(Buffer::zeroed(Scalar::F32, *elems));
        let part = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(3)];
        let done = self.dev.run(&self.kernel, &self.range, &part, buffers).and_then(|()| {
            self.dev.run(reduce, range, &[Arg::Buffer(3), Arg::Buffer(2), sa, sb], buffers)
        });
        buffers.truncate(3);
        done.map_err(|e| e.to_string())
    }
}

/// The element types of A, B and C (C is the reduction's with split-K, whose first kernel
/// writes an f32 workspace).
fn operand_types(g: &Generated) -> [Scalar; 3] {
    let elem = |k: &kiln_ir::Kernel, i: usize| k.params()[i].ty().elem().unwrap_or(Scalar::F32);
    let c = match &g.split {
        Some(s) => elem(&s.reduce, 1),
        None => elem(&g.kernel, 2),
    };
    [elem(&g.kernel, 0), elem(&g.kernel, 1), c]
}

/// Buffers of `elem` filled with pseudo-random values in [-1, 1) whose mantissas vary in
/// every bit: the multiply-adds of a timed kernel then switch as many bits as on real data,
/// as the GPU's power management sees it. Zeros, or values of few mantissa bits, let the
/// clocks boost past what real inputs get, and change which blocking is fastest (the
/// suite's random inputs ranked blockings differently from the repeating quarters used
/// before).
fn timing_buffer(elem: Scalar, len: usize) -> Buffer {
    let value = |i: usize| {
        // splitmix64 of the index: cheap, and no two neighbours alike.
        let mut z = (i as u64).wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    };
    match elem {
        Scalar::F16 => {
            Buffer::from_slice(&(0..len).map(|i| half::f16::from_f32(value(i))).collect::<Vec<_>>())
        }
        Scalar::F32 => Buffer::from_slice(&(0..len).map(value).collect::<Vec<_>>()),
        other => Buffer::zeroed(other, len),
    }
}

/// How long a candidate runs untimed before it is timed, in seconds (at least one launch):
/// a GPU that was idle (compiling the candidate) takes a while to raise its clocks, which
/// made the first candidate of a search look slower than it is.
pub(crate) const WARM_UP_S: f64 = 0.05;

/// The shortest timed sample, in seconds: a candidate that runs shorter is timed over a
/// series of calls submitted back to back and waited for once, so that the wait and the
/// clock's resolution (tens of microseconds on a GPU) do not swamp the differences between
/// short kernels.
const MIN_SAMPLE_S: f64 = 1e-3;

/// The longest series of calls in one timed sample.
const MAX_SERIES: u32 = 64;

/// The median of `repeats` timed samples of `run`, after untimed calls for `warm_up` (at
/// least one), each call then waited for with `finish` (which waits until the device has
/// done what `run` submitted). A sample is a series of calls, as many as make it last
/// [`MIN_SAMPLE_S`] at the warm-up's pace (one for a long kernel, at most [`MAX_SERIES`]),
/// then `finish`, divided by the calls: the device is idle when the clock starts, so
/// launches that return once submitted are timed to their end. `clock` reads the time in
/// seconds.
pub(crate) fn median_time(
    repeats: u32,
    warm_up: f64,
    run: &mut dyn FnMut() -> Result<(), String>,
    finish: &mut dyn FnMut() -> Result<(), String>,
    clock: &mut dyn FnMut() -> f64,
) -> Result<f64, String> {
    let start = clock();
    let mut calls = 0u32;
    loop {
        run()?;
        finish()?;
        calls += 1;
        if clock() - start >= warm_up {
            break;
        }
    }
    let pace = (clock() - start) / calls as f64;
    let series = if pace > 0.0 {
        ((MIN_SAMPLE_S / pace).ceil() as u32).clamp(1, MAX_SERIES)
    } else {
        MAX_SERIES
    };
    let mut times = Vec::with_capacity(repeats.max(1) as usize);
    for _ in 0..repeats.max(1) {
        let t0 = clock();
        for _ in 0..series {
            run()?;
        }
        finish()?;
        times.push((clock() - t0) / series as f64);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// A candidate's kernel generated and built (the binary `dev.build` made), or why not.
type Built = Result<(Generated, Vec<u8>), String>;

/// Most threads [`Bench`] builds candidates on at once.
const BUILD_THREADS: usize = 8;

/// Times a problem's candidates on a device for the search ([`tuner::Timer`]): the kernels
/// the search announces are built together on several threads (generation and `-O` and the
/// driver's assembly of each are independent), loaded kernels are kept (the finalists are
/// timed again), and one set of operand buffers, made once, serves every candidate.
struct Bench<'p, 'd> {
    problem: &'p Problem<'p>,
    dev: &'d dyn Device,
    repeats: u32,
    /// Kernels built, not yet loaded.
    built: HashMap<GemmConfig, Built>,
    /// Kernels loaded.
    loaded: HashMap<GemmConfig, (Launcher<'d>, Generated)>,
    /// A, B and C filled with [`timing_buffer`] values.
    host: Option<Vec<Buffer>>,
    /// Those three in the device's memory, and split-K workspaces by size.
    resident: Option<Vec<ResidentBuffer>>,
    workspaces: HashMap<usize, ResidentBuffer>,
}

impl<'p, 'd> Bench<'p, 'd> {
    fn new(problem: &'p Problem<'p>, dev: &'d dyn Device, repeats: u32) -> Bench<'p, 'd> {
        Bench {
            problem,
            dev,
            repeats,
            built: HashMap::new(),
            loaded: HashMap::new(),
            host: None,
            resident: None,
            workspaces: HashMap::new(),
        }
    }

    /// Loads `c`'s kernel (built now unless [`Bench::prepare`] built it) if not loaded yet.
    fn load(&mut self, c: &GemmConfig) -> Result<(), String> {
        if !self.loaded.contains_key(c) {
            let (g, bin) = match self.built.remove(c) {
                Some(built) => built?,
                None => {
                    let g = (self.problem.generate)(c)?;
                    let bin = build(self.dev, &g)?;
                    (g, bin)
                }
            };
            let l = Launcher::load(self.dev, &g, &bin)?;
            self.loaded.insert(*c, (l, g));
        }
        Ok(())
    }

    /// A, B and C on the host (made once).
    fn host(&mut self, g: &Generated) -> Vec<Buffer> {
        self.host
            .get_or_insert_with(|| {
                operand_types(g)
                    .into_iter()
                    .zip(g.buffer_elems)
                    .map(|(t, n)| timing_buffer(t, n.max(1)))
                    .collect()
            })
            .clone()
    }

    /// A, B, C (and the workspace `ws` elements long, if any) in the device's memory,
    /// uploaded once each.
    fn resident(
        &mut self,
        g: &Generated,
        ws: Option<usize>,
    ) -> Result<Vec<ResidentBuffer>, String> {
        let dev = self.dev;
        let put = |b: &Buffer| -> Result<ResidentBuffer, String> {
            let mem = dev.alloc(b.as_bytes().len().max(1)).map_err(|e| e.to_string())?;
            mem.upload(b.as_bytes()).map_err(|e| e.to_string())?;
            Ok(ResidentBuffer { mem, elem: b.elem(), len: b.len() })
        };
        if self.resident.is_none() {
            let host = self.host(g);
            self.resident = Some(host.iter().map(put).collect::<Result<Vec<_>, String>>()?);
        }
        let mut out = self.resident.clone().unwrap_or_default();
        if let Some(n) = ws {
            if let std::collections::hash_map::Entry::Vacant(e) = self.workspaces.entry(n) {
                e.insert(put(&Buffer::zeroed(Scalar::F32, n))?);
            }
            out.push(self.workspaces[&n].clone());
        }
        Ok(out)
    }
}

impl tuner::Timer for Bench<'_, '_> {
    /// Builds the announced kernels not built yet, on up to [`BUILD_THREADS`] threads, when
    /// the first of them is not built (later ones of an earlier batch are then ready).
    fn prepare(&mut self, next: &[GemmConfig]) {
        let ready = |b: &Self, c: &GemmConfig| b.loaded.contains_key(c) || b.built.contains_key(c);
        if next.first().is_none_or(|c| ready(self, c)) {
            return;
        }
        // Generation borrows the problem (not shareable between threads); it is the cheap
        // part, done here.
        let mut todo: Vec<(GemmConfig, Result<Generated, String>)> = Vec::new();
        for c in next {
            if !ready(self, c) && !todo.iter().any(|(x, _)| x == c) {
                todo.push((*c, (self.problem.generate)(c)));
            }
        }
        let threads =
            std::thread::available_parallelism().map_or(1, |n| n.get()).min(BUILD_THREADS);
        let dev = self.dev;
        let per = todo.len().div_ceil(threads.max(1)).max(1);
        let built: Vec<(GemmConfig, Built)> = std::thread::scope(|s| {
            let handles: Vec<_> = todo
                .chunks(per)
                .map(|chunk| {
                    s.spawn(move || {
                        chunk
                            .iter()
                            .map(|(c, g)| {
                                let out = match g {
                                    Ok(g) => build(dev, g).map(|bin| (g.clone(), bin)),
                                    Err(e) => Err(e.clone()),
                                };
                                (*c, out)
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            // A build that panicked leaves its candidates unbuilt: built again when timed,
            // where the error is reported.
            handles.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect()
        });
        self.built.extend(built);
    }

    /// The median time of `repeats` samples of `c`'s kernel (after warming up), each a
    /// launch or a series of them, waited for ([`median_time`]), on buffers of pseudo-random values
    /// ([`timing_buffer`]). On a device with memory of its own the buffers stay there, so
    /// the launches time the kernels, not copies between host and device.
    fn time(&mut self, c: &GemmConfig) -> Result<f64, String> {
        let dev = self.dev;
        let repeats = self.repeats;
        self.load(c)?;
        let g = self.loaded[c].1.clone();
        let ws = g.split.as_ref().map(|s| s.workspace_elems);
        let resident =
            if dev.memory_space().is_some() { Some(self.resident(&g, ws)?) } else { None };
        let mut buffers = if resident.is_none() { self.host(&g) } else { Vec::new() };
        let launcher = &self.loaded[c].0;
        let mut run = || match &resident {
            Some(r) => launcher.run_resident(r, [1.0, 0.0]),
            None => launcher.run(&mut buffers, [1.0, 0.0]),
        };
        // A resident launch returns once submitted: the device is waited for in the clock.
        let mut finish = || match dev.finish(None) {
            Ok(true) => Ok(()),
            Ok(false) => Err(format!("{}: the device did not finish", dev.name())),
            Err(e) => Err(e.to_string()),
        };
        let start = Instant::now();
        median_time(repeats, WARM_UP_S, &mut run, &mut finish, &mut || {
            start.elapsed().as_secs_f64()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A launch that returns once submitted is timed to its end: a fake device whose work
    /// completes only in `finish`, and a clock that counts completed work, see every timed
    /// launch take exactly one unit (without the wait, they would take none).
    #[test]
    fn timed_launches_are_waited_for() {
        use std::cell::Cell;
        let (submitted, done) = (Cell::new(0u32), Cell::new(0u32));
        let mut run = || {
            submitted.set(submitted.get() + 1);
            Ok(())
        };
        let mut finish = || {
            done.set(submitted.get());
            Ok(())
        };
        let t = median_time(5, 0.0, &mut run, &mut finish, &mut || done.get() as f64).unwrap();
        assert_eq!((t, submitted.get(), done.get()), (1.0, 6, 6));
        // Three units of warm-up: three untimed launches first.
        let t = median_time(5, 3.0, &mut run, &mut finish, &mut || done.get() as f64).unwrap();
        assert_eq!((t, submitted.get(), done.get()), (1.0, 14, 14));
        let failing = median_time(3, 0.0, &mut || Ok(()), &mut || Err("lost".into()), &mut || 0.0);
        assert_eq!(failing, Err("lost".to_string()));
        // A kernel of a tenth of MIN_SAMPLE_S: each sample is a series of ten launches
        // waited for once, and the time is per launch.
        let (submitted, done) = (Cell::new(0u32), Cell::new(0u32));
        let mut run = || {
            submitted.set(submitted.get() + 1);
            Ok(())
        };
        let mut finish = || {
            done.set(submitted.get());
            Ok(())
        };
        let unit = MIN_SAMPLE_S / 10.0;
        let mut waits = 0;
        let mut counted = || {
            waits += 1;
            done.get() as f64 * unit
        };
        let t = median_time(5, 0.0, &mut run, &mut finish, &mut counted).unwrap();
        assert!((t - unit).abs() < unit * 1e-9, "{t}");
        assert_eq!((submitted.get(), done.get()), (1 + 5 * 10, 1 + 5 * 10));
        assert_eq!(waits, 3 + 2 * 5);
    }

    /// Timed candidates run on data that is not all zeros, in both storage types.
    #[test]
    fn timing_buffers_are_not_zero() {
        for elem in [Scalar::F32, Scalar::F16] {
            let b = timing_buffer(elem, 40);
            assert_eq!((b.elem(), b.len()), (elem, 40));
            let zeros = (0..40).filter(|&i| b.get(i).and_then(|v| v.as_f64()) == Some(0.0)).count();
            assert!(zeros <= 40 / 13 + 1, "{elem}: {zeros} zeros");
        }
        // Pseudo-random mantissas, within [-1, 1): nearly every value different, and
        // their low mantissa bits busy (a repeating pattern of quarters had them all 0).
        let b = timing_buffer(Scalar::F32, 1000);
        let bits: Vec<u32> =
            (0..1000).map(|i| (b.get(i).unwrap().as_f64().unwrap() as f32).to_bits()).collect();
        let distinct: std::collections::HashSet<_> = bits.iter().collect();
        assert!(distinct.len() >= 990, "{} distinct", distinct.len());
        assert!(bits.iter().all(|x| f32::from_bits(*x).abs() <= 1.0));
        let low = bits.iter().filter(|x| *x & 0xff != 0).count();
        assert!(low >= 900, "{low} with low mantissa bits set");
    }
}
