//! Finding a good blocking without timing everything: a model of the target ranks the
//! blockings of a GEMM, a few of the best (and the target's known-good seeds) are timed, and
//! a local search around the fastest times its neighbours.
//!
//! The model ([`predict`]) estimates a kernel's time in cycles of one compute unit from what
//! limits a blocked GEMM on a GPU-like target:
//!
//! * **occupancy**: work-groups resident per unit, limited by registers (the register block,
//!   the operands of a step, the staged next tile, addressing), local memory (the tiles
//!   times the buffering depth), work-items and groups per unit;
//! * **issue**: per reduction step each work-item issues `tm * tn` FMAs, `(tm + tn) / vec`
//!   local-memory reads and, unrolled or not, loop overhead; the tile copies add their
//!   loads and stores: the ratio is the tile's reuse (arithmetic intensity);
//! * **latency**: too few resident warps, each with too few independent FMAs, leave the
//!   pipelines idle; a single-buffered loop waits for its loads at every step, a
//!   double-buffered one only at its barrier, and other resident groups cover the waits;
//! * **wave quantization**: the busiest unit runs `ceil(groups / units)` groups, so a grid
//!   slightly larger than a multiple of the units wastes most of a wave; split-K multiplies
//!   the groups (and adds the reduction kernel's memory traffic);
//! * **memory**: A and B are read once per tile of the other operand (less what the cache
//!   keeps), C once (split-K: its slices written and read back).
//!
//! The model is coarse by design: it only has to put the good blockings near the top, since
//! the search times them, beginning with the untimed default ([`first_choice`]), so that a
//! search can only beat it; [`confirm`] then re-times the fastest few, interleaved, before
//! one wins. The search space ([`space`]) is [`GemmConfig::candidates`] and,
//! for reductions deep enough to split, the same blockings with split-K. The
//! exhaustive-subset mode ([`subset`]) is the part of that space with unrolled,
//! double-buffered loops, 4-lane vectors and k-tiles of 8 or 16: what the known-good
//! blockings kiln was measured with share.

use std::collections::HashSet;

use crate::config::{GemmConfig, MAX_WORK_GROUP};

/// What the model knows about a target.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    /// A short name (`h100`, `cpu`).
    pub name: String,
    /// Compute units (SMs; threads of the cpu device).
    pub units: u32,
    /// 32-bit registers per unit.
    pub regs_per_unit: u32,
    /// Most registers one work-item may use before spilling.
    pub max_regs_per_item: u32,
    /// Local (shared) memory per unit, in bytes.
    pub local_per_unit: u32,
    /// Most resident work-items per unit.
    pub max_items_per_unit: u32,
    /// Most resident work-groups per unit.
    pub max_groups_per_unit: u32,
    /// Work-items issued together (warp, subgroup or SIMD width).
    pub simd: u32,
    /// f32 lanes issued per unit per cycle.
    pub lanes_per_cycle: u32,
    /// Resident warps times independent FMAs per warp (in fours) that hide latency.
    pub latency_warps: u32,
    /// Cycles a step of a double-buffered loop waits at its barrier.
    pub barrier_cycles: u32,
    /// Cycles a single-buffered step waits for its global loads.
    pub load_latency: u32,
    /// Bytes of memory traffic per cycle, the whole device.
    pub bytes_per_cycle: f64,
    /// How many times on average the cache serves an operand tile before memory does.
    pub cache_reuse: f64,
    /// Cycles one extra kernel launch costs (split-K's reduction).
    pub launch_cycles: f64,
    /// Known-good blockings, the best measured first: timed first when they fit the problem,
    /// and the untimed first choice ([`first_choice`]) when the model predicts one within
    /// [`SEED_TRUST`] of its own best.
    pub seeds: Vec<GemmConfig>,
    /// Known-good blockings for problems whose A and B are both contiguous along K
    /// ([`Dims::k_major`]), taken before [`Target::seeds`] there.
    pub k_major_seeds: Vec<GemmConfig>,
    /// Known-good blockings of large tiles, taken unsplit before [`Target::seeds`] for a
    /// problem whose M x N tiles of them fill the units in waves at least
    /// [`LARGE_SEED_WAVES`] full (measured on large problems only: with few tiles the
    /// smaller tiles of the seeds, split, measured well).
    pub large_seeds: Vec<GemmConfig>,
}

