//! Bounding expression depth by construction.
//!
//! Every walk over expressions in kiln (printer, verifier, interpreter, passes, backends) is
//! recursive, so an expression thousands of levels deep would overflow the stack. Instead of
//! making each walk iterative, every entry point (parse-and-check, the pass manager, each pass,
//! the interpreter, the verifier, each backend) first calls [`bound_kernel`], which splits any
//! expression deeper than [`MAX_EXPR_DEPTH`] into `let`s of at most that depth. The split is
//! exact: expressions are pure and every operand is evaluated (`select` and `&&` evaluate both
//! sides), so evaluating a sub-expression just before its statement gives the same value. A
//! `while` condition, evaluated before every iteration, is kept in a fresh `var` that the loop
//! body recomputes at its end.
//!
//! The split itself is iterative, linear in the size of the expression (shared sub-trees are
//! split once), and returns the kernel itself (pointer-equal) when nothing is too deep, which
//! is an O(1) check because every statement keeps the depth of its deepest expression
//! ([`Stmt::max_expr_depth`]; the pass manager and each pass both ask).
//!
//! ```
//! use kiln_ir::depth::{bound_kernel, max_expr_depth, MAX_EXPR_DEPTH};
//! use kiln_ir::{Kernel, Stmt, Type, Var};
//!
//! let x = Var::new("x", Type::ptr(kiln_ir::AddrSpace::Global, kiln_ir::Scalar::I32));
//! let mut e = x.load(0);
//! for _ in 0..10_000 {
//!     e = e + 1;
//! }
//! let k = Kernel::new("k", vec![x.clone()], Stmt::block([Stmt::store(&x, 0, e)]));
//! let b = bound_kernel(&k);
//! assert!(max_expr_depth(b.body()) <= MAX_EXPR_DEPTH);
//! ```

use hashbrown::{HashMap, HashSet};
use smallvec::SmallVec;

use crate::expr::{Expr, ExprNode, Var};
use crate::kernel::{Kernel, Module};
use crate::stmt::{Stmt, StmtNode};
use crate::types::Type;

/// The deepest expression kiln's passes, backends and printer are given. Deeper expressions
/// are split into `let`s by [`bound_kernel`]. The parser accepts nesting up to
/// [`crate::parse::MAX_DEPTH`]; a printed level can cost the parser two (a parenthesized
/// right operand is one level for the operator and one for the parentheses), so this is
/// below half of it and whatever the printer writes parses back.
pub const MAX_EXPR_DEPTH: usize = 120;

/// Prefix of the `let` variables [`bound_kernel`] introduces (followed by a number that makes
/// the name unused in the kernel).
const TEMP_PREFIX: &str = "_deep";

/// The depth of the deepest expression in `s` ([`Stmt::max_expr_depth`]: kept by every
/// statement, so no walk).
pub fn max_expr_depth(s: &Stmt) -> usize {
    s.max_expr_depth()
}

/// True if no expression of `k` is deeper than [`MAX_EXPR_DEPTH`].
pub fn is_bounded(k: &Kernel) -> bool {
    max_expr_depth(k.body()) <= MAX_EXPR_DEPTH
}

/// `k` with every expression deeper than [`MAX_EXPR_DEPTH`] split into `let`s; `k` itself
/// (pointer-equal) if there is none. The result means the same as `k`.
pub fn bound_kernel(k: &Kernel) -> Kernel {
    if is_bounded(k) {
        return k.clone();
    }
    let mut b = Bounder { used: kernel_names(k), next: 0, memo: HashMap::new() };
    let body = b.block_like(k.body());
    k.with_body(body)
}

/// [`bound_kernel`] on every kernel of `m`.
pub fn bound_module(m: &Module) -> Module {
    if m.kernels.iter().all(is_bounded) {
        return m.clone();
    }
    Module::new(m.kernels.iter().map(bound_kernel).collect())
}

/// The expressions directly in a statement (not in its sub-statements).
fn stmt_exprs(s: &Stmt) -> SmallVec<[&Expr; 3]> {
    match s.node() {
        StmtNode::Let { value, .. } | StmtNode::Assign { value, .. } => smallvec::smallvec![value],
        StmtNode::Decl { init, .. } => smallvec::smallvec![init],
        StmtNode::Store { index, value, .. } | StmtNode::VecStore { index, value, .. } => {
            smallvec::smallvec![index, value]
        }
        StmtNode::If { cond, .. } | StmtNode::While { cond, .. } => smallvec::smallvec![cond],
        StmtNode::For { lo, hi, step, .. } => smallvec::smallvec![lo, hi, step],
        StmtNode::Call { args, .. } => args.iter().collect(),
        StmtNode::Alloc { .. } | StmtNode::Block(_) => SmallVec::new(),
    }
}

