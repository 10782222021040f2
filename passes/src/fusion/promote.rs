//! Step 3b of fusion: which promotion requests are honoured. A request is honoured only
//! when it is consistent (one kind, one size, not also a constant), the pointer never
//! escapes, and [`super::legality`] proves every access exact; otherwise the buffer stays in
//! global memory with a [`FusionWarning`] saying why.

use hashbrown::HashMap;
use kiln_ir::{Imm, Visitor};

use super::fuse::Params;
use super::ndrange::Plan;
use super::spec::{FusionSpec, ParamRef, PromoteTo};
use super::{internalize, legality, FusionError, FusionWarning};

/// One request on a class of identical parameters: (requested on, to, size, buffer_len).
type Request = (ParamRef, PromoteTo, Option<u32>, Option<u32>);

/// The honoured promotions per class root (where to, how many elements).
type Promoted = HashMap<usize, (PromoteTo, u32)>;

/// The requests per class root, and the roots in the order of their first request.
type Requests = (HashMap<usize, Vec<Request>>, Vec<usize>);

/// The honoured promotions, per class root: where to and how many elements; and a warning
/// for each refused one.
pub(super) fn resolve(
    spec: &FusionSpec,
    params: &Params,
    plan: &Plan,
    consts: &HashMap<usize, Imm>,
) -> Result<(Promoted, Vec<FusionWarning>), FusionError> {
    let mut warnings = Vec::new();
    let (requests, order) = requests(spec, params, plan)?;
    let mut promoted = HashMap::new();
    for root in order {
        let reqs = &requests[&root];
        match honour(spec, params, plan, consts, root, reqs) {
            Ok(Some(p)) => {
                promoted.insert(root, p);
            }
            Ok(None) => {}
            Err(reason) => warnings.push(FusionWarning { param: reqs[0].0, reason }),
        }
    }
    Ok((promoted, warnings))
}

/// The requests per class root, and the roots in the order of their first request.
fn requests(spec: &FusionSpec, params: &Params, plan: &Plan) -> Result<Requests, FusionError> {
    let fused_items = plan.fused.work_items();
    let groups = plan
        .fused
        .local
        .map(|l| (0..plan.fused.dims).map(|d| (plan.fused.global[d] / l[d]) as u64).product());
    let mut requests: HashMap<usize, Vec<Request>> = HashMap::new();
    let mut order = Vec::new();
    for pr in &spec.promote {
        let i = params.flat(pr.param)?;
        let ty = params.all[i].1.ty();
        if !ty.is_ptr() {
            return Err(FusionError::PromoteNotBuffer { at: pr.param, ty });
        }
        let size = pr.size.or_else(|| {
            let len = pr.buffer_len? as u64;
            let per: u64 = match pr.to {
                PromoteTo::Local => groups?,
                _ => fused_items,
            };
            // Rounded up: a range rounded up to the work-group size has more work-items
            // than elements, and the guarded ones own none (the legality check decides).
            u32::try_from(len.div_ceil(per.max(1))).ok()
        });
        let root = params.roots[i];
        if !requests.contains_key(&root) {
            order.push(root);
        }
        requests.entry(root).or_default().push((pr.param, pr.to, size, pr.buffer_len));
    }
    Ok((requests, order))
}

