//! The tensor-core tuner's model: ranks the blockings of a tensor-core GEMM or convolution
//! ([`TcConfig::candidates`]) by an estimate of their time on a [`Target`], so that a search
//! times only the best few (`kiln::tune_tc`).
//!
//! The estimate, in cycles, per candidate:
//!
//! * **Resources**: registers per work-item (accumulators, one k-step's fragments, a fixed
//!   overhead) and the kernel's local memory bound how many work-groups an SM holds; a
//!   blocking that spills (more than the target's registers per work-item) or needs more local
//!   memory than one work-group may have is left out.
//! * **Waves**: the tiles of C are run `groups per SM x SMs` at a time; the last wave of a
//!   problem that does not fill the machine costs a whole wave (wave quantisation).
//! * **A wave's time**: the larger of its tensor-core time and its memory time. The tensor-core
//!   time is the wave's padded multiply-adds at the SM's rate, slowed by the share of the SM
//!   its fragment loads take (a load costs about two `mma`s; small warp tiles load more per
//!   `mma`), plus the
//!   stall of every k-step whose copies the other stages' work cannot cover. The memory time
//!   is the operand tiles' bytes at the target's bandwidth times its cache reuse.
//!
//! Ties keep the candidates' order, so the ranking is deterministic.

use std::fmt;
use std::str::FromStr;

use crate::tc::{TcConfig, MAX_LOCAL_BYTES};
use crate::tuner::Target;

/// Dense f16/bf16 `mma.sync` flops per SM per cycle the model assumes (an H100 SM's tensor
/// cores do 1024 multiply-adds per cycle; `mma.sync` is issued at about that rate at best).
const MMA_FLOPS_PER_CYCLE: f64 = 2048.0;

/// A fragment load's cost in the SM's issue, in units of one `mma` (see [`estimate`]).
const LOAD_WEIGHT: f64 = 2.0;

/// Registers every work-item needs besides its accumulators and fragments (indices, addresses,
/// the loop).
const BASE_REGS: u32 = 40;

/// A candidate's estimate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    /// The blocking.
    pub config: TcConfig,
    /// Estimated cycles for the whole problem.
    pub cycles: f64,
    /// Registers per work-item the model assumes.
    pub regs: u32,
    /// Work-groups one SM holds at once.
    pub groups_per_unit: u32,
    /// Waves of work-groups over the machine.
    pub waves: u64,
}

impl fmt::Display for Estimate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {:.0} cycles ({} regs, {} per SM, {} waves)",
            self.config, self.cycles, self.regs, self.groups_per_unit, self.waves
        )
    }
}

/// Registers per work-item of blocking `c`: 4 f32 per 16x8 accumulator (a warp's tile over
/// 32 lanes), one k-step's A (4 per 16 rows) and B (2 per 8 columns) fragments, and
/// `BASE_REGS`.
pub fn registers(c: &TcConfig) -> u32 {
    let (wm, wn) = c.warp_tile();
    wm * wn / 32 + (wm / 16) * 4 + (wn / 8) * 2 + BASE_REGS
}