/// Calls `f` on `s` and every statement nested in it.
fn for_each_stmt(s: &Stmt, f: &mut impl FnMut(&Stmt)) {
    f(s);
    match s.node() {
        StmtNode::If { then, otherwise, .. } => {
            for_each_stmt(then, f);
            if let Some(o) = otherwise {
                for_each_stmt(o, f);
            }
        }
        StmtNode::For { body, .. } | StmtNode::While { body, .. } => for_each_stmt(body, f),
        StmtNode::Block(stmts) => stmts.iter().for_each(|t| for_each_stmt(t, f)),
        _ => {}
    }
}

/// Every variable name in `k` (parameters, bindings, references), found without recursing
/// into expressions.
fn kernel_names(k: &Kernel) -> HashSet<String> {
    let mut names: HashSet<String> = k.params().iter().map(|p| p.name().to_string()).collect();
    let mut seen: HashSet<usize> = HashSet::new();
    let mut stack: Vec<Expr> = Vec::new();
    for_each_stmt(k.body(), &mut |s| {
        match s.node() {
            StmtNode::Let { var, .. }
            | StmtNode::Decl { var, .. }
            | StmtNode::Assign { var, .. }
            | StmtNode::Alloc { var, .. }
            | StmtNode::For { var, .. } => {
                names.insert(var.name().to_string());
            }
            StmtNode::Call { result: Some(var), .. } => {
                names.insert(var.name().to_string());
            }
            _ => {}
        }
        stack.extend(stmt_exprs(s).into_iter().cloned());
        while let Some(e) = stack.pop() {
            if !seen.insert(e.addr()) {
                continue;
            }
            match e.node() {
                ExprNode::Var(v) | ExprNode::Load { buf: v, .. } => {
                    names.insert(v.name().to_string());
                }
                _ => {}
            }
            stack.extend(e.children().into_iter().cloned());
        }
    });
    names
}

struct Bounder {
    used: HashSet<String>,
    next: usize,
    /// Split results by node address, so a shared sub-tree is split (and bound) once. Only
    /// valid within one statement: the `let`s it refers to are emitted before that statement.
    memo: HashMap<usize, Expr>,
}

impl Bounder {
    fn fresh(&mut self, ty: Type) -> Var {
        loop {
            let name = format!("{TEMP_PREFIX}{}", self.next);
            self.next += 1;
            if self.used.insert(name.clone()) {
                return Var::new(name, ty);
            }
        }
    }

    /// `e` with depth at most [`MAX_EXPR_DEPTH`], pushing the `let`s it needs onto `lets`.
    fn split(&mut self, e: &Expr, lets: &mut Vec<Stmt>) -> Expr {
        if e.depth() <= MAX_EXPR_DEPTH {
            return e.clone();
        }
        self.memo.clear();
        // Post-order with an explicit stack: a node is rebuilt once its children are done.
        let mut stack: Vec<(Expr, bool)> = vec![(e.clone(), false)];
        while let Some((n, children_done)) = stack.pop() {
            if self.memo.contains_key(&n.addr()) {
                continue;
            }
            if n.depth() < MAX_EXPR_DEPTH && !children_done {
                // Shallow enough as it is, and its children need no cut.
                self.memo.insert(n.addr(), n.clone());
                continue;
            }
            if !children_done {
                stack.push((n.clone(), true));
                for c in n.children() {
                    if !self.memo.contains_key(&c.addr()) {
                        stack.push((c.clone(), false));
                    }
                }
                continue;
            }
            let rebuilt = self.rebuild(&n);
            let is_root = n.ptr_eq(e);
            // Every child is now below MAX_EXPR_DEPTH, so `rebuilt` is at most MAX_EXPR_DEPTH
            // deep; binding it when it reaches the limit keeps its parent within it too.
            let out = if !is_root && rebuilt.depth() >= MAX_EXPR_DEPTH && !rebuilt.ty().is_ptr() {
                let v = self.fresh(rebuilt.ty());
                lets.push(Stmt::let_(&v, rebuilt));
                Expr::var(&v)
            } else {
                rebuilt
            };
            self.memo.insert(n.addr(), out);
        }
        self.memo.remove(&e.addr()).unwrap_or_else(|| e.clone())
    }

