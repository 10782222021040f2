//! An executable soundness check for the divergence analysis.
//!
//! [`check_uniformity`] instruments a kernel so that, at every program point where the
//! analysis claims a value uniform, each work-item writes that value into a trace buffer
//! together with the dynamic instance (the site and the iteration numbers of the enclosing
//! loops: in structured code without `break`, a site runs at most once per such vector).
//! The instrumented kernel runs on the reference interpreter; then all work-items of each
//! 64-lane wavefront (consecutive linear local ids of one work-group) that recorded the same
//! instance must have recorded the same value.

use std::collections::{BTreeSet, HashMap};

use kiln_ir::interp::{run_with, RunOptions};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{verify_kernel, Builtin, Expr, ExprNode, Kernel, Scalar, Stmt, StmtNode, Type, Var};
use kiln_ir::{AddrSpace, Attrs};

use super::Divergence;

/// Wavefront width.
pub const WAVE: u32 = 64;
/// Most recorded events per work-item; later ones are dropped.
const MAX_EVENTS: u32 = 192;
/// Meta words per event: site, loop depth, up to six iteration numbers.
const META: u32 = 8;
const MAX_DEPTH: usize = 6;

/// A dynamic instance in one wavefront: (work-group, wave, site, loop iterations).
type Instance = (u32, u32, u32, Vec<u32>);

struct Inst<'a> {
    div: &'a Divergence,
    /// Site id -> records a float (else an integer/bool).
    sites: Vec<bool>,
    loops: Vec<Var>,
    next_loop: usize,
    too_deep: bool,
}

fn v(name: &str, ty: Type) -> Var {
    Var::new(name, ty)
}
fn base() -> Var {
    v("zz_base", Type::U32)
}
fn counter() -> Var {
    v("zz_tc", Type::U32)
}
fn meta() -> Var {
    v("zz_meta", Type::ptr(AddrSpace::Global, Scalar::U32))
}
fn ubuf() -> Var {
    v("zz_u", Type::ptr(AddrSpace::Global, Scalar::U64))
}
fn fbuf() -> Var {
    v("zz_f", Type::ptr(AddrSpace::Global, Scalar::F64))
}

/// Scalar variables referenced by an expression.
fn refs(e: &Expr, out: &mut BTreeSet<Var>) {
    if let ExprNode::Var(x) = e.node() {
        if x.ty().scalar().is_some() {
            out.insert(x.clone());
        }
    }
    for c in e.children() {
        refs(c, out);
    }
}

