//! Dead code elimination: stores to private or local arrays that are never read (never
//! loaded, never passed to a call) are removed, and then the array itself; `var`s that are
//! never read lose their declaration and assignments. A store or assignment is only removed
//! when it cannot fail: its value cannot fail and its index is provably in bounds.

use hashbrown::HashSet;
use kiln_ir::{
    walk_expr, walk_mutate_nested, walk_stmt, AddrSpace, BinOp, Expr, ExprNode, Kernel, Mutator,
    Stmt, StmtNode, Type, Visitor,
};

/// An exclusive upper bound of an unsigned (or constant) index, if one is known.
fn index_bound(e: &Expr) -> Option<u128> {
    let unsigned = e.ty().scalar().is_some_and(|s| s.is_unsigned());
    if let Some(k) = e.as_imm() {
        return k.as_i128().filter(|&v| v >= 0).map(|v| v as u128 + 1);
    }
    match e.node() {
        ExprNode::Binary { op: BinOp::Rem, b, .. } if unsigned => {
            b.as_imm().and_then(|k| k.as_i128()).filter(|&v| v > 0).map(|v| v as u128)
        }
        ExprNode::Binary { op: BinOp::And, a, b } if unsigned => {
            match (index_bound(a), index_bound(b)) {
                (Some(x), Some(y)) => Some(x.min(y)),
                (x, y) => x.or(y),
            }
        }
        _ => None,
    }
}

/// The names of `wanted` read as values (a variable reference, a load's buffer, a call's
/// operand). Only declared `var`s and private or local arrays are ever asked about, and the
/// walk stops once every one of them has been seen read: in a GEMM the first unrolled
/// step reads every accumulator, and walking the rest of the kernel was this pass's time.
fn read_names(s: &Stmt, wanted: &HashSet<String>) -> HashSet<String> {
    struct R<'a> {
        read: HashSet<String>,
        wanted: &'a HashSet<String>,
    }
    impl R<'_> {
        fn done(&self) -> bool {
            self.read.len() == self.wanted.len()
        }
        fn saw(&mut self, name: &str) {
            if self.wanted.contains(name) && !self.read.contains(name) {
                self.read.insert(name.to_string());
            }
        }
    }
    impl Visitor for R<'_> {
        fn visit_expr(&mut self, e: &Expr) {
            if self.done() {
                return;
            }
            match e.node() {
                ExprNode::Var(v)
                | ExprNode::Load { buf: v, .. }
                | ExprNode::VecLoad { buf: v, .. } => self.saw(v.name()),
                _ => {}
            }
            walk_expr(self, e)
        }
        fn visit_stmt(&mut self, s: &Stmt) {
            if self.done() {
                return;
            }
            if let StmtNode::Call { args, .. } = s.node() {
                for a in args {
                    if let Some(v) = a.as_var() {
                        self.saw(v.name());
                    }
                }
            }
            walk_stmt(self, s)
        }
    }
    let mut r = R { read: HashSet::new(), wanted };
    r.visit_stmt(s);
    r.read
}

struct Dce {
    read: HashSet<String>,
    /// Dead arrays and their lengths, by name.
    arrays: hashbrown::HashMap<String, u32>,
    /// Names whose removal was not possible everywhere (keep their declarations).
    kept: HashSet<String>,
}

impl Mutator for Dce {
    // Statements only: expressions are left as they are, so they are not walked.
    fn mutate_expr(&mut self, e: &Expr) -> Expr {
        e.clone()
    }

    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        let s = walk_mutate_nested(self, s);
        match s.node() {
            StmtNode::Store { buf, index, value } => match self.arrays.get(buf.name()) {
                Some(&len)
                    if !value.may_fail()
                        && !index.may_fail()
                        && index_bound(index).is_some_and(|b| b <= len as u128) =>
                {
                    Stmt::block([])
                }
                Some(_) => {
                    self.kept.insert(buf.name().to_string());
                    s
                }
                None => s,
            },
            // A vector store to a dead array keeps the array (and the store): removing it
            // would need the bound of every lane, which is rarely worth the analysis.
            StmtNode::VecStore { buf, .. } if self.arrays.contains_key(buf.name()) => {
                self.kept.insert(buf.name().to_string());
                s
            }
            StmtNode::Assign { var, value } if !self.read.contains(var.name()) => {
                if value.may_fail() {
                    self.kept.insert(var.name().to_string());
                    s
                } else {
                    Stmt::block([])
                }
            }
            _ => s,
        }
    }
}

