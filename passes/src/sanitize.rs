//! The bounds sanitizer (`-fsanitize=bounds`): a rewrite that makes a kernel check every
//! memory access itself and report the first violation through an error buffer, so that a
//! device that does not trap (a GPU drops or corrupts out-of-bounds accesses) reports what
//! the interpreter would.
//!
//! [`sanitize_kernel`] appends hidden parameters to the kernel: one length per pointer
//! parameter (`u32`, or `u64` when the buffer is indexed with a 64-bit type anywhere), then
//! one error buffer (`ptr<global, u32>` of [`ERROR_WORDS`] words, zeroed by the caller).
//! Every load, store and atomic through a parameter or a `local`/`private` array is guarded:
//! in bounds it runs as before; out of bounds the store or atomic is skipped, the load yields
//! zero, execution goes on, and the access is recorded unless another was recorded first
//! (an atomic compare-exchange on word 0 picks one writer). Words 1..7 then hold the
//! access's site number, the index (two words, low first, as the two's-complement bits of
//! the index sign-extended to 64 bits) and the work-item's `global_id(0..2)`.
//!
//! Loops get a check too: a driver may stop a loop after some number of iterations
//! (lavapipe stops every loop after 65,535), silently. After each loop the rewritten kernel
//! asks whether the loop would have gone on: a `while` whose condition still holds, or a
//! `for` whose last counter value plus the step is still below the end. Such a loop is
//! reported with the number of iterations it ran.
//!
//! [`Sanitized::report`] turns the error buffer into the interpreter's error
//! ([`LaunchError`]) for the same access, such as
//! ``kernel `k`, work-item (x, y, z): store `p[9]` out of bounds (buffer has 8 elements)``.
//! When only one access in the launch is out of bounds
//! the report is exactly the interpreter's. When several are, it names one of them (the
//! first one recorded on the device), and within one work-item the first in the
//! interpreter's evaluation order; the interpreter names the first work-item in its own
//! order, which may be another one. Accesses that follow a violation in the same launch see
//! the zeros and skipped stores it left, so later reports are not meaningful, which is why
//! only the first is kept.

use hashbrown::{HashMap, HashSet};
use kiln_ir::launch::LaunchError;
use kiln_ir::launch::{Arg, Buffer};
use kiln_ir::{
    AddrSpace, AtomicOp, BinOp, Expr, ExprNode, Func, FuncKind, Imm, Kernel, Scalar, Stmt,
    StmtNode, Type, Var,
};

use crate::util::all_names;

/// The build option that turns the sanitizer on.
pub const SANITIZE_BOUNDS: &str = "-fsanitize=bounds";

/// The number of `u32` words of the error buffer: flag, site, index low, index high,
/// `global_id(0..2)`, and one spare.
pub const ERROR_WORDS: usize = 8;

/// What a checked site does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SiteKind {
    /// A load `p[i]`.
    Load,
    /// A store `p[i] = v`.
    Store,
    /// An atomic on `p[i]`.
    Atomic(AtomicOp),
    /// A `for` loop over the named counter.
    For,
    /// A `while` loop; `name` holds its condition's text.
    While,
}

/// Where the length an access is checked against comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Extent {
    /// The buffer bound to pointer parameter `i` (its length is a hidden argument).
    Param(usize),
    /// A `local` array of that many elements.
    Local(u32),
    /// A `private` array of that many elements.
    Private(u32),
    /// Not a memory access (a loop).
    None,
}

/// One checked access or loop of a sanitized kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    /// What it is.
    pub kind: SiteKind,
    /// The pointer's name (accesses), the counter's (`for`) or the condition (`while`).
    pub name: String,
    /// The memory accessed.
    pub extent: Extent,
    /// Whether the index type is signed (how the recorded bits read back).
    pub signed: bool,
    /// The lanes of a vector access (its index must be a multiple of them); 1 otherwise.
    pub lanes: u8,
}