/// Whether the requests on class `root` can be honoured: `Ok(None)` for an explicit
/// `none`, `Err` with the reason for a refusal.
fn honour(
    spec: &FusionSpec,
    params: &Params,
    plan: &Plan,
    consts: &HashMap<usize, Imm>,
    root: usize,
    reqs: &[Request],
) -> Result<Option<(PromoteTo, u32)>, String> {
    // A request on any member covers the whole argument; an explicit `none` on the same
    // argument conflicts.
    let kinds: Vec<PromoteTo> = reqs.iter().map(|r| r.1).collect();
    if kinds.contains(&PromoteTo::None) {
        if kinds.iter().any(|k| *k != PromoteTo::None) {
            return Err("conflicting requests: none and private/local".into());
        }
        return Ok(None);
    }
    let to = if kinds.contains(&PromoteTo::Local) { PromoteTo::Local } else { PromoteTo::Private };
    if to == PromoteTo::Local && plan.fused.local.is_none() {
        return Err("local promotion needs an explicit local size".into());
    }
    let sizes: Vec<Option<u32>> = reqs.iter().map(|r| r.2).collect();
    if sizes.iter().any(|s| *s != sizes[0]) {
        return Err("conflicting requests: different sizes".into());
    }
    let Some(size) = sizes[0].filter(|&s| s > 0) else {
        return Err("no usable size (give `size`, or a `buffer_len` of at least one element \
                    per work-item/work-group)"
            .into());
    };
    if consts.contains_key(&root) {
        return Err("the parameter is also a constant".into());
    }
    let names_in = params.names_in_entries(root);
    if escapes(params, &names_in) {
        return Err(
            "the pointer escapes (used other than as `p[i]`: bound, passed to a call, cast)".into(),
        );
    }
    let touchers = touchers(params, plan, consts, &names_in);
    let req = legality::Request {
        to,
        size,
        // The smallest length given (a larger one cannot be true of the same buffer).
        buffer_len: reqs.iter().filter_map(|r| r.3).min(),
        barriers: spec.barriers,
        fresh: true,
    };
    legality::check(&plan.fused, &req, &touchers).map_err(|why| {
        let (e, p) = (params.all[root].0.entry, params.all[root].1.name());
        format!("`{p}` of `{}` stays in global memory: {why}", params.kernels[e].name())
    })?;
    Ok(Some((to, size)))
}

/// Whether a use of the class's pointer, in any entry, is other than `p[i]`.
pub(super) fn escapes(params: &Params, names_in: &[(usize, Vec<String>)]) -> bool {
    names_in.iter().any(|(e, names)| {
        let mut v = internalize::Escapes { names, escaped: false };
        v.visit_stmt(params.kernels[*e].body());
        v.escaped
    })
}

/// The entries touching a class (whose parameter names are `names_in`), for the legality
/// check.
pub(super) fn touchers<'a>(
    params: &'a Params,
    plan: &'a Plan,
    consts: &HashMap<usize, Imm>,
    names_in: &[(usize, Vec<String>)],
) -> Vec<legality::Toucher<'a>> {
    names_in
        .iter()
        .map(|(e, names)| {
            let (e, k) = (*e, params.kernels[*e]);
            let consts = k
                .params()
                .iter()
                .enumerate()
                .filter_map(|(p, v)| {
                    let root = params.roots[params.base[e] + p];
                    consts.get(&root).map(|imm| (v.name().to_string(), *imm))
                })
                .collect();
            legality::Toucher {
                entry: e,
                kernel: k.name(),
                body: k.body(),
                plan: &plan.entries[e],
                names: names.clone(),
                consts,
            }
        })
        .collect()
}

/// Whether the buffer passed as `param` can stay in global memory when the entries run one
/// after another per work-item (private: each work-item touches only its own elements) or
/// per work-group with barriers between entries (local): the legality of promotion without
/// its rule that reads see earlier writes, since global memory keeps the earlier contents.
pub(super) fn in_place(
    spec: &FusionSpec,
    params: &Params,
    plan: &Plan,
    consts: &HashMap<usize, Imm>,
    param: ParamRef,
    to: PromoteTo,
    buffer_len: Option<u32>,
) -> Result<(), String> {
    let root = params.roots[params.flat(param).map_err(|e| e.to_string())?];
    let names_in = params.names_in_entries(root);
    let (e, p) = (params.all[root].0.entry, params.all[root].1.name());
    let at = format!("`{p}` of `{}`", params.kernels[e].name());
    if escapes(params, &names_in) {
        return Err(format!("{at}: the pointer is used other than as `p[i]`"));
    }
    let touchers = touchers(params, plan, consts, &names_in);
    let req =
        legality::Request { to, size: u32::MAX, buffer_len, barriers: spec.barriers, fresh: false };
    legality::check(&plan.fused, &req, &touchers).map_err(|why| format!("{at}: {why}"))
}