struct DropDecls<'a>(&'a Dce);

impl Mutator for DropDecls<'_> {
    // Statements only: expressions are left as they are, so they are not walked.
    fn mutate_expr(&mut self, e: &Expr) -> Expr {
        e.clone()
    }

    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        let s = walk_mutate_nested(self, s);
        let d = self.0;
        match s.node() {
            StmtNode::Alloc { var, .. }
                if d.arrays.contains_key(var.name()) && !d.kept.contains(var.name()) =>
            {
                Stmt::block([])
            }
            StmtNode::Decl { var, init }
                if !d.read.contains(var.name())
                    && !d.kept.contains(var.name())
                    && !init.may_fail() =>
            {
                Stmt::block([])
            }
            _ => s,
        }
    }
}

/// Runs dead code elimination until nothing more is dead: removing an unread `var`'s
/// assignments can leave another `var`, read only there, unread.
pub fn dce(k: &Kernel) -> Kernel {
    let k = &kiln_ir::depth::bound_kernel(k);
    let mut k = k.clone();
    // Every round that changes something removes a statement, so this ends; the bound only
    // guards against a bug.
    for _ in 0..1000 {
        let next = dce_once(&k);
        if next.ptr_eq(&k) {
            break;
        }
        k = next;
    }
    k
}

/// One round of dead code elimination.
fn dce_once(k: &Kernel) -> Kernel {
    /// The private and local arrays (with their smallest length) and the names of `var`s:
    /// what may be dead.
    struct Arrays(hashbrown::HashMap<String, u32>, HashSet<String>, crate::util::SeenNames);
    impl Visitor for Arrays {
        // Declarations are statements: expressions need no walk.
        fn visit_expr(&mut self, _: &Expr) {}
        fn visit_stmt(&mut self, s: &Stmt) {
            match s.node() {
                StmtNode::Alloc { var, count }
                    if matches!(var.ty(), Type::Ptr(AddrSpace::Private | AddrSpace::Local, _)) =>
                {
                    self.0
                        .entry(var.name().to_string())
                        .and_modify(|c| *c = (*c).min(*count))
                        .or_insert(*count);
                }
                StmtNode::Decl { var, .. } | StmtNode::Assign { var, .. }
                    if self.2.first(var) && !self.1.contains(var.name()) =>
                {
                    self.1.insert(var.name().to_string());
                }
                _ => {}
            }
            walk_stmt(self, s)
        }
    }
    let mut arrays = Arrays(hashbrown::HashMap::new(), HashSet::new(), Default::default());
    arrays.visit_stmt(k.body());
    let mut wanted = std::mem::take(&mut arrays.1);
    wanted.extend(arrays.0.keys().cloned());
    let read = read_names(k.body(), &wanted);
    if read.len() == wanted.len() {
        // Every variable and array is read: no store, assignment or declaration goes, and
        // the two rebuilding walks below would return `k` itself.
        return crate::simplify::drop_empty_blocks(k);
    }
    // An array name bound twice (re-bound after its scope ended) is only dead if both are:
    // names are compared, so a read of either keeps both.
    let arrays = arrays.0.into_iter().filter(|(n, _)| !read.contains(n)).collect();
    let mut d = Dce { read, arrays, kept: HashSet::new() };
    let k1 = d.mutate_kernel(k);
    let k2 = DropDecls(&d).mutate_kernel(&k1);
    crate::simplify::drop_empty_blocks(&k2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_stop_being_searched_only_once_every_candidate_is_read() {
        // `a` and `t` are read at once; `dead` (a var) and `scratch` (an array) are declared
        // after them and never read: the search for reads must go on past the first reads
        // and still find them dead, while `b`, read in the last statement, stays.
        let src = "kernel k(x: ptr<global, f32>) {
            var a: f32 = 1.0;
            private t: f32[2];
            t[0] = a;
            x[0] = a + t[0];
            var dead: f32 = 2.0;
            var b: f32 = 3.0;
            private scratch: f32[4];
            scratch[1] = 5.0;
            dead = 7.0;
            b = b * 2.0;
            x[1] = b;
        }";
        let k = kiln_ir::parse_module(src).expect("parses").kernels.remove(0);
        let out = dce(&k).to_string();
        for gone in ["dead", "scratch"] {
            assert!(!out.contains(gone), "`{gone}` should be removed:\n{out}");
        }
        for kept in ["var a", "t[0] = a", "var b", "x[1] = b"] {
            assert!(out.contains(kept), "`{kept}` should stay:\n{out}");
        }
    }
}