/// A blocking that unrolls, double-buffers and uses 4-lane vectors: what the seeds are.
fn seed(wg_m: u32, wg_n: u32, tm: u32, tn: u32, k_tile: u32) -> GemmConfig {
    GemmConfig { wg_m, wg_n, tm, tn, k_tile, slm_depth: 2, unroll: true, vec: 4, split_k: 1 }
}

impl Target {
    /// An NVIDIA H100 (SXM): 132 SMs of 64 Ki registers, 228 KiB of shared memory, 2048
    /// threads and 32 blocks each, 128 f32 lanes per cycle, ~3.3 TB/s at ~1.75 GHz. The
    /// seeds are the best fixed blockings measured there (benches/gpu/README.md).
    pub fn h100() -> Target {
        Target {
            name: "h100".into(),
            units: 132,
            regs_per_unit: 65536,
            max_regs_per_item: 255,
            local_per_unit: 228 * 1024,
            max_items_per_unit: 2048,
            max_groups_per_unit: 32,
            simd: 32,
            lanes_per_cycle: 128,
            latency_warps: 16,
            barrier_cycles: 60,
            load_latency: 700,
            bytes_per_cycle: 1900.0,
            cache_reuse: 8.0,
            launch_cycles: 6000.0,
            // 128 x 128 tiles of 8 x 16 register blocks on 128 work-items: 0.945x, 0.969x
            // and 0.993x cuBLAS at 4096^3, 8192^3 and 2048^3 on the H200, where the first
            // seed measured 0.910x, 0.923x and 0.913x (one run).
            large_seeds: vec![seed(16, 8, 8, 16, 8)],
            seeds: vec![
                seed(8, 16, 8, 8, 8),
                seed(8, 32, 8, 4, 16),
                seed(16, 16, 8, 8, 8),
                seed(8, 16, 8, 8, 16),
                seed(16, 8, 8, 8, 16),
                // 64 x 64 tiles: the search's winner at 1000^3 in an early run (1.10x
                // cuBLAS; later runs 0.77-0.81x, the first seed split 2 ways 1.02-1.04x).
                seed(8, 16, 8, 4, 16),
                seed(16, 16, 4, 4, 16),
            ],
            // A row-major A and a transposed B copy both tiles with vectors along K, into
            // padded tiles: at 4096^3 on the H200 k-tile 8 measured 0.91x cuBLAS, k-tile 16
            // 0.86x (before the padding 0.89x and 0.79x).
            k_major_seeds: vec![seed(8, 16, 8, 8, 8)],
        }
    }

    /// kiln's cpu device on `threads` threads: each runs one work-group at a time, 8 lanes
    /// wide, two FMAs per cycle; barriers are rounds over the group's work-items.
    pub fn cpu(threads: u32) -> Target {
        Target {
            name: "cpu".into(),
            units: threads.max(1),
            regs_per_unit: 1 << 20,
            max_regs_per_item: 1 << 16,
            local_per_unit: 1 << 20,
            max_items_per_unit: MAX_WORK_GROUP,
            max_groups_per_unit: 1,
            simd: 8,
            lanes_per_cycle: 16,
            latency_warps: 1,
            barrier_cycles: 400,
            load_latency: 400,
            bytes_per_cycle: 8.0,
            cache_reuse: 4.0,
            launch_cycles: 20000.0,
            large_seeds: Vec::new(),
            seeds: vec![seed(16, 16, 4, 4, 16), seed(8, 8, 4, 4, 16)],
            k_major_seeds: Vec::new(),
        }
    }
}