/// A sanitized kernel and what a launch needs to run it and read its report.
#[derive(Clone, Debug)]
pub struct Sanitized {
    /// The rewritten kernel: the original parameters, then the hidden ones.
    pub kernel: Kernel,
    /// The original kernel's name.
    pub name: String,
    /// The number of original parameters.
    pub params: usize,
    /// Per hidden length parameter, in order: the pointer parameter it measures and its type
    /// (`u32` or `u64`).
    pub lens: Vec<(usize, Scalar)>,
    /// The checked sites; site `s` is recorded as the number `s + 1`.
    pub sites: Vec<Site>,
}

impl Sanitized {
    /// The launch arguments of the sanitized kernel: `args` (one per original parameter,
    /// pointers indexing `buffers`), the buffers' lengths, and the error buffer as
    /// `Arg::Buffer(buffers.len())`, which the caller appends, zeroed, as
    /// `Buffer::zeroed(Scalar::U32, ERROR_WORDS)`.
    pub fn launch_args(&self, args: &[Arg], buffers: &[Buffer]) -> Result<Vec<Arg>, String> {
        if args.len() != self.params {
            return Err(format!(
                "kernel `{}` takes {} arguments, {} given",
                self.name,
                self.params,
                args.len()
            ));
        }
        let mut out = args.to_vec();
        for &(p, ty) in &self.lens {
            let len = match args[p] {
                Arg::Buffer(b) if b < buffers.len() => buffers[b].len() as u64,
                // A ranged argument is checked against its range (indexes are relative to it).
                Arg::Range { buffer, len, .. } if buffer < buffers.len() => len as u64,
                _ => {
                    return Err(format!(
                        "kernel `{}`: argument {p} must be a buffer (pointer parameter)",
                        self.name
                    ))
                }
            };
            if ty == Scalar::U32 && len > u32::MAX as u64 {
                return Err(format!(
                    "kernel `{}`: -fsanitize=bounds cannot check a buffer of {len} elements \
                     indexed with 32-bit indices (argument {p})",
                    self.name
                ));
            }
            out.push(Arg::Scalar(Imm::Int(ty, len)));
        }
        out.push(Arg::Buffer(buffers.len()));
        Ok(out)
    }

    /// The violation recorded in the error buffer `words`, as the interpreter reports it,
    /// or `None` if there is none. `args` and `buffers` are the launch's (original
    /// arguments), for the buffers' lengths.
    pub fn report(&self, words: &[u32], args: &[Arg], buffers: &[Buffer]) -> Option<LaunchError> {
        if words.len() < ERROR_WORDS || words[0] == 0 {
            return None;
        }
        let err = |message: String| LaunchError {
            kernel: self.name.clone(),
            work_item: Some([words[4], words[5], words[6]]),
            message,
        };
        let Some(site) = (words[1] as usize).checked_sub(1).and_then(|s| self.sites.get(s)) else {
            return Some(err(format!(
                "-fsanitize=bounds: the error buffer is damaged (site {} of {})",
                words[1],
                self.sites.len()
            )));
        };
        let bits = (words[3] as u64) << 32 | words[2] as u64;
        let index = if site.signed { bits as i64 as i128 } else { bits as i128 };
        let vector = site.lanes > 1;
        let what = match site.kind {
            SiteKind::Load if vector => "vector load",
            SiteKind::Store if vector => "vector store",
            SiteKind::Load => "load",
            SiteKind::Store => "store",
            SiteKind::Atomic(op) => op.name(),
            SiteKind::For | SiteKind::While => {
                let lp = if site.kind == SiteKind::For {
                    format!("`for {}` loop", site.name)
                } else {
                    format!("`while {}` loop", site.name)
                };
                return Some(err(format!(
                    "{lp} stopped by the device after {bits} iterations with iterations left \
                     (a driver limit on loop trips); the results are incomplete"
                )));
            }
        };
        let (kind, len, offset) = match site.extent {
            Extent::Param(p) => match args.get(p) {
                Some(Arg::Buffer(b)) if *b < buffers.len() => {
                    ("buffer", buffers[*b].len() as u64, None)
                }
                Some(&Arg::Range { buffer, offset, len }) if buffer < buffers.len() => {
                    ("buffer", len as u64, Some(offset))
                }
                _ => ("buffer", 0, None),
            },
            Extent::Local(n) => ("local array", n as u64, None),
            Extent::Private(n) => ("private array", n as u64, None),
            Extent::None => ("buffer", 0, None),
        };
        // A vector access in bounds failed its alignment or its last lane, in the
        // interpreter's order (first element, alignment, last lane).
        let lanes = site.lanes as i128;
        let in_bounds = index >= 0 && index < len as i128;
        if vector && in_bounds && index % lanes != 0 {
            return Some(err(format!(
                "misaligned {what} `{}[{index}]` of {lanes} lanes: the index must be a \
                 multiple of {lanes}",
                site.name
            )));
        }
        let index = if vector && in_bounds { index + lanes - 1 } else { index };
        let note = kiln_ir::launch::bounds_note(kind, len, offset);
        Some(err(format!("{what} `{}[{index}]` out of bounds ({note})", site.name)))
    }
}

