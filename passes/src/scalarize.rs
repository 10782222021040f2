//! Scalar replacement of private arrays: a small private array whose every access uses a
//! constant, in-bounds index becomes one `var` per element, so backends keep it in
//! registers and the other passes see plain values. Kernel fusion's internalized buffers of
//! one element (`t[0]`) are the typical case.
//!
//! Exact by construction: an array starts zeroed each time its declaration runs, and so does
//! each `var` (`var t_k: T = 0`); a store becomes an assignment and a load a read of the
//! element's variable. Arrays used any other way (a non-constant or out-of-bounds index,
//! passed to a call) are left alone.

use hashbrown::{HashMap, HashSet};
use kiln_ir::{
    walk_expr, walk_mutate_expr, walk_mutate_stmt, walk_stmt, AddrSpace, Expr, ExprNode, Imm,
    Kernel, Mutator, Scalar, Stmt, StmtNode, Type, Var, Visitor,
};

use crate::util::all_names;

/// Arrays with more elements than this stay arrays: one register per element stops paying
/// off, and backends index larger arrays in memory anyway.
pub const MAX_ELEMENTS: u32 = 8;

/// Replaces eligible private arrays by one variable per element.
pub fn scalarize(k: &Kernel) -> Kernel {
    let k = &kiln_ir::depth::bound_kernel(k);
    // Most kernels declare no small private array: told with a walk of the statements
    // alone, without the walk of every expression that looks for the arrays' uses.
    if !has_small_private_array(k.body()) {
        return k.clone();
    }
    let mut find = Candidates::default();
    find.visit_stmt(k.body());
    let arrays: HashMap<String, (Scalar, u32)> =
        find.arrays.into_iter().filter(|(name, _)| !find.excluded.contains(name)).collect();
    if arrays.is_empty() {
        return k.clone();
    }
    // Only arrays of several elements need new names; collecting every name is not free.
    let mut taken =
        if arrays.values().any(|&(_, n)| n > 1) { all_names(k) } else { Default::default() };
    let mut elems = HashMap::new();
    for (name, &(ty, count)) in &arrays {
        let vars: Vec<Var> = (0..count)
            .map(|i| {
                // A one-element array's name is free once the array is gone.
                let base = if count == 1 { name.clone() } else { format!("{name}_{i}") };
                let mut fresh = base.clone();
                let mut n = 2;
                while count > 1 && taken.contains(&fresh) {
                    fresh = format!("{base}_{n}");
                    n += 1;
                }
                taken.insert(fresh.clone());
                Var::new(&fresh, Type::Scalar(ty))
            })
            .collect();
        elems.insert(name.clone(), vars);
    }
    Replace { elems }.mutate_kernel(k)
}

/// Whether `s` declares a private array of at most [`MAX_ELEMENTS`] elements anywhere: the
/// only arrays [`Candidates`] takes.
fn has_small_private_array(s: &Stmt) -> bool {
    struct Any(bool);
    impl Visitor for Any {
        fn visit_expr(&mut self, _: &Expr) {}
        fn visit_stmt(&mut self, s: &Stmt) {
            if let StmtNode::Alloc { var, count } = s.node() {
                self.0 |=
                    matches!(var.ty(), Type::Ptr(AddrSpace::Private, _)) && *count <= MAX_ELEMENTS;
            }
            if !self.0 {
                walk_stmt(self, s)
            }
        }
    }
    let mut any = Any(false);
    any.visit_stmt(s);
    any.0
}

/// Private arrays by name (element type, length), and the names that cannot be replaced.
#[derive(Default)]
struct Candidates {
    arrays: HashMap<String, (Scalar, u32)>,
    excluded: HashSet<String>,
}

impl Candidates {
    /// Keeps `buf` a candidate only if `index` is a constant below its length.
    fn access(&mut self, buf: &Var, index: &Expr) {
        let Some(&(_, count)) = self.arrays.get(buf.name()) else { return };
        let in_bounds = index
            .as_imm()
            .and_then(|i| i.as_i128())
            .is_some_and(|i| (0..count as i128).contains(&i));
        if !in_bounds {
            self.excluded.insert(buf.name().to_string());
        }
    }
}

