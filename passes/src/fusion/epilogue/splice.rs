//! Placing a consumer's body at each of the producer's stores: the store's index gives the
//! consumer's work-item ([`IndexMap`] inverted), the stored value is the consumer's element
//! (a `var` its reads see and its writes set), and the element is stored once, after it.

use hashbrown::HashMap;
use kiln_ir::{Builtin, Expr, ExprNode, Imm, Mutator, Scalar, Stmt, StmtNode, Type, Var};

use super::super::rewrite::{Names, Rewriter};
use super::map::IndexMap;

/// Rewrites every store to `x` in a producer body.
pub(super) struct Splice<'a> {
    pub x: &'a Var,
    /// The consumer's body, in the fused kernel's names (built-ins still its own).
    pub consumer: &'a Stmt,
    pub map: &'a IndexMap,
    pub names: &'a mut Names,
    /// The variables free in the consumer body (the fused kernel's parameters).
    pub free: &'a [Var],
    /// Stores rewritten.
    pub sites: usize,
}

impl Mutator for Splice<'_> {
    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        match s.node() {
            StmtNode::Store { buf, index, value } if buf.name() == self.x.name() => {
                self.sites += 1;
                self.site(index, value)
            }
            _ => kiln_ir::walk_mutate_stmt(self, s),
        }
    }
}

impl Splice<'_> {
    /// `{ let s = index; var v = value; <ids of s>; if <s is a work-item's> { consumer }
    /// x[s] = v; }`
    fn site(&mut self, index: &Expr, value: &Expr) -> Stmt {
        let ty = index.ty().scalar().unwrap_or(Scalar::I32);
        let elem = self.x.ty().elem().unwrap_or(Scalar::F32);
        let s = Var::new(self.names.fresh("ep_at"), Type::Scalar(ty));
        let v = Var::new(self.names.fresh("ep_x"), Type::Scalar(elem));
        let konst = |c: i128| Expr::imm(Imm::int(ty, c));
        let fits = |c: i128| {
            ty.int_min().is_some_and(|lo| c >= lo) && ty.int_max().is_some_and(|hi| c <= hi)
        };
        let m = self.map;
        let mut out = vec![Stmt::let_(&s, index.clone()), Stmt::decl(&v, value.clone())];
        let mut conds: Vec<Expr> = Vec::new();
        let mut r = s.expr();
        if m.c != 0 {
            conds.push(s.expr().cmp_ge(konst(m.c)));
            r = r - konst(m.c);
        } else if ty.is_signed() {
            conds.push(s.expr().cmp_ge(konst(0)));
        }
        // The ids, by decreasing coefficient: id = rest / k, rest = rest % k.
        let mut gid: [Expr; 3] = std::array::from_fn(|d| Expr::u32(m.fixed[d]));
        let order = m.order();
        for (i, &d) in order.iter().enumerate() {
            let h = Var::new(self.names.fresh(&format!("ep_gid{d}")), Type::Scalar(ty));
            let q = if m.k[d] == 1 { r.clone() } else { r.clone() / konst(m.k[d]) };
            out.push(Stmt::let_(&h, q));
            if i + 1 < order.len() || m.k[d] != 1 {
                let rest = Var::new(self.names.fresh("ep_rest"), Type::Scalar(ty));
                out.push(Stmt::let_(&rest, r.clone() % konst(m.k[d])));
                r = rest.expr();
            }
            let (lo, hi) =
                (m.range.offset[d] as i128, (m.range.offset[d] + m.range.global[d]) as i128);
            if lo > 0 {
                conds.push(h.expr().cmp_ge(konst(lo)));
            }
            if fits(hi) {
                conds.push(h.expr().cmp_lt(konst(hi)));
            }
            gid[d] = if ty == Scalar::U32 { h.expr() } else { h.expr().cast(Scalar::U32) };
        }
        if order.last().is_some_and(|&d| m.k[d] != 1) {
            conds.push(r.cmp_eq(konst(0)));
        }
        let body = self.consumer_at(&gid, &v);
        let run = match conds.into_iter().reduce(|a, b| a.logic_and(b)) {
            Some(c) => Stmt::if_(c, body),
            None => body,
        };
        out.push(run);
        out.push(Stmt::store(self.x, s.expr(), v.expr()));
        Stmt::block(out)
    }

    /// The consumer body for the work-item `gid`, its element in `v`, with bindings
    /// renamed unique.
    fn consumer_at(&mut self, gid: &[Expr; 3], v: &Var) -> Stmt {
        let mut at = AtItem { x: self.x, v, gid, range: &self.map.range };
        let body = at.mutate_stmt(self.consumer);
        let mut renames: HashMap<String, Var> = HashMap::new();
        for f in self.free.iter().chain([v]) {
            renames.insert(f.name().to_string(), f.clone());
        }
        // Site variables are referenced by expression (`gid`), already bound outside.
        let mut rw = Rewriter { params: HashMap::new(), renames, names: self.names, remap: None };
        let mut free_ids = FreeIds(Vec::new());
        for g in gid {
            kiln_ir::Visitor::visit_expr(&mut free_ids, g);
        }
        for fv in free_ids.0 {
            rw.renames.insert(fv.name().to_string(), fv);
        }
        rw.mutate_stmt(&body)
    }
}