impl Inst<'_> {
    fn event(&mut self, value: Expr, out: &mut Vec<Stmt>) {
        let Some(ty) = value.ty().scalar() else { return };
        if self.loops.len() > MAX_DEPTH {
            self.too_deep = true;
            return;
        }
        let float = ty.is_float();
        self.sites.push(float);
        let site = self.sites.len() as u32;
        let tc = counter().expr();
        let slot = base().expr() + tc.clone();
        let m = slot.clone() * Expr::u32(META);
        let mut body = vec![
            Stmt::store(&meta(), m.clone(), Expr::u32(site)),
            Stmt::store(&meta(), m.clone() + Expr::u32(1), Expr::u32(self.loops.len() as u32)),
        ];
        for (i, l) in self.loops.iter().enumerate() {
            body.push(Stmt::store(&meta(), m.clone() + Expr::u32(2 + i as u32), l.expr()));
        }
        if float {
            body.push(Stmt::store(&fbuf(), slot, value.cast(Scalar::F64)));
        } else {
            body.push(Stmt::store(&ubuf(), slot, value.cast(Scalar::U64)));
        }
        out.push(Stmt::if_(tc.clone().cmp_lt(Expr::u32(MAX_EVENTS)), Stmt::block(body)));
        out.push(Stmt::assign(&counter(), tc + Expr::u32(1)));
    }

    /// Events for the uniform-claimed variables referenced by `exprs` before `s`.
    fn uses(&mut self, s: &Stmt, exprs: &[&Expr], out: &mut Vec<Stmt>) {
        let mut set = BTreeSet::new();
        exprs.iter().for_each(|e| refs(e, &mut set));
        for x in set {
            if !self.div.is_divergent_before(s, &x) {
                self.event(x.expr(), out);
            }
        }
    }

    fn head_uses(&mut self, s: &Stmt, cond: &Expr, out: &mut Vec<Stmt>) {
        let mut set = BTreeSet::new();
        refs(cond, &mut set);
        for x in set {
            if !self.div.is_divergent_at_head(s, &x) {
                self.event(x.expr(), out);
            }
        }
        if self.div.branch_divergent(s) == Some(false) {
            self.event(cond.clone(), out);
        }
    }

    fn block(&mut self, b: &Stmt) -> Stmt {
        let mut out = Vec::new();
        for s in b.stmts() {
            self.stmt(s, &mut out);
        }
        Stmt::block(out)
    }

    fn stmt(&mut self, s: &Stmt, out: &mut Vec<Stmt>) {
        let bound = |var: &Var, me: &mut Self, out: &mut Vec<Stmt>| {
            if me.div.binding_divergent(s) == Some(false) {
                me.event(var.expr(), out);
            }
        };
        match s.node() {
            StmtNode::Let { var, value } | StmtNode::Assign { var, value } => {
                self.uses(s, &[value], out);
                out.push(s.clone());
                bound(var, self, out);
            }
            StmtNode::Decl { var, init } => {
                self.uses(s, &[init], out);
                out.push(s.clone());
                bound(var, self, out);
            }
            StmtNode::Store { index, value, .. } | StmtNode::VecStore { index, value, .. } => {
                self.uses(s, &[index, value], out);
                out.push(s.clone());
            }
            StmtNode::Alloc { .. } => out.push(s.clone()),
            StmtNode::Call { result, args, .. } => {
                let a: Vec<&Expr> = args.iter().collect();
                self.uses(s, &a, out);
                out.push(s.clone());
                if let Some(r) = result {
                    bound(r, self, out);
                }
            }
            StmtNode::Block(_) => out.push(self.block(s)),
            StmtNode::If { cond, then, otherwise } => {
                self.uses(s, &[cond], out);
                if self.div.branch_divergent(s) == Some(false) {
                    self.event(cond.clone(), out);
                }
                let t = self.block(then);
                let o = otherwise.as_ref().map(|o| self.block(o));
                out.push(Stmt::new(StmtNode::If { cond: cond.clone(), then: t, otherwise: o }));
            }
            StmtNode::While { cond, body } => {
                self.head_uses(s, cond, out);
                let it = self.new_loop(out);
                let mut b = self.block(body).stmts().to_vec();
                self.head_uses(s, cond, &mut b);
                b.push(Stmt::assign(&it, it.expr() + Expr::u32(1)));
                self.loops.pop();
                out.push(Stmt::while_(cond.clone(), Stmt::block(b)));
            }
            StmtNode::For { var, lo, hi, step, body } => {
                self.uses(s, &[lo, hi, step], out);
                let it = self.new_loop(out);
                let mut b = Vec::new();
                bound(var, self, &mut b);
                b.extend(self.block(body).stmts().iter().cloned());
                b.push(Stmt::assign(&it, it.expr() + Expr::u32(1)));
                self.loops.pop();
                out.push(Stmt::for_(var, lo.clone(), hi.clone(), step.clone(), Stmt::block(b)));
            }
        }
    }

    fn new_loop(&mut self, out: &mut Vec<Stmt>) -> Var {
        let it = v(&format!("zz_it{}", self.next_loop), Type::U32);
        self.next_loop += 1;
        out.push(Stmt::decl(&it, Expr::u32(0)));
        self.loops.push(it.clone());
        it
    }
}