/// The sizes the model sees: one GEMM's M, N and K, and how many such GEMMs one launch
/// runs (a batch: its work-groups fill the units together), and whether both operands are
/// stored contiguous along K. An `[m, n, k]` array is a batch of one, not K-major.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Dims {
    /// M, N and K of each GEMM.
    pub mnk: [u64; 3],
    /// GEMMs per launch (at least 1).
    pub batch: u64,
    /// A is row-major and B transposed: both tiles are copied with vectors along K, which
    /// the target's [`Target::k_major_seeds`] suit.
    pub k_major: bool,
    /// A is transposed and B is not: both tiles are copied with vectors along M and N. The
    /// target's [`Target::large_seeds`] are not taken there.
    pub mn_major: bool,
}

impl From<[u64; 3]> for Dims {
    fn from(mnk: [u64; 3]) -> Dims {
        Dims { mnk, batch: 1, k_major: false, mn_major: false }
    }
}

/// How full the waves of a large seed's work-groups must be for it to be taken
/// ([`Target::large_seeds`]): 2048^3 in 256 tiles of 128 x 128 on 132 SMs (0.97 full)
/// measured 0.99x cuBLAS; 1536 x 1536 in 144 (0.55 full) would leave most SMs half idle.
pub const LARGE_SEED_WAVES: f64 = 0.9;

/// Whether `c`'s M x N tiles (times the batch, K unsplit) give every unit of `target` a
/// work-group, in waves at least [`LARGE_SEED_WAVES`] full on average.
pub fn full_waves(c: &GemmConfig, dims: impl Into<Dims>, target: &Target) -> bool {
    let Dims { mnk: [m, n, _], batch, .. } = dims.into();
    let groups =
        m.max(1).div_ceil(c.tile_m() as u64) * n.max(1).div_ceil(c.tile_n() as u64) * batch.max(1);
    let units = target.units.max(1) as u64;
    groups >= units && groups as f64 / (groups.div_ceil(units) * units) as f64 >= LARGE_SEED_WAVES
}

/// The target's seeds for `dims` that are valid and fit the problem, in the order they are
/// tried: [`Target::k_major_seeds`] first for a K-major problem, then the
/// [`Target::large_seeds`] whose waves are full ([`full_waves`]) unless the problem is
/// [`Dims::mn_major`], then [`Target::seeds`].
fn seeds_for(dims: Dims, target: &Target) -> Vec<GemmConfig> {
    let [m, n, k] = dims.mnk;
    let first = if dims.k_major { &target.k_major_seeds[..] } else { &[] };
    // The large seed measured 0.765x cuBLAS at 4096^3 with A transposed (H200), where the
    // first seed had measured 0.916x; with both transposed it measured 1.056x.
    let large = target.large_seeds.iter().filter(|c| !dims.mn_major && full_waves(c, dims, target));
    first
        .iter()
        .chain(large)
        .chain(&target.seeds)
        .filter(|c| c.validate().is_ok() && c.fits(m, n, k))
        .copied()
        .collect()
}

