//! The fusion key: what identifies a fused kernel for caching.

use std::hash::{Hash, Hasher};

use kiln_ir::Module;

use super::spec::{
    BarrierPolicy, ConstValue, FusionSpec, ParamRef, PromoteTo, RangeSpec, RemapMode,
};

/// A stable cache key for a fusion request: the kernels' identities (name and structural
/// hash) in order, the identical-parameter partition (normalized: transitive closure,
/// sorted), the barrier policy, the remapping mode, the promotions, the constants (by bits)
/// and the nd-ranges, these only when they are not all equal (or a promoted size is derived
/// from them). Two specs with equal keys produce the same fused kernel from the same module.
///
/// The key holds these as values (hashed and compared as they are, nothing formatted);
/// `Display` prints them in one line (`kiln fuse` shows it).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FusionKey {
    name: String,
    /// Each entry's kernel name and the structural hash of its IR (0 when the module lacks it).
    kernels: Vec<(String, u64)>,
    identical: Vec<Vec<ParamRef>>,
    barriers: BarrierPolicy,
    remap: RemapMode,
    epilogue: bool,
    /// Sorted.
    promote: Vec<(ParamRef, PromoteTo, Option<u32>, Option<u32>)>,
    /// Sorted; floats by their bits: NaNs with different payloads (or 0.0 and -0.0) are
    /// different constants of different fused kernels.
    constants: Vec<(ParamRef, ConstBits)>,
    ndranges: Option<Vec<RangeSpec>>,
}

/// A constant's value by its bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum ConstBits {
    Int(i128),
    Float(u64),
    Bool(bool),
}

impl std::fmt::Display for FusionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "name={};kernels=", self.name)?;
        for (k, h) in &self.kernels {
            write!(f, "{k}#{h:016x},")?;
        }
        f.write_str(";identical=")?;
        for c in &self.identical {
            let s: Vec<String> = c.iter().map(|p| format!("{}.{}", p.entry, p.param)).collect();
            write!(f, "[{}]", s.join(","))?;
        }
        f.write_str(match self.barriers {
            BarrierPolicy::WorkGroup => ";barriers=wg",
            BarrierPolicy::None => ";barriers=none",
        })?;
        f.write_str(match self.remap {
            RemapMode::Default => ";remap=default",
            RemapMode::Ptx => ";remap=ptx",
        })?;
        let promos: Vec<String> = (self.promote.iter())
            .map(|(p, to, size, len)| {
                format!("{}.{}:{}:{size:?}:{len:?}", p.entry, p.param, to.name())
            })
            .collect();
        write!(f, ";promote=[{}]", promos.join(","))?;
        let consts: Vec<String> = (self.constants.iter())
            .map(|(p, v)| {
                let v = match v {
                    ConstBits::Int(i) => format!("Int({i})"),
                    ConstBits::Float(b) => format!("f{b:016x}"),
                    ConstBits::Bool(b) => format!("Bool({b})"),
                };
                format!("{}.{}={v}", p.entry, p.param)
            })
            .collect();
        write!(f, ";constants=[{}]", consts.join(","))?;
        if let Some(rs) = &self.ndranges {
            f.write_str(";ndranges=")?;
            for r in rs {
                write!(f, "{:?}/{:?}/{:?},", r.global, r.local, r.offset)?;
            }
        }
        Ok(())
    }
}

/// Computes the key of `spec` over `module` (kernels missing from the module are keyed by
/// name alone; fusing them fails anyway).
pub fn fusion_key(module: &Module, spec: &FusionSpec) -> FusionKey {
    let kernels = (spec.kernels.iter())
        .map(|k| {
            let h = module.kernel(k).map_or(0, |k| {
                let mut s = std::hash::DefaultHasher::new();
                k.hash(&mut s);
                s.finish()
            });
            (k.clone(), h)
        })
        .collect();
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
    let mut promote: Vec<_> =
        spec.promote.iter().map(|p| (p.param, p.to, p.size, p.buffer_len)).collect();
    promote.sort_by_key(|&(p, to, size, len)| (p, to.name(), size, len));
    let mut constants: Vec<_> = (spec.constants.iter())
        .map(|c| {
            let v = match c.value {
                ConstValue::Int(i) => ConstBits::Int(i),
                ConstValue::Float(f) => ConstBits::Float(f.to_bits()),
                ConstValue::Bool(b) => ConstBits::Bool(b),
            };
            (c.param, v)
        })
        .collect();
    constants.sort();
    // Equal ranges leave the fused kernel independent of the range, except where a promoted
    // size is derived from it.
    let derived = spec.promote.iter().any(|p| p.size.is_none());
    // An epilogue's inverse index map is made from every entry's range.
    let ndranges = (derived || spec.epilogue || spec.ndranges.windows(2).any(|w| w[0] != w[1]))
        .then(|| spec.ndranges.clone());
    FusionKey {
        name: spec.name.clone(),
        kernels,
        identical: classes,
        barriers: spec.barriers,
        remap: spec.remap,
        epilogue: spec.epilogue,
        promote,
        constants,
        ndranges,
    }
}
