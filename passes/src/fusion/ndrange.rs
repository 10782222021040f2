//! Fused nd-range selection and the legality rules of the design ("Fusing kernels with
//! different nd-ranges").
//!
//! ## Dimension order
//!
//! The design is written in SYCL's order, where the *last* dimension varies fastest; kiln's
//! dimension 0 varies fastest. The translation used here:
//!
//! * SYCL's "dimensions after the first" (`global_size` in `[2, num_dims]`) are every kiln
//!   dimension except the slowest-varying one, i.e. kiln dimensions `0 .. dims-1`.
//! * "Lexicographically largest" compares sizes slowest dimension first (SYCL order).
//! * The id formulas `gid0 = GLID/(gs1*gs2)`, `gid1 = (GLID/gs2) % gs1`, `gid2 = GLID % gs2`
//!   become, in kiln order, `gid(d) = (GLID / (gs(0) * ... * gs(d-1))) % gs(d)`.
//! * The global linear id is kiln's `x + gs0 * (y + gs1 * z)` on ids relative to the
//!   offset, which is the same number SYCL computes; it is invariant under fusion.

use kiln_ir::launch::NdRange;
use kiln_ir::Kernel;

use super::spec::RangeSpec;
use super::FusionError;

/// An entry's range after validation, padded to three dimensions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Norm {
    pub dims: usize,
    pub global: [u32; 3],
    /// Explicit local size: the spec's, or the kernel's `#reqd_work_group_size`.
    pub local: Option<[u32; 3]>,
    pub offset: Option<[u32; 3]>,
}

impl Norm {
    pub fn linear(&self) -> u64 {
        self.global.iter().map(|&g| g as u64).product()
    }
}

fn pad(v: &[u32], fill: u32) -> [u32; 3] {
    let mut o = [fill; 3];
    for (a, b) in o.iter_mut().zip(v) {
        *a = *b;
    }
    o
}

/// Validates one entry's range.
pub(crate) fn normalize(entry: usize, r: &RangeSpec, k: &Kernel) -> Result<Norm, FusionError> {
    let bad = |why: String| FusionError::BadRange { entry, why };
    let dims = r.global.len();
    if !(1..=3).contains(&dims) {
        return Err(bad(format!("{dims} dimensions (1 to 3 allowed)")));
    }
    if r.global.contains(&0) {
        return Err(bad("a global size is 0".into()));
    }
    let global = pad(&r.global, 1);
    let mut local = None;
    if let Some(l) = &r.local {
        if l.len() != dims {
            return Err(bad(format!("local size has {} entries for {dims} dimensions", l.len())));
        }
        if l.contains(&0) {
            return Err(bad("a local size is 0".into()));
        }
        let l = pad(l, 1);
        if (0..3).any(|d| !global[d].is_multiple_of(l[d])) {
            return Err(bad(format!(
                "global size {global:?} is not a multiple of local size {l:?}"
            )));
        }
        local = Some(l);
    }
    if let Some(reqd) = k.attrs().reqd_work_group_size {
        match local {
            Some(l) if l != reqd => {
                return Err(bad(format!(
                    "local size {l:?} differs from #reqd_work_group_size {reqd:?}"
                )))
            }
            _ => local = Some(reqd),
        }
    }
    let mut offset = None;
    if let Some(o) = &r.offset {
        if o.len() != dims {
            return Err(bad(format!("offset has {} entries for {dims} dimensions", o.len())));
        }
        let o = pad(o, 0);
        if (0..3).any(|d| o[d] as u64 + global[d] as u64 > u32::MAX as u64 + 1) {
            return Err(bad("offset + global size exceeds the u32 id range".into()));
        }
        offset = Some(o);
    }
    Ok(Norm { dims, global, local, offset })
}

/// The fused nd-range and, per entry, what remapping it needs.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub fused: NdRange,
    /// True when not every entry has the fused dims and global size.
    pub heterogeneous: bool,
    pub entries: Vec<EntryPlan>,
}

/// How one entry is placed in the fused kernel.
#[derive(Clone, Debug)]
pub(crate) struct EntryPlan {
    pub range: Norm,
    /// The offset it effectively runs with.
    pub offset: [u32; 3],
    /// The local size it effectively runs with, if known (its own or the fused one).
    pub local: Option<[u32; 3]>,
    /// Needs `if GLID < linear size`.
    pub guard: bool,
    /// global/local/group ids are recomputed from the global linear id.
    pub remap_ids: bool,
}