/// The model's estimate of `cfg`'s time for a batch of `m x n x k` GEMMs on `target`, in
/// cycles of one unit; `None` when the blocking cannot run there (no work-group fits a
/// unit).
pub fn predict(cfg: &GemmConfig, dims: impl Into<Dims>, target: &Target) -> Option<f64> {
    let Dims { mnk: [m, n, k], batch, .. } = dims.into();
    let batch = batch.max(1);
    let t = target;
    let (bm, bn, bk) = (cfg.tile_m() as u64, cfg.tile_n() as u64, cfg.k_tile as u64);
    let (tm, tn) = (cfg.tm as f64, cfg.tn as f64);
    let threads = cfg.threads() as u64;
    let slices = cfg.slices(k);
    let steps = k.max(1).div_ceil(bk).div_ceil(slices) as f64;
    let groups = m.max(1).div_ceil(bm) * n.max(1).div_ceil(bn) * slices * batch;
    // Registers per work-item: accumulators, a step's operands, the tile loads in flight of
    // a double- or triple-buffered loop, and addressing.
    let staged = if cfg.slm_depth >= 2 { ((bm + bn) * bk).div_ceil(threads) } else { 0 };
    let regs = (cfg.tm * cfg.tn + cfg.tm + cfg.tn) as u64 + staged + 20;
    let spill = if regs > t.max_regs_per_item as u64 { 4.0 } else { 1.0 };
    let regs = regs.min(t.max_regs_per_item as u64).next_multiple_of(8);
    let warps = threads.div_ceil(t.simd as u64);
    let by_regs = t.regs_per_unit as u64 / (regs * warps * t.simd as u64);
    let by_items = t.max_items_per_unit as u64 / threads;
    let by_local = t.local_per_unit as u64 / cfg.local_bytes().max(1);
    let per_unit = by_regs.min(by_items).min(by_local).min(t.max_groups_per_unit as u64);
    if per_unit == 0 {
        return None;
    }
    // Wave quantization: the busiest unit's groups, `act` of them resident at a time.
    let busiest = groups.div_ceil(t.units as u64);
    let act = per_unit.min(busiest);
    let rounds = busiest.div_ceil(act) as f64;
    // Issue per step: the multiply, its local reads (vectors of at most 4 lanes per
    // instruction), loop overhead, and the tile copy (a load, a store and addressing per
    // element or vector).
    let vw = cfg.vec.min(4) as f64;
    let loop_overhead = if cfg.unroll { 0.25 } else { 10.0 };
    let per_item = bk as f64 * (tm * tn + (tm + tn) / vw + loop_overhead);
    let copy = (bm + bn) as f64 * bk as f64 / vw * 3.0;
    // Whole warps issue: a work-group of 8 work-items costs a warp of 32.
    let lanes = (warps * t.simd as u64) as f64;
    let issue = (lanes * per_item + copy) / t.lanes_per_cycle as f64;
    // Latency: resident warps times independent FMAs (in fours) below what hides it.
    let ilp = (tm * tn / 4.0).clamp(0.25, 4.0);
    let hiding = (act * warps) as f64 * ilp / t.latency_warps as f64;
    let latency = (1.0 / hiding).max(1.0);
    // Triple buffering's deeper pipeline has never paid on the H100 (benches/gpu/README.md):
    // its extra slot costs local memory (above) and index arithmetic.
    let wait = match cfg.slm_depth {
        1 => 2.0 * t.barrier_cycles as f64 + t.load_latency as f64,
        2 => t.barrier_cycles as f64,
        _ => 1.5 * t.barrier_cycles as f64,
    };
    let compute =
        busiest as f64 * steps * issue * latency * spill + rounds * steps * wait / act as f64;
    // Memory: operand tiles (the cache serving most re-reads) and C, plus split-K's slices.
    let (mf, nf, kf) = (m as f64, n as f64, k as f64);
    let operands =
        4.0 * (mf * kf * n.div_ceil(bn) as f64 + kf * nf * m.div_ceil(bm) as f64) / t.cache_reuse;
    let b = batch as f64;
    let mut bytes = b * (operands + 8.0 * mf * nf);
    let mut reduce = 0.0;
    if slices > 1 {
        // The slices written by the first kernel, read back (and C written) by the second.
        bytes += b * 4.0 * slices as f64 * mf * nf;
        reduce = t.launch_cycles + b * 4.0 * (slices + 2) as f64 * mf * nf / t.bytes_per_cycle;
    }
    Some(compute.max(bytes / t.bytes_per_cycle) + reduce)
}

/// The search space for an `m x n x k` GEMM: [`GemmConfig::candidates`], then, when the
/// reduction has more than 4 k-tiles, each of them split 2, 4, 8 and 16 ways (those that
/// give exactly that many slices of at least two k-tiles). Deterministic order.
pub fn space([m, n, k]: [u64; 3]) -> Vec<GemmConfig> {
    let base = GemmConfig::candidates(m, n, k);
    let mut out = base.clone();
    for split_k in [2, 4, 8, 16] {
        for c in &base {
            let s = GemmConfig { split_k, ..*c };
            if splits_exactly(&s, k) {
                out.push(s);
            }
        }
    }
    out
}

/// Whether `c` splits `k` into exactly `split_k` slices of at least two k-tiles each (the
/// other split-K settings duplicate a smaller one, or slice too thin to pay).
fn splits_exactly(c: &GemmConfig, k: u64) -> bool {
    let ktiles = k.div_ceil(c.k_tile as u64);
    c.split_k == 1 || (c.slices(k) == c.split_k as u64 && ktiles >= 2 * c.split_k as u64)
}

