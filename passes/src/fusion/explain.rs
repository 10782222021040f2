//! Why fusion decides what it does about each buffer the entries share: per access, its
//! guard, whether its index is analysable and in bounds; per buffer, whether it may stay in
//! global memory per work-item or per work-group, and what became of a promotion request.
//! `kiln fuse --explain` prints this; the runtime's fusion refusals quote the same reasons.

use std::fmt;

use kiln_ir::Module;

use super::legality::{self, AccessVerdict};
use super::spec::{FusionSpec, ParamRef, PromoteTo};
use super::{fuse, promote, FusionError};

/// What fusion decides about one buffer (a class of identical parameters) that more than
/// one entry touches, or that a promotion request names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BufferReport {
    /// The buffer's first parameter.
    pub param: ParamRef,
    /// That parameter's name and its kernel's.
    pub name: String,
    /// The kernel of `param`'s entry.
    pub kernel: String,
    /// Its accesses in every entry, in program order.
    pub accesses: Vec<AccessVerdict>,
    /// Whether it may stay in global memory with each work-item running the entries one
    /// after another (no work-item needs another's element), or why not.
    pub per_work_item: Result<(), String>,
    /// The same per work-group (with the work-group barrier between the entries); `None`
    /// without an explicit local size.
    pub per_work_group: Option<Result<(), String>>,
    /// The promotion asked for, and whether it is done or why not.
    pub promotion: Option<(PromoteTo, Result<(), String>)>,
}

/// The report on every buffer more than one entry touches or a promotion names, in the
/// order of their first parameters.
pub fn explain(module: &Module, spec: &FusionSpec) -> Result<Vec<BufferReport>, FusionError> {
    let module = &kiln_ir::depth::bound_module(module);
    let (params, plan, consts) = fuse::analyse(module, spec)?;
    // The promotions fusion would refuse, from the same analysis (no kernel is built).
    let (_, refusals) = promote::resolve(spec, &params, &plan, &consts)?;
    let mut out = Vec::new();
    for (i, (pref, var)) in params.all.iter().enumerate() {
        if params.roots[i] != i || !var.ty().is_ptr() {
            continue;
        }
        let names_in = params.names_in_entries(i);
        let entries = names_in.len();
        let requests: Vec<_> = spec
            .promote
            .iter()
            .filter(|p| params.flat(p.param).is_ok_and(|f| params.roots[f] == i))
            .collect();
        if entries < 2 && requests.is_empty() {
            continue;
        }
        let buffer_len = requests.iter().filter_map(|p| p.buffer_len).min();
        let touchers = promote::touchers(&params, &plan, &consts, &names_in);
        let accesses = legality::describe(&plan.fused, buffer_len, &touchers);
        let verdict = |to| promote::in_place(spec, &params, &plan, &consts, *pref, to, buffer_len);
        let promotion = requests.first().map(|r| {
            let in_class = |p: &ParamRef| params.flat(*p).is_ok_and(|f| params.roots[f] == i);
            let refused = refusals.iter().find(|w| in_class(&w.param));
            (r.to, refused.map_or(Ok(()), |w| Err(w.reason.clone())))
        });
        out.push(BufferReport {
            param: *pref,
            name: var.name().to_string(),
            kernel: params.kernels[pref.entry].name().to_string(),
            accesses,
            per_work_item: verdict(PromoteTo::Private),
            per_work_group: plan.fused.local.map(|_| verdict(PromoteTo::Local)),
            promotion,
        });
    }
    Ok(out)
}

impl fmt::Display for BufferReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = |r: &Result<(), String>| match r {
            Ok(()) => "yes".to_string(),
            Err(why) => format!("no: {why}"),
        };
        writeln!(
            f,
            "buffer `{}` of `{}` (parameter ({}, {})):",
            self.name, self.kernel, self.param.entry, self.param.param
        )?;
        for a in &self.accesses {
            let guard = if a.guard.is_empty() {
                "(every work-item)".to_string()
            } else {
                format!("under `{}`", a.guard.join("` and `"))
            };
            let index = match &a.affine {
                Ok(()) if a.in_bounds => "affine index, in bounds".to_string(),
                Ok(()) => "affine index, not proven in bounds".to_string(),
                Err(why) => format!("index not analysable ({why})"),
            };
            let sure = if a.write && !a.exact_guard { ", may not run" } else { "" };
            writeln!(
                f,
                "  entry {} {} `{}` {guard}: {index}{sure}",
                a.entry,
                if a.write { "writes" } else { "reads" },
                a.text
            )?;
        }
        writeln!(f, "  in global memory, per work-item: {}", verdict(&self.per_work_item))?;
        if let Some(g) = &self.per_work_group {
            writeln!(f, "  in global memory, per work-group: {}", verdict(g))?;
        }
        match &self.promotion {
            Some((to, r)) => {
                let to = match to {
                    PromoteTo::Private => "private",
                    PromoteTo::Local => "local",
                    PromoteTo::None => "none",
                };
                let r = match r {
                    Ok(()) => "done".to_string(),
                    Err(why) => format!("refused: {why}"),
                };
                write!(f, "  promotion to {to}: {r}")
            }
            None => write!(f, "  promotion: not requested"),
        }
    }
}