/// True if `r` needs its ids remapped to run inside `fused` (design: the dims differ or a
/// global size differs in a dimension other than the slowest-varying one).
fn needs_id_remap(r: &Norm, dims: usize, global: &[u32; 3]) -> bool {
    r.dims != dims || (0..dims - 1).any(|d| r.global[d] != global[d])
}

/// Chooses the fused nd-range and checks every legality rule.
pub(crate) fn plan(
    ranges: &[Norm],
    kernels: &[&Kernel],
    syncs: &[bool],
) -> Result<Plan, FusionError> {
    // Dims: the largest. Global: largest linear size; ties: most frequent, then
    // lexicographically largest in SYCL order (slowest dimension first).
    let dims = ranges.iter().map(|r| r.dims).max().unwrap_or(1);
    let mut best: Option<(u64, usize, [u32; 3])> = None;
    for r in ranges {
        let freq = ranges.iter().filter(|o| o.global == r.global).count();
        let key = (r.linear(), freq, [r.global[2], r.global[1], r.global[0]]);
        if best.is_none_or(|b| key > b) {
            best = Some(key);
        }
    }
    let [g2, g1, g0] = best.map_or([1, 1, 1], |b| b.2);
    let global = [g0, g1, g2];

    // Local sizes and offsets: every specified one must agree.
    let mut local: Option<([u32; 3], usize)> = None;
    let mut offset: Option<([u32; 3], usize)> = None;
    for (i, r) in ranges.iter().enumerate() {
        if let Some(l) = r.local {
            match local {
                Some((l0, e0)) if l0 != l => {
                    return Err(FusionError::LocalSizeMismatch { first: e0, second: i })
                }
                None => local = Some((l, i)),
                _ => {}
            }
        }
        if let Some(o) = r.offset {
            match offset {
                Some((o0, e0)) if o0 != o => {
                    return Err(FusionError::OffsetMismatch { first: e0, second: i })
                }
                None => offset = Some((o, i)),
                _ => {}
            }
        }
    }
    let local = local.map(|l| l.0);
    let off = offset.map_or([0; 3], |o| o.0);
    // `#reqd_work_group_size` attributes must agree (they are folded into `local` above, so a
    // disagreement is already a local size mismatch; this names the attribute rule).
    let mut reqd: Option<([u32; 3], usize)> = None;
    for (i, k) in kernels.iter().enumerate() {
        if let Some(r) = k.attrs().reqd_work_group_size {
            match reqd {
                Some((r0, e0)) if r0 != r => {
                    return Err(FusionError::ReqdWorkGroupSizeMismatch { first: e0, second: i })
                }
                None => reqd = Some((r, i)),
                _ => {}
            }
        }
    }

    let heterogeneous = ranges.iter().any(|r| r.dims != dims || r.global != global);
    let fused_linear: u64 = global.iter().map(|&g| g as u64).product();
    // The guards and remapped ids compute on a u32 linear id: beyond 2^32 it would wrap.
    if heterogeneous && fused_linear > 1 << 32 {
        return Err(FusionError::TooManyWorkItems { items: fused_linear });
    }
    let mut entries = Vec::with_capacity(ranges.len());
    for (i, r) in ranges.iter().enumerate() {
        let remap_ids = heterogeneous && needs_id_remap(r, dims, &global);
        let guard = r.linear() < fused_linear;
        if heterogeneous {
            if let Some(l) = local {
                if (0..3)
                    .any(|d| !global[d].is_multiple_of(l[d]) || !r.global[d].is_multiple_of(l[d]))
                {
                    return Err(FusionError::NotDivisible { entry: i, local: l });
                }
            }
            if remap_ids && off != [0; 3] {
                return Err(FusionError::OffsetWithRemap { entry: i });
            }
            if remap_ids && r.local.is_some() {
                return Err(FusionError::LocalSizeWithRemap { entry: i });
            }
            if (remap_ids || guard) && local.is_none() && syncs[i] {
                return Err(FusionError::WorkGroupNotPreserved { entry: i });
            }
            if remap_ids && local.is_some() && syncs[i] {
                return Err(FusionError::WorkGroupNotPreserved { entry: i });
            }
        }
        entries.push(EntryPlan {
            range: r.clone(),
            offset: r.offset.unwrap_or(off),
            local: r.local.or(local),
            guard,
            remap_ids,
        });
    }
    let mut fused = NdRange::new(&global[..dims]).with_offset(&off[..dims]);
    if let Some(l) = local {
        fused = fused.with_local(&l[..dims]);
    }
    Ok(Plan { fused, heterogeneous, entries })
}