/// The documented subset an exhaustive search times: the blockings of [`space`] that
/// unroll, double-buffer, split K at most 8 ways, use 4-lane vectors (register blocks 4x4,
/// 4x8, 8x4 and 8x8) and k-tiles of 8 or 16; for a problem too small for any of those, the
/// scalar ones that unroll and double-buffer. Every fixed blocking measured best on the H100
/// is one of them.
pub fn subset(mnk: [u64; 3]) -> Vec<GemmConfig> {
    let base: Vec<GemmConfig> =
        space(mnk).into_iter().filter(|c| c.unroll && c.slm_depth == 2 && c.split_k <= 8).collect();
    let vectors: Vec<GemmConfig> =
        base.iter().filter(|c| c.vec == 4 && [8, 16].contains(&c.k_tile)).copied().collect();
    if vectors.is_empty() {
        base.into_iter().filter(|c| c.vec == 1).collect()
    } else {
        vectors
    }
}

/// `configs` in the model's order, fastest predicted first (ties keep their order; those
/// that cannot run go last). Deterministic.
pub fn rank(configs: &[GemmConfig], dims: impl Into<Dims>, target: &Target) -> Vec<GemmConfig> {
    let mnk = dims.into();
    let mut scored: Vec<(f64, GemmConfig)> =
        configs.iter().map(|c| (predict(c, mnk, target).unwrap_or(f64::INFINITY), *c)).collect();
    scored.sort_by(|a, b| a.0.total_cmp(&b.0));
    scored.into_iter().map(|(_, c)| c).collect()
}

/// How much slower than the model's best a known-good seed may be predicted and still be
/// the first choice: the model is coarse, and the seeds were measured. The model overrates
/// small tiles: at 1000^3 it predicts the first seed split 2 ways 1.19x slower than its
/// best, which measured 1.02-1.04x cuBLAS (H100 and H200) against 0.77-0.81x for 64 x 64
/// tiles; at 3000^3 the first seed measured 0.92x, 64 x 64 tiles 0.78-0.84x.
pub const SEED_TRUST: f64 = 1.25;

/// The model's first choice for the problem: what is used without timing. The target's
/// first seed (they are in the order they measured) that fits and that the model predicts
/// within [`SEED_TRUST`] of its own best (on the H100 the model's best at 4096^3 measured
/// 0.76x cuBLAS, the first seed 0.84x), else the model's best. Each seed is taken with the
/// split-K setting the model predicts fastest for it among those that give every unit a
/// work-group ([`fills`]): a seed whose M x N tiles leave units idle (a deep reduction over
/// a small C, a 1000^3 problem in 128 tiles on 132 SMs) is split, or passed over for one
/// that fills them (on the H100, deep K 1536 x 1536 x 12288 measured 0.63x cuBLAS with the
/// model's best, 0.93x with the first seed split; 1000^3 1.03x split 2 ways on the H200).
pub fn first_choice(dims: impl Into<Dims>, target: &Target) -> GemmConfig {
    let mnk = dims.into();
    let space = space(mnk.mnk);
    let ranked = rank(&space, mnk, target);
    let best = ranked.first().copied().unwrap_or(space[0]);
    let time = |c: &GemmConfig| predict(c, mnk, target).unwrap_or(f64::INFINITY);
    for seed in &seeds_for(mnk, target) {
        // A large seed is taken as measured, unsplit (its waves are full).
        let c = if target.large_seeds.contains(seed) {
            Some(*seed)
        } else {
            split_seed(seed, mnk, target)
        };
        if let Some(c) = c.filter(|c| time(c) <= SEED_TRUST * time(&best)) {
            return c;
        }
    }
    best
}

