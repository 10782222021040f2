//! Whether region code must zero a group's local block before the next group of a call
//! (`V::next_group`). Local arrays start zeroed in every group, as the interpreter's do;
//! but where the group's first region (the kernel's statements before its first barrier)
//! stores every element of every local array in every work-item's own path before anything
//! can read it, as a reduction's `if gid < n { tile[lid] = x[gid]; } else { tile[lid] =
//! 0.0; }` does, the zeros are never read and the stores of the zeroing (a store per 32
//! bytes of the block, per group) are left out.
//!
//! Why that is exact: in the first region each work-item `l` of a group of `L` stores
//! `a[l]` for every local array `a` of at most `L` elements, whatever path it takes (both
//! sides of an `if` store it), and nothing in the region names `a` otherwise (no load, no
//! atomic, no second store), so no work-item reads an element before the barrier, and
//! after it every element `0..len` has been stored by work-item `l = index`. A work-item
//! that faults before its store ends the launch at the region's end, before any later
//! region could read the element (the buffers are unspecified after an error). The first
//! group of a call has its block zeroed by the executor, as before.

use std::collections::HashSet;

use kiln_ir::{walk_expr, walk_stmt, Builtin, Expr, ExprNode, Kernel, Stmt, StmtNode, Visitor};

/// True if the first region of `k`, run by groups of `group` work-items, stores every
/// element of each of its local arrays (see the module docs). `lids`: names bound once to
/// `local_id(0)`.
pub(super) fn first_region_overwrites(k: &Kernel, group: u64, lids: &HashSet<String>) -> bool {
    let stmts = k.body().stmts();
    let Some(end) = stmts.iter().position(|s| s.barrier_fence().is_some()) else {
        return false;
    };
    let first = &stmts[..end];
    let mut arrays = Arrays::default();
    stmts.iter().enumerate().for_each(|(i, s)| {
        arrays.first = i < end;
        arrays.visit_stmt(s)
    });
    if arrays.other || arrays.names.is_empty() {
        return false;
    }
    arrays.names.iter().all(|(name, count)| {
        let mut scan = Mentions { name, lids, bad: false };
        first.iter().for_each(|s| scan.visit_stmt(s));
        u64::from(*count) <= group && !scan.bad && first.iter().any(|s| stores_own(s, name, lids))
    })
}

/// True if `e` is `local_id(0)` or a name bound once to it.
fn is_lid(e: &Expr, lids: &HashSet<String>) -> bool {
    match e.node() {
        ExprNode::Builtin { kind: Builtin::LocalId, dim: 0 } => true,
        ExprNode::Var(v) => lids.contains(v.name()),
        _ => false,
    }
}

/// True if every path through `s` stores `name[local_id(0)]`.
fn stores_own(s: &Stmt, name: &str, lids: &HashSet<String>) -> bool {
    match s.node() {
        StmtNode::Store { buf, index, .. } => buf.name() == name && is_lid(index, lids),
        StmtNode::If { then, otherwise: Some(o), .. } => {
            stores_own(then, name, lids) && stores_own(o, name, lids)
        }
        StmtNode::Block(v) => v.iter().any(|s| stores_own(s, name, lids)),
        _ => false,
    }
}

/// The kernel's local arrays and their element counts; `other` if a local array is
/// declared twice, or (counted in `first`, the statements before the first top-level
/// barrier) a barrier is nested in control there, so that the first region is not those
/// statements.
#[derive(Default)]
struct Arrays {
    names: Vec<(String, u32)>,
    other: bool,
    first: bool,
}

impl Visitor for Arrays {
    fn visit_stmt(&mut self, s: &Stmt) {
        match s.node() {
            StmtNode::Alloc { var, count }
                if matches!(var.ty(), kiln_ir::Type::Ptr(kiln_ir::AddrSpace::Local, _)) =>
            {
                if self.names.iter().any(|(n, _)| n == var.name()) {
                    self.other = true;
                }
                self.names.push((var.name().to_string(), *count));
            }
            _ if s.barrier_fence().is_some() && self.first => self.other = true,
            _ => {}
        }
        walk_stmt(self, s);
    }
}

/// Whether statements name the array `name` other than as the target of a store at
/// `local_id(0)` (a load, a vector access, an atomic's operand, a store elsewhere).
struct Mentions<'a> {
    name: &'a str,
    lids: &'a HashSet<String>,
    bad: bool,
}

impl Visitor for Mentions<'_> {
    fn visit_stmt(&mut self, s: &Stmt) {
        match s.node() {
            StmtNode::Store { buf, index, .. } if buf.name() == self.name => {
                self.bad |= !is_lid(index, self.lids);
            }
            StmtNode::VecStore { buf, .. } if buf.name() == self.name => self.bad = true,
            StmtNode::Let { var, .. } | StmtNode::Decl { var, .. } | StmtNode::For { var, .. }
                if var.name() == self.name =>
            {
                self.bad = true
            }
            _ => {}
        }
        walk_stmt(self, s);
    }

    fn visit_expr(&mut self, e: &Expr) {
        match e.node() {
            ExprNode::Var(v) | ExprNode::Load { buf: v, .. } | ExprNode::VecLoad { buf: v, .. }
                if v.name() == self.name =>
            {
                self.bad = true
            }
            _ => {}
        }
        walk_expr(self, e);
    }
}