/// Builds the instrumented kernel; returns it and, per site (1-based, index `site - 1`),
/// whether it records a float.
pub fn instrument(kernel: &Kernel, div: &Divergence) -> Result<(Kernel, Vec<bool>), String> {
    let mut inst =
        Inst { div, sites: Vec::new(), loops: Vec::new(), next_loop: 0, too_deep: false };
    let g = |k: Builtin, d: u8| Expr::builtin(k, d);
    let rel = |d: u8| g(Builtin::GlobalId, d) - g(Builtin::GlobalOffset, d);
    let lin = rel(0) + g(Builtin::GlobalSize, 0) * (rel(1) + g(Builtin::GlobalSize, 1) * rel(2));
    let mut body = vec![
        Stmt::let_(&base(), lin * Expr::u32(MAX_EVENTS)),
        Stmt::decl(&counter(), Expr::u32(0)),
    ];
    for s in kernel.body().stmts() {
        inst.stmt(s, &mut body);
    }
    if inst.too_deep {
        return Err("loops nested deeper than the trace supports".into());
    }
    let mut params = kernel.params().to_vec();
    params.extend([meta(), ubuf(), fbuf()]);
    let attrs: Attrs = kernel.attrs().clone();
    let k = Kernel::with_attrs(kernel.name(), params, attrs, Stmt::block(body));
    verify_kernel(&k).map_err(|e| format!("instrumented kernel does not verify: {e:?}\n{k}"))?;
    Ok((k, inst.sites))
}

/// Runs `kernel` instrumented with the claims of `div` and checks every claim: values called
/// uniform agree across the work-items of each wavefront at each dynamic instance. Returns
/// the number of (instance, lane) records checked, or a description of the first violation.
pub fn check_uniformity(
    kernel: &Kernel,
    div: &Divergence,
    range: &NdRange,
    args: &[Arg],
    buffers: &[Buffer],
) -> Result<usize, String> {
    let (k, sites) = instrument(kernel, div)?;
    let items = range.work_items() as usize;
    let n = items * MAX_EVENTS as usize;
    let mut bufs = buffers.to_vec();
    let mut args = args.to_vec();
    for (elem, len) in [(Scalar::U32, n * META as usize), (Scalar::U64, n), (Scalar::F64, n)] {
        args.push(Arg::Buffer(bufs.len()));
        bufs.push(Buffer::zeroed(elem, len));
    }
    run_with(&k, range, &args, &mut bufs, &RunOptions::with_max_steps(50_000_000))
        .map_err(|e| format!("instrumented run failed: {e}"))?;
    let [meta, ub, fb] = [&bufs[bufs.len() - 3], &bufs[bufs.len() - 2], &bufs[bufs.len() - 1]];
    // The three trace buffers were made just above with these element types.
    let meta: Vec<u32> = meta.to_vec().expect("u32 trace buffer");
    let ub: Vec<u64> = ub.to_vec().expect("u64 trace buffer");
    let fb: Vec<f64> = fb.to_vec().expect("f64 trace buffer");
    let local = range.local.unwrap_or_else(|| kiln_ir::launch::default_local_size(range.global));
    let gs = range.global;
    // (group, wave, site, iterations) -> (first lane, value bits)
    let mut seen: HashMap<Instance, (u32, u64)> = HashMap::new();
    let mut checked = 0;
    for item in 0..items as u32 {
        let c = [item % gs[0], (item / gs[0]) % gs[1], item / (gs[0] * gs[1])];
        let grp = [c[0] / local[0], c[1] / local[1], c[2] / local[2]];
        let ng = [gs[0] / local[0], gs[1] / local[1]];
        let group = grp[0] + ng[0] * (grp[1] + ng[1] * grp[2]);
        let l = [c[0] % local[0], c[1] % local[1], c[2] % local[2]];
        let llin = l[0] + local[0] * (l[1] + local[1] * l[2]);
        for e in 0..MAX_EVENTS {
            let slot = (item * MAX_EVENTS + e) as usize;
            let m = &meta[slot * META as usize..(slot + 1) * META as usize];
            if m[0] == 0 {
                break;
            }
            let site = m[0];
            let iters = m[2..2 + m[1] as usize].to_vec();
            let float = sites[site as usize - 1];
            let bits = if float {
                let f = fb[slot];
                if f.is_nan() {
                    f64::NAN.to_bits()
                } else {
                    f.to_bits()
                }
            } else {
                ub[slot]
            };
            checked += 1;
            let key = (group, llin / WAVE, site, iters);
            match seen.get(&key) {
                None => {
                    seen.insert(key, (llin, bits));
                }
                Some(&(lane0, b0)) if b0 != bits => {
                    return Err(format!(
                        "site {site} (iterations {:?}) claimed uniform, but in work-group {group} \
                         local ids {lane0} and {llin} recorded {b0:#x} and {bits:#x}\n{k}",
                        key.3
                    ));
                }
                _ => {}
            }
        }
    }
    Ok(checked)
}