/// `seed` with the split-K setting (1, 2, 4, 8 or 16 slices) the model predicts fastest
/// among those that [`fill`](fills) the target's units; `None` when none does.
fn split_seed(seed: &GemmConfig, mnk: Dims, target: &Target) -> Option<GemmConfig> {
    let time = |c: &GemmConfig| predict(c, mnk, target).unwrap_or(f64::INFINITY);
    [1, 2, 4, 8, 16]
        .into_iter()
        .map(|split_k| GemmConfig { split_k, ..*seed })
        .filter(|c| c.validate().is_ok() && splits_exactly(c, mnk.mnk[2]) && fills(c, mnk, target))
        .min_by(|a, b| time(a).total_cmp(&time(b)))
}

/// Whether `c` gives every unit of `target` at least one work-group (M x N tiles times
/// split-K slices times the batch).
pub fn fills(c: &GemmConfig, dims: impl Into<Dims>, target: &Target) -> bool {
    let Dims { mnk: [m, n, k], batch, .. } = dims.into();
    let groups = m.max(1).div_ceil(c.tile_m() as u64)
        * n.max(1).div_ceil(c.tile_n() as u64)
        * c.slices(k)
        * batch.max(1);
    groups >= target.units as u64
}

/// The blockings one step from `c`: work-group sides halved or doubled, register-block
/// sides halved, doubled or swapped, the k-tile halved or doubled, the other buffering
/// depths, vector widths, split-K settings, and unrolling toggled; those valid for the
/// problem (see [`GemmConfig::fits`]). Deterministic order.
pub fn neighbours(c: &GemmConfig, [m, n, k]: [u64; 3]) -> Vec<GemmConfig> {
    let mut out: Vec<GemmConfig> = Vec::new();
    let twice = |v: u32| [v * 2, v / 2];
    for wg_m in twice(c.wg_m) {
        out.push(GemmConfig { wg_m, ..*c });
    }
    for wg_n in twice(c.wg_n) {
        out.push(GemmConfig { wg_n, ..*c });
    }
    for tm in twice(c.tm) {
        out.push(GemmConfig { tm, ..*c });
    }
    for tn in twice(c.tn) {
        out.push(GemmConfig { tn, ..*c });
    }
    out.push(GemmConfig { tm: c.tn, tn: c.tm, ..*c });
    out.push(GemmConfig { wg_m: c.wg_n, wg_n: c.wg_m, ..*c });
    for k_tile in twice(c.k_tile) {
        out.push(GemmConfig { k_tile, ..*c });
    }
    for slm_depth in [1, 2, 3] {
        out.push(GemmConfig { slm_depth, ..*c });
    }
    for vec in [1, 2, 4, 8] {
        out.push(GemmConfig { vec, ..*c });
    }
    for split_k in [c.split_k * 2, c.split_k / 2, 1] {
        out.push(GemmConfig { split_k, ..*c });
    }
    out.push(GemmConfig { unroll: !c.unroll, ..*c });
    let mut seen = HashSet::from([*c]);
    out.retain(|x| {
        x.validate().is_ok()
            && x.fits(m, n, k)
            && (x.vec == 1 || (x.tm % x.vec == 0 && x.tn % x.vec == 0))
            && splits_exactly(x, k)
            && seen.insert(*x)
    });
    out
}

/// What a search timed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Searched {
    /// Blockings and their times, in the order timed.
    pub timings: Vec<(GemmConfig, f64)>,
    /// Blockings that failed to time, with why.
    pub errors: Vec<(GemmConfig, String)>,
}

impl Searched {
    /// The fastest blocking timed and its time.
    pub fn best(&self) -> Option<(GemmConfig, f64)> {
        self.timings.iter().copied().min_by(|a, b| a.1.total_cmp(&b.1))
    }

    fn tried(&self, c: &GemmConfig) -> bool {
        self.timings.iter().any(|(x, _)| x == c) || self.errors.iter().any(|(x, _)| x == c)
    }

    fn time(&mut self, c: GemmConfig, time: &mut dyn FnMut(&GemmConfig) -> Result<f64, String>) {
        match time(&c) {
            Ok(t) => self.timings.push((c, t)),
            Err(e) => self.errors.push((c, e)),
        }
    }
}

/// How many of a search's `budget` timings go to the model's first choices and the seeds
/// before the local search: half, at least one.
fn initial_share(budget: usize) -> usize {
    (budget / 2).max(1)
}