/// Rewrites `k` to check its own accesses and loops (see the module docs). The result
/// verifies if `k` does.
pub fn sanitize_kernel(k: &Kernel) -> Sanitized {
    let mut names = all_names(k);
    let mut fresh = |base: &str| -> String {
        let mut n = names.len();
        loop {
            let cand = format!("ksan_{base}{n}");
            if names.insert(cand.clone()) {
                return cand;
            }
            n += 1;
        }
    };
    let wide = wide_indexed(k);
    let mut extents = HashMap::new();
    let mut lens = Vec::new();
    let mut hidden = Vec::new();
    for (i, p) in k.params().iter().enumerate() {
        if p.ty().is_ptr() {
            let ty = if wide.contains(p.name()) { Scalar::U64 } else { Scalar::U32 };
            let v = Var::new(fresh(&format!("len_{}_", p.name())), Type::Scalar(ty));
            extents.insert(p.name().to_string(), (Extent::Param(i), Expr::var(&v)));
            lens.push((i, ty));
            hidden.push(v);
        }
    }
    let err = Var::new(fresh("err"), Type::ptr(AddrSpace::Global, Scalar::U32));
    hidden.push(err.clone());
    let mut r = Rewriter { fresh: Box::new(fresh), extents, err, sites: Vec::new() };
    let body = r.block(k.body().stmts());
    let mut params = k.params().to_vec();
    params.extend(hidden);
    let kernel = Kernel::with_attrs(k.name(), params, k.attrs().clone(), Stmt::block(body));
    Sanitized { kernel, name: k.name().to_string(), params: k.params().len(), lens, sites: r.sites }
}

/// The pointer names indexed with a 64-bit integer somewhere in `k`.
fn wide_indexed(k: &Kernel) -> HashSet<String> {
    use kiln_ir::{walk_expr, walk_stmt, Visitor};
    struct Wide(HashSet<String>);
    impl Wide {
        fn note(&mut self, buf: &Var, index: &Expr) {
            if index.ty().scalar().is_some_and(|s| s.bits() == 64) {
                self.0.insert(buf.name().to_string());
            }
        }
    }
    impl Visitor for Wide {
        fn visit_expr(&mut self, e: &Expr) {
            if let ExprNode::Load { buf, index } | ExprNode::VecLoad { buf, index, .. } = e.node() {
                self.note(buf, index);
            }
            walk_expr(self, e)
        }
        fn visit_stmt(&mut self, s: &Stmt) {
            match s.node() {
                StmtNode::Store { buf, index, .. } | StmtNode::VecStore { buf, index, .. } => {
                    self.note(buf, index)
                }
                StmtNode::Call { func, args, .. } if matches!(func.kind(), FuncKind::Atomic(_)) => {
                    if let (Some(ExprNode::Var(buf)), Some(index)) =
                        (args.first().map(|a| a.node()), args.get(1))
                    {
                        self.note(buf, index);
                    }
                }
                _ => {}
            }
            walk_stmt(self, s)
        }
    }
    let mut w = Wide(HashSet::new());
    w.visit_stmt(k.body());
    w.0
}

struct Rewriter<'a> {
    fresh: Box<dyn FnMut(&str) -> String + 'a>,
    /// Per pointer name in scope: where its length comes from and the length as an
    /// expression (a hidden parameter or a constant).
    extents: HashMap<String, (Extent, Expr)>,
    err: Var,
    sites: Vec<Site>,
}

fn zero(s: Scalar) -> Expr {
    Expr::constant(s, 0.0)
}