/// The variables an expression references.
struct FreeIds(Vec<Var>);

impl kiln_ir::Visitor for FreeIds {
    fn visit_expr(&mut self, e: &Expr) {
        if let ExprNode::Var(v) = e.node() {
            self.0.push(v.clone());
        }
        kiln_ir::walk_expr(self, e)
    }
}

/// The consumer's built-ins for one work-item, and its element of `x` as `v`.
struct AtItem<'a> {
    x: &'a Var,
    v: &'a Var,
    gid: &'a [Expr; 3],
    range: &'a kiln_ir::launch::NdRange,
}

impl Mutator for AtItem<'_> {
    fn mutate_expr(&mut self, e: &Expr) -> Expr {
        match e.node() {
            ExprNode::Load { buf, .. } if buf.name() == self.x.name() => self.v.expr(),
            ExprNode::Builtin { kind, dim } => {
                let d = *dim as usize;
                let r = self.range;
                let rel = || {
                    if r.offset[d] == 0 {
                        self.gid[d].clone()
                    } else {
                        self.gid[d].clone() - Expr::u32(r.offset[d])
                    }
                };
                // A local size is known here: the driver refuses a consumer that uses local
                // built-ins without one.
                let l = r.local.map_or(1, |l| l[d]);
                match kind {
                    Builtin::GlobalId => self.gid[d].clone(),
                    Builtin::GlobalSize => Expr::u32(r.global[d]),
                    Builtin::GlobalOffset => Expr::u32(r.offset[d]),
                    Builtin::LocalSize => Expr::u32(l),
                    Builtin::NumGroups => Expr::u32(r.global[d] / l),
                    Builtin::LocalId => rel() % Expr::u32(l),
                    Builtin::GroupId => rel() / Expr::u32(l),
                }
            }
            _ => kiln_ir::walk_mutate_expr(self, e),
        }
    }

    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        match s.node() {
            StmtNode::Store { buf, value, .. } if buf.name() == self.x.name() => {
                let value = self.mutate_expr(value);
                Stmt::assign(self.v, value)
            }
            _ => kiln_ir::walk_mutate_stmt(self, s),
        }
    }
}

/// Drops every store to `x` (an internalized buffer: its consumers read the stored value).
pub(super) struct DropStores<'a>(pub &'a Var);

impl Mutator for DropStores<'_> {
    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        match s.node() {
            StmtNode::Store { buf, .. } if buf.name() == self.0.name() => Stmt::block(vec![]),
            _ => kiln_ir::walk_mutate_stmt(self, s),
        }
    }
}