    /// `n` with its children replaced by their split versions (from the memo).
    fn rebuild(&self, n: &Expr) -> Expr {
        let get = |c: &Expr| self.memo.get(&c.addr()).cloned().unwrap_or_else(|| c.clone());
        let node = match n.node() {
            ExprNode::Unary { op, a } => ExprNode::Unary { op: *op, a: get(a) },
            ExprNode::Cast { to, a } => ExprNode::Cast { to: *to, a: get(a) },
            ExprNode::Binary { op, a, b } => ExprNode::Binary { op: *op, a: get(a), b: get(b) },
            ExprNode::Select { cond, a, b } => {
                ExprNode::Select { cond: get(cond), a: get(a), b: get(b) }
            }
            ExprNode::Load { buf, index } => ExprNode::Load { buf: buf.clone(), index: get(index) },
            ExprNode::VecLoad { buf, index, lanes } => {
                ExprNode::VecLoad { buf: buf.clone(), index: get(index), lanes: *lanes }
            }
            ExprNode::Extract { a, lane } => ExprNode::Extract { a: get(a), lane: *lane },
            ExprNode::Insert { a, lane, b } => {
                ExprNode::Insert { a: get(a), lane: *lane, b: get(b) }
            }
            ExprNode::Vector { ty, elems } => {
                ExprNode::Vector { ty: *ty, elems: elems.iter().map(get).collect() }
            }
            ExprNode::Intrinsic { op, args } => {
                ExprNode::Intrinsic { op: *op, args: args.iter().map(get).collect() }
            }
            ExprNode::Var(_) | ExprNode::Imm(_) | ExprNode::Builtin { .. } => return n.clone(),
        };
        n.rebuild(node)
    }

    /// A sub-statement that is its own scope (a kernel, loop or branch body): its splits stay
    /// inside it.
    fn block_like(&mut self, s: &Stmt) -> Stmt {
        let mut out = self.stmt(s);
        if out.len() == 1 {
            out.pop().unwrap_or_else(|| s.clone())
        } else {
            Stmt::block(out)
        }
    }

    /// The statements that replace `s` in its block: the `let`s its expressions need, then
    /// `s` rebuilt over the split expressions. `[s]` itself when nothing in it is too deep.
    fn stmt(&mut self, s: &Stmt) -> Vec<Stmt> {
        if max_expr_depth(s) <= MAX_EXPR_DEPTH {
            return vec![s.clone()];
        }
        let mut lets = Vec::new();
        let node = match s.node() {
            StmtNode::Let { var, value } => {
                StmtNode::Let { var: var.clone(), value: self.split(value, &mut lets) }
            }
            StmtNode::Decl { var, init } => {
                StmtNode::Decl { var: var.clone(), init: self.split(init, &mut lets) }
            }
            StmtNode::Assign { var, value } => {
                StmtNode::Assign { var: var.clone(), value: self.split(value, &mut lets) }
            }
            StmtNode::Store { buf, index, value } => StmtNode::Store {
                buf: buf.clone(),
                index: self.split(index, &mut lets),
                value: self.split(value, &mut lets),
            },
            StmtNode::VecStore { buf, index, value } => StmtNode::VecStore {
                buf: buf.clone(),
                index: self.split(index, &mut lets),
                value: self.split(value, &mut lets),
            },
            StmtNode::Call { result, func, args } => StmtNode::Call {
                result: result.clone(),
                func: func.clone(),
                args: args.iter().map(|a| self.split(a, &mut lets)).collect(),
            },
            StmtNode::If { cond, then, otherwise } => StmtNode::If {
                cond: self.split(cond, &mut lets),
                then: self.block_like(then),
                otherwise: otherwise.as_ref().map(|o| self.block_like(o)),
            },
            StmtNode::For { var, lo, hi, step, body } => StmtNode::For {
                var: var.clone(),
                lo: self.split(lo, &mut lets),
                hi: self.split(hi, &mut lets),
                step: self.split(step, &mut lets),
                body: self.block_like(body),
            },
            StmtNode::While { cond, body } if cond.depth() > MAX_EXPR_DEPTH => {
                return self.deep_while(cond, body);
            }
            StmtNode::While { cond, body } => {
                StmtNode::While { cond: cond.clone(), body: self.block_like(body) }
            }
            StmtNode::Block(stmts) => {
                StmtNode::Block(stmts.iter().flat_map(|t| self.stmt(t)).collect())
            }
            StmtNode::Alloc { .. } => return vec![s.clone()],
        };
        lets.push(Stmt::new(node));
        lets
    }