/// Times blockings for a search. [`Timer::prepare`] hears which blockings are to be timed
/// next, before any of them is, so that a timer can build their kernels together (in
/// parallel); [`Timer::time`] times one (seconds, or any measure where less is better).
pub trait Timer {
    /// The blockings about to be timed, the first next. Building ahead is only an
    /// optimization: a blocking not prepared is timed all the same.
    fn prepare(&mut self, _next: &[GemmConfig]) {}
    /// Times `c`.
    fn time(&mut self, c: &GemmConfig) -> Result<f64, String>;
}

/// A [`Timer`] that times with a function and prepares nothing.
struct Each<'a>(&'a mut dyn FnMut(&GemmConfig) -> Result<f64, String>);

impl Timer for Each<'_> {
    fn time(&mut self, c: &GemmConfig) -> Result<f64, String> {
        (self.0)(c)
    }
}

/// Neighbours announced to [`Timer::prepare`] at each step of the local search: those the
/// next steps most likely time, built together.
const PREPARE_AHEAD: usize = 8;

/// The default search: at most `budget` blockings timed with `time` (seconds, or any
/// measure where less is better). First the model's first choice (what `kiln gen` uses
/// untimed, [`first_choice`]), the target's seeds that fit the problem (each also with the
/// split-K setting the first choice would give it) and the model's best, then the untimed neighbours of the fastest so far, in the model's order, moving to
/// a neighbour whenever it is faster; budget left when no neighbour is untimed goes down
/// the model's ranking. Deterministic for a deterministic `time`.
pub fn search(
    mnk: impl Into<Dims>,
    target: &Target,
    budget: usize,
    time: &mut dyn FnMut(&GemmConfig) -> Result<f64, String>,
) -> Searched {
    search_with(mnk, target, budget, &mut Each(time))
}

/// [`search`] with a [`Timer`], told ahead which blockings come next (the same blockings
/// are timed in the same order: preparing changes nothing but when kernels are built).
pub fn search_with(
    dims: impl Into<Dims>,
    target: &Target,
    budget: usize,
    timer: &mut dyn Timer,
) -> Searched {
    let dims = dims.into();
    let mnk = dims.mnk;
    let budget = budget.max(1);
    let ranked = rank(&space(mnk), dims, target);
    let mut out = Searched::default();
    // Each seed, then its split-K setting that fills the units (what the first choice takes
    // of it), when that differs.
    let seeds: Vec<GemmConfig> = seeds_for(dims, target)
        .iter()
        .flat_map(|c| std::iter::once(*c).chain(split_seed(c, dims, target)))
        .collect();
    // The untimed default is always timed, first: a search can then only beat it.
    let default = first_choice(dims, target);
    let mut initial: Vec<GemmConfig> = Vec::new();
    for c in std::iter::once(&default).chain(seeds.iter()).chain(ranked.iter()) {
        if initial.len() >= initial_share(budget) {
            break;
        }
        if !initial.contains(c) {
            initial.push(*c);
        }
    }
    timer.prepare(&initial);
    for c in initial {
        out.time(c, &mut |c| timer.time(c));
    }
    let spent = |s: &Searched| s.timings.len() + s.errors.len();
    while spent(&out) < budget {
        let Some((best, _)) = out.best() else { break };
        let next: Vec<GemmConfig> = rank(&neighbours(&best, mnk), dims, target)
            .into_iter()
            .filter(|c| !out.tried(c))
            .take(PREPARE_AHEAD.min(budget - spent(&out)))
            .collect();
        let Some(&c) = next.first() else { break };
        timer.prepare(&next);
        out.time(c, &mut |c| timer.time(c));
    }
    let rest: Vec<GemmConfig> =
        ranked.iter().filter(|c| !out.tried(c)).take(budget - spent(&out)).copied().collect();
    timer.prepare(&rest);
    for c in rest {
        out.time(c, &mut |c| timer.time(c));
    }
    out
}