impl Visitor for Candidates {
    fn visit_expr(&mut self, e: &Expr) {
        match e.node() {
            ExprNode::Load { buf, index } => self.access(buf, index),
            // Vector accesses are left to the arrays that stay arrays.
            ExprNode::VecLoad { buf, .. } => {
                self.excluded.insert(buf.name().to_string());
            }
            // The pointer itself used as a value: it escapes.
            ExprNode::Var(v) if matches!(v.ty(), Type::Ptr(..)) => {
                self.excluded.insert(v.name().to_string());
            }
            _ => {}
        }
        walk_expr(self, e)
    }

    fn visit_stmt(&mut self, s: &Stmt) {
        match s.node() {
            // Only arrays declared directly in a block: their declaration is replaced by
            // several in the same block, keeping the elements' scope the array's.
            StmtNode::Block(stmts) => {
                for st in stmts {
                    let StmtNode::Alloc { var, count } = st.node() else { continue };
                    let Type::Ptr(AddrSpace::Private, elem) = var.ty() else { continue };
                    if *count > MAX_ELEMENTS {
                        continue;
                    }
                    // Names are unique in a verified kernel; a repeat is left alone.
                    if self.arrays.insert(var.name().to_string(), (elem, *count)).is_some() {
                        self.excluded.insert(var.name().to_string());
                    }
                }
            }
            StmtNode::Store { buf, index, .. } => self.access(buf, index),
            StmtNode::VecStore { buf, .. } => {
                self.excluded.insert(buf.name().to_string());
            }
            StmtNode::Call { args, .. } => {
                for v in args.iter().filter_map(|a| a.as_var()) {
                    self.excluded.insert(v.name().to_string());
                }
            }
            _ => {}
        }
        walk_stmt(self, s)
    }
}

/// Rewrites the accesses of the chosen arrays.
struct Replace {
    elems: HashMap<String, Vec<Var>>,
}

impl Replace {
    fn elem(&self, buf: &Var, index: &Expr) -> Option<&Var> {
        let i = index.as_imm()?.as_i128()?;
        self.elems.get(buf.name())?.get(usize::try_from(i).ok()?)
    }
}

fn zero(ty: Scalar) -> Imm {
    match ty {
        Scalar::Bool => Imm::Bool(false),
        t if t.is_float() => Imm::float(t, 0.0),
        t => Imm::int(t, 0),
    }
}

impl Mutator for Replace {
    fn mutate_expr(&mut self, e: &Expr) -> Expr {
        if let ExprNode::Load { buf, index } = e.node() {
            if let Some(v) = self.elem(buf, index) {
                return Expr::var(v);
            }
        }
        walk_mutate_expr(self, e)
    }

    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        match s.node() {
            StmtNode::Block(stmts) => {
                let mut out = Vec::with_capacity(stmts.len());
                for st in stmts {
                    if let StmtNode::Alloc { var, .. } = st.node() {
                        if let Some(vars) = self.elems.get(var.name()) {
                            out.extend(vars.iter().map(|v| {
                                let ty = v.ty().scalar().unwrap_or(Scalar::I32);
                                Stmt::decl(v, Expr::imm(zero(ty)))
                            }));
                            continue;
                        }
                    }
                    out.push(self.mutate_stmt(st));
                }
                return Stmt::block(out);
            }
            StmtNode::Store { buf, index, value } => {
                if let Some(v) = self.elem(buf, index).cloned() {
                    return Stmt::assign(&v, self.mutate_expr(value));
                }
            }
            _ => {}
        }
        walk_mutate_stmt(self, s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(src: &str) -> Stmt {
        kiln_ir::parse_module(src).expect("parses").kernels[0].body().clone()
    }

    /// The statements-only walk finds a small private array wherever it is declared (here
    /// in a loop in a branch), and only such an array: a local one or a large private one
    /// is no candidate, and leaves the kernel as it is without the walk of its expressions.
    #[test]
    fn the_precheck_finds_exactly_the_arrays_candidates_take() {
        let nested = body(
            "kernel k(o: ptr<global, i32>) {
               let i: u32 = global_id(0);
               if i < 4u32 {
                 for j: i32 in 0 .. 3 {
                   private t: i32[2];
                   t[0u32] = j;
                   o[i] = t[0u32];
                 }
               }
             }",
        );
        assert!(has_small_private_array(&nested));
        let none = body(
            "kernel k(o: ptr<global, i32>) {
               let i: u32 = global_id(0);
               local s: i32[4];
               private big: i32[9];
               big[i] = 1;
               s[0u32] = big[0u32];
               o[i] = s[0u32];
             }",
        );
        assert!(!has_small_private_array(&none));
    }
}