fn cast(e: &Expr, to: Scalar) -> Expr {
    if e.ty() == Type::Scalar(to) {
        e.clone()
    } else {
        e.cast(to)
    }
}

fn contains_load(e: &Expr) -> bool {
    matches!(e.node(), ExprNode::Load { .. } | ExprNode::VecLoad { .. })
        || e.children().into_iter().any(contains_load)
}

impl Rewriter<'_> {
    fn var(&mut self, base: &str, ty: Type) -> Var {
        Var::new((self.fresh)(base), ty)
    }

    fn block(&mut self, stmts: &[Stmt]) -> Vec<Stmt> {
        let mut out = Vec::with_capacity(stmts.len());
        for s in stmts {
            self.stmt(s, &mut out);
        }
        out
    }

    /// `e` bound to a fresh `let` unless it is a variable or constant already.
    fn bind(&mut self, e: Expr, base: &str, out: &mut Vec<Stmt>) -> Expr {
        if matches!(e.node(), ExprNode::Var(_) | ExprNode::Imm(_)) {
            return e;
        }
        let v = self.var(base, e.ty());
        out.push(Stmt::let_(&v, e));
        Expr::var(&v)
    }

    /// `e` with every checked load replaced by a variable that checked code before it (in
    /// `out`, in the interpreter's evaluation order: operands left to right, an index
    /// before its load) sets.
    fn expr(&mut self, e: &Expr, out: &mut Vec<Stmt>) -> Expr {
        if !contains_load(e) {
            return e.clone();
        }
        match e.node() {
            ExprNode::Var(_) | ExprNode::Imm(_) | ExprNode::Builtin { .. } => e.clone(),
            ExprNode::VecLoad { buf, index, lanes } => {
                let index = self.expr(index, out);
                let Some(check) = self.check(buf, SiteKind::Load, index.clone(), *lanes, out)
                else {
                    return Expr::vload(buf, index, *lanes);
                };
                let elem = buf.ty().elem().unwrap_or(Scalar::U32);
                let v = self.var("v", Type::Vector(elem, *lanes));
                out.push(Stmt::decl(&v, zero(elem).broadcast(*lanes)));
                let load = Stmt::assign(&v, Expr::vload(buf, check.index.clone(), *lanes));
                out.push(Stmt::if_else(check.ok, load, check.record));
                Expr::var(&v)
            }
            ExprNode::Extract { a, lane } => self.expr(a, out).extract(*lane),
            ExprNode::Insert { a, lane, b } => {
                let a = self.expr(a, out);
                a.insert(*lane, self.expr(b, out))
            }
            ExprNode::Vector { ty, elems } => {
                let elems = elems.iter().map(|x| self.expr(x, out)).collect();
                Expr::new(ExprNode::Vector { ty: *ty, elems })
            }
            ExprNode::Unary { op, a } => Expr::unary(*op, self.expr(a, out)),
            ExprNode::Binary { op, a, b } => {
                let a = self.expr(a, out);
                Expr::binary(*op, a, self.expr(b, out))
            }
            ExprNode::Select { cond, a, b } => {
                let c = self.expr(cond, out);
                let a = self.expr(a, out);
                Expr::select(c, a, self.expr(b, out))
            }
            ExprNode::Cast { to, a } => self.expr(a, out).cast(*to),
            ExprNode::Intrinsic { op, args } => {
                let args: Vec<Expr> = args.iter().map(|a| self.expr(a, out)).collect();
                Expr::intrinsic(*op, args)
            }
            ExprNode::Load { buf, index } => {
                let index = self.expr(index, out);
                let Some(check) = self.check(buf, SiteKind::Load, index.clone(), 1, out) else {
                    return Expr::load(buf, index);
                };
                let elem = buf.ty().elem().unwrap_or(Scalar::U32);
                let v = self.var("v", Type::Scalar(elem));
                out.push(Stmt::decl(&v, zero(elem)));
                let load = Stmt::assign(&v, Expr::load(buf, check.index.clone()));
                out.push(Stmt::if_else(check.ok, load, check.record));
                Expr::var(&v)
            }
        }
    }

    /// For an access `buf[index]` through a checked pointer: the index (bound to a
    /// variable), the in-bounds condition and the code recording a violation.
    /// A vector access of `lanes` lanes also needs its last lane in bounds.
    fn check(
        &mut self,
        buf: &Var,
        kind: SiteKind,
        index: Expr,
        lanes: u8,
        out: &mut Vec<Stmt>,
    ) -> Option<Check> {
        let (extent, len) = self.extents.get(buf.name())?.clone();
        let Some(t) = index.ty().scalar().filter(|s| s.is_int()) else {
            return None; // ill-typed: the verifier reports it
        };
        let index = self.bind(index, "i", out);
        let len_ty = len.ty().scalar().unwrap_or(Scalar::U32);
        let len =
            if t.bits() == 64 && len_ty == Scalar::U32 { cast(&len, Scalar::U64) } else { len };
        let lt = len.ty().scalar().unwrap_or(Scalar::U32);
        let below = cast(&index, lt).cmp_lt(len.clone());
        let ok = if t.is_signed() { index.cmp_ge(zero(t)).logic_and(below) } else { below };
        // `len - index` cannot wrap where `index < len`, the only case the conjunct decides.
        // A vector access must also be aligned, as the interpreter demands: the check is
        // kept here, before vector lowering splits the access into element accesses that
        // would succeed misaligned. (Lanes are a power of two, so `index & (lanes - 1)` is
        // the remainder for signed indices too, and an index at or above 0 is all it sees.)
        let ok = if lanes > 1 {
            let room = Expr::binary(BinOp::Sub, len.clone(), cast(&index, lt));
            let rem = Expr::binary(BinOp::And, index.clone(), Expr::int(t, lanes as i128 - 1));
            ok.logic_and(rem.cmp_eq(zero(t))).logic_and(room.cmp_ge(Expr::int(lt, lanes as i128)))
        } else {
            ok
        };
        self.sites.push(Site {
            kind,
            name: buf.name().to_string(),
            extent,
            signed: t.is_signed(),
            lanes,
        });
        let site = self.sites.len() as u32;
        let record = self.record(site, &index);
        Some(Check { index, ok, record })
    }

    /// Records site `site` with `value` (an integer) unless a violation is recorded already.
    fn record(&mut self, site: u32, value: &Expr) -> Stmt {
        let t = value.ty().scalar().unwrap_or(Scalar::U32);
        let lo = cast(value, Scalar::U32);
        let hi = if t.bits() == 64 {
            cast(&Expr::binary(BinOp::Shr, value.clone(), Expr::int(t, 32)), Scalar::U32)
        } else if t.is_signed() {
            cast(&Expr::binary(BinOp::Shr, cast(value, Scalar::I32), Expr::i32(31)), Scalar::U32)
        } else {
            Expr::u32(0)
        };
        let old = self.var("old", Type::U32);
        let e = &self.err;
        let cas = Stmt::call_into(
            &old,
            Func::atomic(AtomicOp::CmpXchg),
            [Expr::var(e), Expr::u32(0), Expr::u32(0), Expr::u32(1)],
        );
        let mut fill = vec![
            Stmt::store(e, Expr::u32(1), Expr::u32(site)),
            Stmt::store(e, Expr::u32(2), lo),
            Stmt::store(e, Expr::u32(3), hi),
        ];
        for d in 0..3u8 {
            fill.push(Stmt::store(e, Expr::u32(4 + d as u32), Expr::global_id(d)));
        }
        Stmt::block([cas, Stmt::if_(Expr::var(&old).cmp_eq(Expr::u32(0)), Stmt::block(fill))])
    }

    fn stmt(&mut self, s: &Stmt, out: &mut Vec<Stmt>) {
        match s.node() {
            StmtNode::Let { var, value } => {
                let v = self.expr(value, out);
                out.push(Stmt::let_(var, v));
            }
            StmtNode::Decl { var, init } => {
                let v = self.expr(init, out);
                out.push(Stmt::decl(var, v));
            }
            StmtNode::Assign { var, value } => {
                let v = self.expr(value, out);
                out.push(Stmt::assign(var, v));
            }
            StmtNode::Store { buf, index, value } => {
                let index = self.expr(index, out);
                let value = self.expr(value, out);
                match self.check(buf, SiteKind::Store, index.clone(), 1, out) {
                    Some(c) => {
                        out.push(Stmt::if_else(c.ok, Stmt::store(buf, c.index, value), c.record))
                    }
                    None => out.push(Stmt::store(buf, index, value)),
                }
            }
            StmtNode::VecStore { buf, index, value } => {
                let lanes = value.ty().lanes();
                let index = self.expr(index, out);
                let value = self.expr(value, out);
                match self.check(buf, SiteKind::Store, index.clone(), lanes, out) {
                    Some(c) => {
                        out.push(Stmt::if_else(c.ok, Stmt::vstore(buf, c.index, value), c.record))
                    }
                    None => out.push(Stmt::vstore(buf, index, value)),
                }
            }
            StmtNode::Alloc { var, count } => {
                let extent = if var.ty().addr_space() == Some(AddrSpace::Local) {
                    Extent::Local(*count)
                } else {
                    Extent::Private(*count)
                };
                self.extents.insert(var.name().to_string(), (extent, Expr::u32(*count)));
                out.push(s.clone());
            }
            StmtNode::If { cond, then, otherwise } => {
                let c = self.expr(cond, out);
                let then = Stmt::block(self.block(then.stmts()));
                match otherwise {
                    None => out.push(Stmt::if_(c, then)),
                    Some(o) => {
                        let mut els = Vec::new();
                        self.stmt(o, &mut els);
                        let els = if els.len() == 1 { els.remove(0) } else { Stmt::block(els) };
                        out.push(Stmt::if_else(c, then, els));
                    }
                }
            }
            StmtNode::For { var, lo, hi, step, body } => {
                self.for_loop(var, lo, hi, step, body, out)
            }
            StmtNode::While { cond, body } => {
                // `while c { b }` becomes `while go { if c { b } else { done; stop } }` and
                // the check after it asks for `done`: a check of `c` itself after the loop
                // would be folded to false by a driver's compiler, which knows that the loop
                // exits only when `c` is false (lavapipe's NIR does).
                let go = self.var("go", Type::BOOL);
                let done = self.var("done", Type::BOOL);
                let n = self.var("n", Type::U32);
                out.push(Stmt::decl(&go, Expr::bool(true)));
                out.push(Stmt::decl(&done, Expr::bool(false)));
                out.push(Stmt::decl(&n, Expr::u32(0)));
                let mut inner = Vec::new();
                let c = self.expr(cond, &mut inner);
                let mut then = self.block(body.stmts());
                then.push(Stmt::assign(&n, Expr::var(&n) + Expr::u32(1)));
                let stop = Stmt::block([
                    Stmt::assign(&done, Expr::bool(true)),
                    Stmt::assign(&go, Expr::bool(false)),
                ]);
                inner.push(Stmt::if_else(c, Stmt::block(then), stop));
                out.push(Stmt::while_(Expr::var(&go), Stmt::block(inner)));
                self.sites.push(Site {
                    kind: SiteKind::While,
                    name: cond.to_string(),
                    extent: Extent::None,
                    signed: false,
                    lanes: 1,
                });
                let record = self.record(self.sites.len() as u32, &Expr::var(&n));
                out.push(Stmt::if_(Expr::unary(kiln_ir::UnOp::Not, Expr::var(&done)), record));
            }
            StmtNode::Block(v) => out.push(Stmt::block(self.block(v))),
            StmtNode::Call { result, func, args } => {
                let FuncKind::Atomic(op) = func.kind() else {
                    out.push(s.clone());
                    return;
                };
                let ptr = args.first().and_then(|a| a.as_var()).cloned();
                let mut new_args = args.first().cloned().into_iter().collect::<Vec<_>>();
                for a in args.iter().skip(1) {
                    new_args.push(self.expr(a, out));
                }
                let check = match (&ptr, new_args.get(1)) {
                    (Some(p), Some(i)) => self.check(p, SiteKind::Atomic(op), i.clone(), 1, out),
                    _ => None,
                };
                let Some(c) = check else {
                    out.push(Stmt::new(StmtNode::Call {
                        result: result.clone(),
                        func: func.clone(),
                        args: new_args,
                    }));
                    return;
                };
                new_args[1] = c.index.clone();
                match result {
                    None => {
                        out.push(Stmt::if_else(c.ok, Stmt::call(func.clone(), new_args), c.record))
                    }
                    Some(r) => {
                        let elem = r.ty().scalar().unwrap_or(Scalar::U32);
                        let slot = self.var("r", r.ty());
                        let got = self.var("a", r.ty());
                        out.push(Stmt::decl(&slot, zero(elem)));
                        let call = Stmt::block([
                            Stmt::call_into(&got, func.clone(), new_args),
                            Stmt::assign(&slot, Expr::var(&got)),
                        ]);
                        out.push(Stmt::if_else(c.ok, call, c.record));
                        out.push(Stmt::let_(r, Expr::var(&slot)));
                    }
                }
            }
        }
    }

    /// `for` with its bounds bound once, the last counter value and the trip count kept, and
    /// a check after it that no iteration was left out.
    fn for_loop(
        &mut self,
        var: &Var,
        lo: &Expr,
        hi: &Expr,
        step: &Expr,
        body: &Stmt,
        out: &mut Vec<Stmt>,
    ) {
        let t = var.ty().scalar().filter(|s| s.is_int());
        let lo = self.expr(lo, out);
        let lo = self.bind(lo, "lo", out);
        let hi = self.expr(hi, out);
        let hi = self.bind(hi, "hi", out);
        let step = self.expr(step, out);
        let step = self.bind(step, "step", out);
        let Some(t) = t else {
            // Ill-typed counter: the verifier reports it; keep the loop as it is.
            let body = Stmt::block(self.block(body.stmts()));
            out.push(Stmt::for_(var, lo, hi, step, body));
            return;
        };
        let n = self.var("n", Type::U32);
        let last = self.var("last", var.ty());
        out.push(Stmt::decl(&n, Expr::u32(0)));
        out.push(Stmt::decl(&last, lo.clone()));
        let mut inner = vec![
            Stmt::assign(&last, Expr::var(var)),
            Stmt::assign(&n, Expr::var(&n) + Expr::u32(1)),
        ];
        inner.extend(self.block(body.stmts()));
        out.push(Stmt::for_(var, lo.clone(), hi.clone(), step.clone(), Stmt::block(inner)));
        // Another iteration was due iff `last + step < hi`, computed without overflow: `hi -
        // last` is exact in the unsigned type of the counter's width since `last < hi`.
        let u = match t.bits() {
            8 => Scalar::U8,
            16 => Scalar::U16,
            32 => Scalar::U32,
            _ => Scalar::U64,
        };
        // `hi` plus the error buffer's last word (always zero): a driver's compiler that
        // knows the trip count (constant bounds) cannot fold the check away. (lavapipe does
        // not fold it even without this; it is a precaution, unlike the `while` rewrite.)
        let opaque = Expr::load(&self.err, Expr::u32(ERROR_WORDS as u32 - 1)).cast(u);
        let gap = cast(&hi, u) + opaque - cast(&Expr::var(&last), u);
        let more = Expr::var(&n)
            .cmp_eq(Expr::u32(0))
            .logic_and(lo.cmp_lt(hi.clone()))
            .logic_or(Expr::var(&n).cmp_ne(Expr::u32(0)).logic_and(gap.cmp_gt(cast(&step, u))));
        let cut = step.cmp_gt(zero(t)).logic_and(more);
        self.sites.push(Site {
            kind: SiteKind::For,
            name: var.name().to_string(),
            extent: Extent::None,
            signed: false,
            lanes: 1,
        });
        let record = self.record(self.sites.len() as u32, &Expr::var(&n));
        out.push(Stmt::if_(cut, record));
    }
}

