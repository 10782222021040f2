//! The fusion key: what identifies a fused kernel for caching.

use std::hash::{Hash, Hasher};

use kiln_ir::Module;

use super::spec::{BarrierPolicy, ConstValue, FusionSpec, ParamRef, RemapMode};

/// A stable cache key for a fusion request: the kernels' identities (name and structural
/// hash) in order, the identical-parameter partition (normalized: transitive closure,
/// sorted), the barrier policy, the remapping mode, the promotions, the constants (by bits) and the
/// nd-ranges, these only when they are not all equal (or a promoted size is derived from them). Two specs with equal keys produce the
/// same fused kernel from the same module.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FusionKey(pub String);

impl std::fmt::Display for FusionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Computes the key of `spec` over `module` (kernels missing from the module are keyed by
/// name alone; fusing them fails anyway).
pub fn fusion_key(module: &Module, spec: &FusionSpec) -> FusionKey {
    let mut out = format!("name={};kernels=", spec.name);
    for k in &spec.kernels {
        let h = module.kernel(k).map_or(0, |k| {
            let mut s = std::hash::DefaultHasher::new();
            k.hash(&mut s);
            s.finish()
        });
        out.push_str(&format!("{k}#{h:016x},"));
    }
    // Identical groups: the transitive closure, as sorted classes.
    let mut classes: Vec<Vec<ParamRef>> = Vec::new();
    for g in &spec.identical {
        let mut merged: Vec<ParamRef> = g.clone();
        let mut rest = Vec::new();
        for c in classes.drain(..) {
            if c.iter().any(|p| merged.contains(p)) {
                merged.extend(c);
            } else {
                rest.push(c);
            }
        }
        merged.sort();
        merged.dedup();
        rest.push(merged);
        classes = rest;
    }
    classes.retain(|c| c.len() > 1);
    classes.sort();
    out.push_str(";identical=");
    for c in &classes {
        let s: Vec<String> = c.iter().map(|p| format!("{}.{}", p.entry, p.param)).collect();
        out.push_str(&format!("[{}]", s.join(",")));
    }
    out.push_str(match spec.barriers {
        BarrierPolicy::WorkGroup => ";barriers=wg",
        BarrierPolicy::None => ";barriers=none",
    });
    out.push_str(match spec.remap {
        RemapMode::Default => ";remap=default",
        RemapMode::Ptx => ";remap=ptx",
    });
    let mut promos: Vec<String> = spec
        .promote
        .iter()
        .map(|p| {
            format!(
                "{}.{}:{}:{:?}:{:?}",
                p.param.entry,
                p.param.param,
                p.to.name(),
                p.size,
                p.buffer_len
            )
        })
        .collect();
    promos.sort();
    out.push_str(&format!(";promote=[{}]", promos.join(",")));
    let mut consts: Vec<String> = spec
        .constants
        .iter()
        .map(|c| {
            // Floats by their bits: NaNs with different payloads (or 0.0 and -0.0) are
            // different constants of different fused kernels.
            let v = match c.value {
                ConstValue::Float(f) => format!("f{:016x}", f.to_bits()),
                v => format!("{v:?}"),
            };
            format!("{}.{}={v}", c.param.entry, c.param.param)
        })
        .collect();
    consts.sort();
    out.push_str(&format!(";constants=[{}]", consts.join(",")));
    // Equal ranges leave the fused kernel independent of the range, except where a promoted
    // size is derived from it.
    let derived = spec.promote.iter().any(|p| p.size.is_none());
    if derived || spec.ndranges.windows(2).any(|w| w[0] != w[1]) {
        out.push_str(";ndranges=");
        for r in &spec.ndranges {
            out.push_str(&format!("{:?}/{:?}/{:?},", r.global, r.local, r.offset));
        }
    }
    FusionKey(out)
}