/// How much faster than the default (the untimed [`first_choice`]) a blocking must time to
/// win a search ([`winner`]): on the H100, kiln's own timing of a kernel and a benchmark's
/// (cupy launches of the same PTX, random operands) disagreed by up to 15% for 256-work-item
/// blockings against the first seed's 128, always in those blockings' favour. With a 5%
/// margin, searches still replaced the seed by `wg=16x16` blockings 5-9% faster to the
/// tuner and 9-11% slower to the benchmark (256 x 16384 x 2048: 0.84x -> 0.74x cuBLAS;
/// 4096^3 A^T B^T: 0.90x -> 0.82x), against one such win (4096^3 B^T, 7% to the tuner:
/// 0.74x -> 0.81x). Real wins (split-K for deep K, larger tiles for batches) are 30% and
/// more.
pub const DEFAULT_MARGIN: f64 = 0.10;

/// The blocking a search picks: the fastest timed, unless `default` was timed within
/// [`DEFAULT_MARGIN`] of it, then the default. `None` when nothing was timed.
pub fn winner(found: &Searched, default: &GemmConfig) -> Option<GemmConfig> {
    let (best, time) = found.best()?;
    let kept = found.timings.iter().find(|(c, _)| c == default);
    match kept {
        Some((d, t)) if *t * (1.0 - DEFAULT_MARGIN) <= time => Some(*d),
        _ => Some(best),
    }
}

/// Blockings re-timed by [`confirm`]: the fastest few of a search.
pub const FINALISTS: usize = 3;
/// Rounds of [`confirm`]: each times every finalist once, in turn.
pub const CONFIRM_ROUNDS: usize = 3;

/// Re-times the [`FINALISTS`] fastest of `found`, and `default` when it was timed, in
/// [`CONFIRM_ROUNDS`] interleaved rounds (each round times each of them once, in the same
/// order), and replaces their times with the median of their rounds: one timing of a
/// blocking can be off by more than the finalists differ (clocks, other work on the
/// device), and interleaving exposes them all to the same drift. A finalist that fails
/// now moves to the errors. Deterministic for a deterministic `timer`.
pub fn confirm(found: &mut Searched, default: &GemmConfig, timer: &mut dyn Timer) {
    let mut order = found.timings.clone();
    order.sort_by(|a, b| a.1.total_cmp(&b.1));
    let mut finalists: Vec<GemmConfig> = order.iter().take(FINALISTS).map(|x| x.0).collect();
    if !finalists.contains(default) && found.timings.iter().any(|(c, _)| c == default) {
        finalists.push(*default);
    }
    timer.prepare(&finalists);
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); finalists.len()];
    let mut failed: Vec<Option<String>> = vec![None; finalists.len()];
    for _ in 0..CONFIRM_ROUNDS {
        for (i, c) in finalists.iter().enumerate() {
            if failed[i].is_some() {
                continue;
            }
            match timer.time(c) {
                Ok(t) => times[i].push(t),
                Err(e) => failed[i] = Some(e),
            }
        }
    }
    for (i, c) in finalists.iter().enumerate() {
        if let Some(e) = failed[i].take() {
            found.timings.retain(|(x, _)| x != c);
            found.errors.push((*c, e));
            continue;
        }
        times[i].sort_by(f64::total_cmp);
        let median = times[i][times[i].len() / 2];
        for (x, t) in &mut found.timings {
            if x == c {
                *t = median;
            }
        }
    }
}

/// The exhaustive-subset mode: every blocking of [`subset`] timed.
pub fn exhaustive(
    mnk: [u64; 3],
    time: &mut dyn FnMut(&GemmConfig) -> Result<f64, String>,
) -> Searched {
    exhaustive_with(mnk, &mut Each(time))
}

/// [`exhaustive`] with a [`Timer`], told the blockings `PREPARE_AHEAD` at a time.
pub fn exhaustive_with(mnk: [u64; 3], timer: &mut dyn Timer) -> Searched {
    let mut out = Searched::default();
    for chunk in subset(mnk).chunks(PREPARE_AHEAD) {
        timer.prepare(chunk);
        for c in chunk {
            out.time(*c, &mut |c| timer.time(c));
        }
    }
    out
}