struct Check {
    index: Expr,
    ok: Expr,
    record: Stmt,
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_ir::testing::{seeded_cases, GenConfig};
    use kiln_ir::{parse_module, verify_kernel};

    /// The rewrite of `k` verifies and prints as text that parses back to it.
    fn check_rewrite(k: &Kernel) -> Sanitized {
        let s = sanitize_kernel(k);
        if let Err(e) = verify_kernel(&s.kernel) {
            panic!("{e:?}\n{}", s.kernel);
        }
        let back = parse_module(&s.kernel.to_string()).unwrap().kernels.remove(0);
        assert!(back.is_equal(&s.kernel), "{}", s.kernel);
        s
    }

    #[test]
    fn rewrites_verify_and_print_back() {
        let src = "kernel k(x: ptr<global, f32>, c: ptr<global, u32>, y: ptr<constant, i64>,
                            n: u32) {
          local t: u32[8];
          private p: f32[2];
          let i: u32 = global_id(0);
          t[i % 8] = c[i];
          barrier(local);
          for j: i64 in 0i64 .. y[0] step 1i64 {
            p[j % 2i64] = x[y[j]] + p[0];
          }
          var k: u32 = 0;
          while c[k] > n && k < 4 {
            k = k + 1;
          }
          if x[i] > 0.0 {
            let old: u32 = atomic_add(c, t[i % 8], 1u32);
            x[i] = old as f32;
          } else if x[i + 1] < 0.0 {
            atomic_max(t, 0u8, 3u32);
          }
        }";
        let k = parse_module(src).unwrap().kernels.remove(0);
        let s = check_rewrite(&k);
        // `x` is indexed with a 64-bit value (`y[j]`), so its length is a u64; the others
        // are u32. The error buffer comes last.
        assert_eq!(s.lens, [(0, Scalar::U64), (1, Scalar::U32), (2, Scalar::U64)]);
        assert_eq!(s.kernel.params().len(), 4 + 3 + 1);
        let kinds: Vec<_> = s.sites.iter().map(|x| (x.kind.clone(), x.name.as_str())).collect();
        assert!(kinds.contains(&(SiteKind::Atomic(AtomicOp::Max), "t")), "{kinds:?}");
        assert!(kinds.contains(&(SiteKind::For, "j")), "{kinds:?}");
        assert!(kinds.contains(&(SiteKind::While, "c[k] > n && k < 4")), "{kinds:?}");
        // Kernels without pointers still get the error buffer (for their loops).
        let plain = parse_module("kernel e(n: u32) { for i: u32 in 0 .. n step 1 { } }").unwrap();
        assert_eq!(check_rewrite(&plain.kernels[0]).kernel.params().len(), 2);
    }

    #[test]
    fn random_kernels_rewrite_to_verified_kernels() {
        for case in seeded_cases(0x0123_4567_89ab_cdef, &GenConfig::default()).take(100) {
            check_rewrite(&case.kernel);
        }
    }

    #[test]
    fn hidden_names_never_collide_with_the_kernels() {
        let k = parse_module(
            "kernel k(ksan_err4: ptr<global, u32>, ksan_len_ksan_err4_3: u32) {
               let ksan_i5: u32 = ksan_err4[0];
               ksan_err4[ksan_i5] = 1;
             }",
        )
        .unwrap()
        .kernels
        .remove(0);
        let s = check_rewrite(&k);
        let names: HashSet<&str> = s.kernel.params().iter().map(|p| p.name()).collect();
        assert_eq!(names.len(), 4);
    }

    #[test]
    fn damaged_error_buffers_are_reported_not_trusted() {
        let k = parse_module("kernel k(x: ptr<global, u32>) { x[1] = 2; }").unwrap();
        let s = sanitize_kernel(&k.kernels[0]);
        let bufs = [Buffer::from_slice(&[0u32])];
        let args = [Arg::Buffer(0)];
        assert!(s.report(&[0; ERROR_WORDS], &args, &bufs).is_none());
        let e = s.report(&[1, 99, 0, 0, 0, 0, 0, 0], &args, &bufs).unwrap();
        assert!(e.message.contains("damaged"), "{e}");
        let e = s.report(&[1, 1, 1, 0, 3, 0, 0, 0], &args, &bufs).unwrap();
        assert_eq!(
            e.to_string(),
            "kernel `k`, work-item (3, 0, 0): store `x[1]` out of bounds (buffer has 1 element)"
        );
        assert!(s.launch_args(&[Arg::Buffer(0), Arg::Buffer(0)], &bufs).is_err());
        assert!(s.launch_args(&[Arg::scalar(1u32)], &bufs).is_err());
    }
}
