//! Work-item remapping: the built-ins of one entry, rewritten for the fused nd-range.
//!
//! Formulas (see [`super::ndrange`] for the dimension-order translation), for an entry of
//! global size `GS`, offset `GO`, explicit local size `LS`, and `GLID` the fused kernel's
//! global linear id:
//!
//! * ids (only when the entry needs id remapping): `global_id(d) = GO(d) + (GLID / (GS(0) *
//!   ... * GS(d-1))) % GS(d)`; `local_id(d) = gid(d) % local_size(d)`, `group_id(d) = gid(d)
//!   / local_size(d)`, with `gid` the id relative to the offset and `local_size` the
//!   remapped one;
//! * `global_size(d) = GS(d)`, `global_offset(d) = GO(d)`: always, in a heterogeneous list;
//! * `local_size(d) = LS(d)`, `num_groups(d) = GS(d) / LS(d)`: when the entry runs with a
//!   known local size; without one, `num_groups(d) = GS(d) / local_size(d)` (the design
//!   leaves `num_groups` alone there, which would report the fused range's group count);
//! * PTX mode, without a known local size: `num_groups = 1`, `group_id = 0`,
//!   `local_size = GS`, `local_id = global_id`.
//!
//! Dimensions past an entry's own have size 1, offset 0 and id 0, as in an unfused launch.

use kiln_ir::{Builtin, Expr, Var};

use super::ndrange::EntryPlan;
use super::spec::RemapMode;

/// Rewrites built-ins of one entry.
pub(crate) struct Remap<'a> {
    pub plan: &'a EntryPlan,
    pub heterogeneous: bool,
    pub mode: RemapMode,
    /// The fused kernel's global linear id variable.
    pub glid: &'a Var,
}

impl Remap<'_> {
    /// The replacement for `kind(dim)`, or `None` to keep the built-in.
    pub fn builtin(&self, kind: Builtin, dim: u8) -> Option<Expr> {
        if !self.heterogeneous {
            return None;
        }
        let d = dim as usize;
        if d >= 3 {
            return None;
        }
        let r = &self.plan.range;
        let gs = r.global;
        let ls = self.plan.local;
        let ptx_open = self.mode == RemapMode::Ptx && ls.is_none();
        match kind {
            Builtin::GlobalSize => Some(Expr::u32(gs[d])),
            Builtin::GlobalOffset => Some(Expr::u32(self.plan.offset[d])),
            Builtin::LocalSize => match ls {
                Some(l) => Some(Expr::u32(l[d])),
                None if ptx_open => Some(Expr::u32(gs[d])),
                None => None,
            },
            Builtin::NumGroups => match ls {
                Some(l) => Some(Expr::u32(gs[d] / l[d])),
                None if ptx_open => Some(Expr::u32(1)),
                // Beyond the design (which leaves it alone without a local size): the entry's
                // group count under the local size it actually runs with.
                None => Some(Expr::u32(gs[d]) / Expr::builtin(Builtin::LocalSize, dim)),
            },
            Builtin::GlobalId if self.plan.remap_ids => {
                Some(self.rel_id(d) + Expr::u32(self.plan.offset[d]))
            }
            Builtin::LocalId if ptx_open => {
                // local_id = global_id (the remapped one, when ids are remapped).
                if self.plan.remap_ids {
                    Some(self.rel_id(d) + Expr::u32(self.plan.offset[d]))
                } else {
                    Some(Expr::global_id(dim))
                }
            }
            Builtin::GroupId if ptx_open => Some(Expr::u32(0)),
            Builtin::LocalId if self.plan.remap_ids => Some(match ls {
                Some(l) => self.rel_id(d) % Expr::u32(l[d]),
                None => self.rel_id(d) % Expr::builtin(Builtin::LocalSize, dim),
            }),
            Builtin::GroupId if self.plan.remap_ids => Some(match ls {
                Some(l) => self.rel_id(d) / Expr::u32(l[d]),
                None => self.rel_id(d) / Expr::builtin(Builtin::LocalSize, dim),
            }),
            _ => None,
        }
    }

    /// The entry's id in dimension `d` relative to its offset, from the global linear id.
    fn rel_id(&self, d: usize) -> Expr {
        let gs = self.plan.range.global;
        if d >= self.plan.range.dims || gs[d] == 1 {
            return Expr::u32(0);
        }
        let below: u32 = gs[..d].iter().product();
        let mut e = self.glid.expr();
        if below != 1 {
            e = e / Expr::u32(below);
        }
        if d + 1 < self.plan.range.dims {
            e = e % Expr::u32(gs[d]);
        }
        e
    }
}