    /// `while cond { body }` with a too-deep `cond`: `var c = cond; while c { body; c = cond; }`,
    /// each evaluation of `cond` split into `let`s.
    fn deep_while(&mut self, cond: &Expr, body: &Stmt) -> Vec<Stmt> {
        let c = self.fresh(Type::BOOL);
        let mut out = Vec::new();
        let first = self.split(cond, &mut out);
        out.push(Stmt::decl(&c, first));
        let body = self.block_like(body);
        let mut inner = match body.node() {
            StmtNode::Block(stmts) => stmts.clone(),
            _ => vec![body],
        };
        let again = self.split(cond, &mut inner);
        inner.push(Stmt::assign(&c, again));
        out.push(Stmt::while_(Expr::var(&c), Stmt::block(inner)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(x: &Var, n: usize) -> Expr {
        let mut e = x.expr();
        for i in 0..n {
            e = if i % 2 == 0 { e + 3 } else { e * 5 };
        }
        e
    }

    /// [`is_bounded`] answers for each body alone: a deep kernel checked after a bounded one
    /// (also one built after the bounded one is gone, when its address may be reused) is
    /// still found deep, and the bounded one, asked again, still bounded.
    #[test]
    fn is_bounded_answers_for_each_body() {
        let x = Var::new("x", Type::I32);
        let p =
            Var::new("p", Type::ptr(crate::types::AddrSpace::Global, Type::I32.scalar().unwrap()));
        let kernel =
            |n| Kernel::new("k", vec![p.clone()], Stmt::block([Stmt::store(&p, 0, chain(&x, n))]));
        let shallow = kernel(4);
        let deep = kernel(MAX_EXPR_DEPTH + 10);
        assert!(is_bounded(&shallow));
        assert!(!is_bounded(&deep));
        assert!(is_bounded(&shallow), "asked again");
        assert!(is_bounded(&bound_kernel(&deep)));
        for _ in 0..100 {
            assert!(is_bounded(&kernel(4)));
            // Built after the bounded kernel above is dropped.
            assert!(!is_bounded(&kernel(MAX_EXPR_DEPTH + 1)));
        }
        // A kernel with the very body of a bounded one is bounded.
        assert!(is_bounded(&deep.with_body(shallow.body().clone())));
    }

    /// The printer's worst shapes at the depth limit (each level a parenthesized right
    /// operand, a call argument, a load index, a negation) parse back: the parser's nesting
    /// limit covers what bounded expressions print as.
    #[test]
    fn worst_shapes_at_the_depth_limit_print_and_parse_back() {
        let x = Var::new("x", Type::I32);
        let p =
            Var::new("p", Type::ptr(crate::types::AddrSpace::Global, crate::types::Scalar::I32));
        let y = Var::new("y", Type::I32);
        let build: [&dyn Fn(Expr) -> Expr; 5] = [
            &|e| Expr::binary(crate::expr::BinOp::Sub, x.expr(), e),
            &|e| Expr::binary(crate::expr::BinOp::Mul, e + 1, x.expr()),
            &|e| e.min(1),
            &|e| p.load(e),
            &|e| Expr::unary(crate::expr::UnOp::Neg, e),
        ];
        for (i, f) in build.iter().enumerate() {
            let mut e = x.expr();
            while e.depth() < MAX_EXPR_DEPTH + 5 {
                e = f(e);
            }
            let k = Kernel::new("k", vec![x.clone(), p.clone()], Stmt::block([Stmt::let_(&y, e)]));
            let b = bound_kernel(&k);
            assert!(max_expr_depth(b.body()) <= MAX_EXPR_DEPTH);
            let text = b.to_string();
            let back =
                crate::parse::parse_module(&text).unwrap_or_else(|d| panic!("shape {i}: {d}"));
            assert!(back.kernels[0].is_equal(&b), "shape {i}");
        }
    }

    /// The depth every statement keeps ([`Stmt::max_expr_depth`]) is what a walk of every
    /// statement finds, with the deepest expression in each place a statement holds one
    /// (each kind's own expressions, and nested in each kind of nested statement): a place
    /// left out would let a deep expression through to the recursive walks.
    #[test]
    fn kept_depth_is_the_deepest_expression_anywhere_in_the_tree() {
        fn walked(s: &Stmt) -> usize {
            let mut max = 0;
            for_each_stmt(s, &mut |t| {
                for e in stmt_exprs(t) {
                    max = max.max(e.depth());
                }
            });
            max
        }
        let x = Var::new("x", Type::I32);
        let p =
            Var::new("p", Type::ptr(crate::types::AddrSpace::Global, crate::types::Scalar::I32));
        let (y, i) = (Var::new("y", Type::I32), Var::new("i", Type::I32));
        let deep = || chain(&x, 40);
        let shallow = || x.expr() + 1;
        let cond = |e: Expr| e.cmp_lt(0);
        let places: Vec<Box<dyn Fn(Expr) -> Stmt>> = vec![
            Box::new(|e| Stmt::let_(&y, e)),
            Box::new(|e| Stmt::decl(&y, e)),
            Box::new(|e| Stmt::assign(&y, e)),
            Box::new(|e| Stmt::store(&p, e, shallow())),
            Box::new(|e| Stmt::store(&p, shallow(), e)),
            Box::new(|e| Stmt::if_(cond(e), Stmt::block([]))),
            Box::new(|e| Stmt::if_(cond(shallow()), Stmt::block([Stmt::let_(&y, e)]))),
            Box::new(|e| {
                Stmt::if_else(cond(shallow()), Stmt::block([]), Stmt::block([Stmt::let_(&y, e)]))
            }),
            Box::new(|e| Stmt::while_(cond(e), Stmt::block([]))),
            Box::new(|e| Stmt::while_(cond(shallow()), Stmt::let_(&y, e))),
            Box::new(|e| Stmt::for_(&i, e, shallow(), 1, Stmt::block([]))),
            Box::new(|e| Stmt::for_(&i, shallow(), e, 1, Stmt::block([]))),
            Box::new(|e| Stmt::for_(&i, 0, shallow(), e, Stmt::block([]))),
            Box::new(|e| Stmt::for_(&i, 0, shallow(), 1, Stmt::block([Stmt::let_(&y, e)]))),
            Box::new(|e| Stmt::block([Stmt::block([]), Stmt::let_(&y, e), Stmt::block([])])),
            Box::new(|e| {
                let add = crate::stmt::Func::atomic(crate::stmt::AtomicOp::Add);
                Stmt::call(add, [p.expr(), shallow(), e])
            }),
        ];
        for (n, place) in places.iter().enumerate() {
            for e in [deep(), shallow(), x.expr()] {
                let s = place(e.clone());
                assert_eq!(s.max_expr_depth(), walked(&s), "place {n}: {s}");
                assert!(s.max_expr_depth() >= e.depth(), "place {n}");
                // Nested again: the kept depth goes up through every enclosing statement.
                let outer = Stmt::block([Stmt::let_(&i, 0), Stmt::if_(cond(x.expr()), s)]);
                assert_eq!(outer.max_expr_depth(), walked(&outer), "place {n}, nested");
            }
        }
        assert_eq!(Stmt::block([]).max_expr_depth(), 0);
    }

    #[test]
    fn shallow_kernels_come_back_pointer_equal() {
        let x = Var::new("x", Type::I32);
        let y = Var::new("y", Type::I32);
        let k = Kernel::new("k", vec![x.clone()], Stmt::block([Stmt::let_(&y, chain(&x, 10))]));
        assert!(bound_kernel(&k).ptr_eq(&k));
    }

    #[test]
    fn deep_expressions_split_within_the_limit_and_names_stay_fresh() {
        let x = Var::new("_deep0", Type::I32);
        let y = Var::new("y", Type::I32);
        let w = Var::new("w", Type::BOOL);
        let body = Stmt::block([
            Stmt::let_(&y, chain(&x, 100_000)),
            Stmt::while_(chain(&x, 1000).cmp_lt(0), Stmt::block([])),
            Stmt::decl(&w, chain(&x, 300).cmp_eq(1)),
        ]);
        let k = Kernel::new("k", vec![x.clone()], body);
        let b = bound_kernel(&k);
        assert!(max_expr_depth(b.body()) <= MAX_EXPR_DEPTH, "{}", max_expr_depth(b.body()));
        assert!(!b.to_string().contains("let _deep0"));
        assert!(crate::verify::verify_kernel(&b).is_ok());
        let printed = b.to_string();
        let back = crate::parse::parse_module(&printed).unwrap();
        assert!(back.kernels[0].is_equal(&b));
    }
}