/// The estimate for blocking `c` on an `m x n x k` problem, or `None` where the blocking
/// cannot run on `target` (it spills, or its local memory does not fit).
pub fn estimate(c: &TcConfig, [m, n, k]: [u64; 3], target: &Target) -> Option<Estimate> {
    c.validate().ok()?;
    let regs = registers(c);
    let bytes = c.local_bytes();
    if regs > target.max_regs_per_item || bytes > MAX_LOCAL_BYTES.min(target.local_per_unit) {
        return None;
    }
    let threads = c.threads();
    let groups_per_unit = (target.local_per_unit / bytes)
        .min(target.regs_per_unit / (regs * threads))
        .min(target.max_items_per_unit / threads)
        .min(target.max_groups_per_unit);
    if groups_per_unit == 0 {
        return None;
    }
    let (bm, bn, bk) = (c.bm as u64, c.bn as u64, c.bk as u64);
    let tiles = m.div_ceil(bm) * n.div_ceil(bn);
    let slots = groups_per_unit as u64 * target.units as u64;
    let waves = tiles.div_ceil(slots);
    let ksteps = k.div_ceil(bk).max(1);
    // Issue share: per 16-deep k-step a warp issues (wm/16)(wn/8) mma and (wm + wn)/16
    // four-matrix fragment loads; a load (512 bytes at the SM's 128 bytes of local memory a
    // cycle) takes about twice an mma's share of the SM (2 cycles at 1024 multiply-adds a
    // cycle).
    let (wm, wn) = c.warp_tile();
    let mmas = (wm / 16 * (wn / 8)) as f64;
    let loads = ((wm + wn) / 16) as f64;
    let issue = mmas / (mmas + LOAD_WEIGHT * loads);
    // One k-step of the SM's resident groups (as many as a wave gives an SM: fewer than fit
    // when the tiles do not fill the machine), and what is left of a copy's latency after
    // the other stages' steps.
    let busy = (groups_per_unit as u64).min(tiles.div_ceil(target.units as u64)).max(1);
    let step_flops = 2.0 * (bm * bn * bk) as f64 * busy as f64;
    let step = step_flops / (MMA_FLOPS_PER_CYCLE * issue) + target.barrier_cycles as f64;
    let stall = (target.load_latency as f64 - (c.stages - 1) as f64 * step).max(0.0);
    let compute = ksteps as f64 * (step + stall);
    // The wave's operand tiles (2-byte elements), the whole machine's at once.
    let wave_tiles = tiles.min(slots) as f64;
    let bytes = wave_tiles * ((bm + bn) * bk * 2 * ksteps) as f64;
    let memory = bytes / (target.bytes_per_cycle * target.cache_reuse);
    let cycles = waves as f64 * compute.max(memory);
    Some(Estimate { config: *c, cycles, regs, groups_per_unit, waves })
}

/// The candidates for an `m x n x k` problem that can run on `target`, fastest estimate first
/// (ties in the candidates' order).
pub fn rank(mnk: [u64; 3], target: &Target) -> Vec<Estimate> {
    let mut out: Vec<Estimate> = TcConfig::candidates(mnk[0], mnk[1], mnk[2])
        .iter()
        .filter_map(|c| estimate(c, mnk, target))
        .collect();
    out.sort_by(|a, b| a.cycles.total_cmp(&b.cycles));
    out
}

/// The model's first choice (the default blocking where no candidate fits `target`).
pub fn first_choice(mnk: [u64; 3], target: &Target) -> TcConfig {
    rank(mnk, target).first().map_or_else(TcConfig::default, |e| e.config)
}

impl FromStr for TcConfig {
    type Err = String;

    /// Parses the [`Display`](fmt::Display) form, `block=128x128x32 warps=2x4 stages=2`
    /// (every field, any order), and validates it.
    fn from_str(s: &str) -> Result<TcConfig, String> {
        let mut c = TcConfig::default();
        let mut seen = Vec::new();
        let num = |v: &str| v.parse::<u32>().map_err(|_| format!("config: `{v}` is not a number"));
        for word in s.split_whitespace() {
            let (key, v) =
                word.split_once('=').ok_or(format!("config: `{word}` is not key=value"))?;
            let parts = v.split('x').map(num).collect::<Result<Vec<u32>, String>>()?;
            match (key, parts.as_slice()) {
                ("block", &[m, n, k]) => (c.bm, c.bn, c.bk) = (m, n, k),
                ("warps", &[m, n]) => (c.warps_m, c.warps_n) = (m, n),
                ("stages", &[s]) => c.stages = s,
                ("block" | "warps" | "stages", _) => {
                    return Err(format!("config: `{word}` has the wrong number of sizes"))
                }
                _ => return Err(format!("config: unknown key `{key}`")),
            }
            seen.push(key);
        }
        for key in ["block", "warps", "stages"] {
            if !seen.contains(&key) {
                return Err(format!("config: `{key}=` is missing"));
            }
        }
        c.validate()?;
        Ok(c)
    }
}
