//! Row-blocked `for` loops: a batch-uniform loop `for j in lo .. hi` (step 1) whose body
//! reads and writes buffers at `b + j`, `b` a lane-varying `let` from outside the loop or a
//! lane-varying product `x * y` of `mad(x, y, j)` / `x * y + j` (its factors constants,
//! parameters or `let`s from outside the loop; computed once before it), is run eight
//! iterations at a time (each lane walks its own row, as a row softmax does:
//! `x[r * cols + j]`). The body may assign 64-bit `var`s (row sums in `u64`, `i64` or
//! `f64`, in the iterations' order) and load 64-bit elements (blocked as two vectors per
//! iteration, lanes 0-3 and 4-7, by 4x4 qword transposes); its stores are of 32-bit lanes.
//! Per chunk of eight, each such access is eight 32-byte row segments (one per lane, 64
//! bytes for 64-bit elements) transposed in registers into eight vectors, one per
//! iteration, instead of eight gathers; stores are collected the same way and written as
//! row segments after the chunk. The body is copied eight times, each copy reading its
//! iteration's vector from the frame; a load at exactly the counter (`gamma[j]`, one
//! element for every lane) is a broadcast at the chunk's counter plus the copy's iteration
//! (`blockio.rs`, which also reads and writes the row segments). The rows are checked against the buffers' lengths
//! once per loop (every iteration's index of every lane, in 64-bit arithmetic, so no
//! index wraps, and within the index type's range, so that none is an index the
//! interpreter's 32-bit sum would have wrapped); where a check fails, a lane is not alive, or fewer than eight
//! iterations remain, the ordinary loop runs on from the current counter.
//!
//! Why the results are the interpreter's: the blocked accesses and the loads at the
//! counter cannot fault (checked once; the latter's buffers apart from every stored one,
//! so no lane reads another's store), and a body with stores has nothing else that can fault and no other loads, so
//! deferring its stores to the chunk's end is invisible, except to a load of the same
//! element by the same lane later in the chunk: every blocked access of such a body uses
//! one base `b`, so lane `l` meets element `b_l + j` only in iteration `j`, where its
//! loads come before its stores (no load in a statement after the first store), and a
//! loop that stores into one buffer and loads from or stores into another runs blocked
//! only where the two are the same memory or do not overlap (windows of one buffer may).
//! A loop with stores runs blocked only where the lanes' rows are apart, in lane order, so
//! no lane touches an element another lane stores: even a racy kernel (rows that overlap)
//! gets the ordinary loop's result.

use iced_x86::code_asm::*;
use kiln_ir::{
    AddrSpace, BinOp, Expr, ExprNode, Imm, Intrinsic, Scalar, Stmt, StmtNode, Type, Var,
};

use super::{Kind, Loc, R, V, YMM};
use crate::x86::rt;

/// The most expression nodes a body copied eight times may have.
const MAX_NODES: usize = 400;
/// The most blocked accesses of one loop (each a 256-byte block of the frame).
const MAX_BLOCKS: usize = 6;

/// A blocked access: buffer (table), base `let`, and the frame block of its eight
/// iteration vectors (`off + 32 * k` for iteration `k` of the chunk; of 64-bit elements,
/// `wide`, two vectors per iteration, lanes 0-3 at `off + 64 * k` and 4-7 after them).
#[derive(Clone, Debug)]
pub(super) struct Block {
    pub(super) buf: String,
    pub(super) table: u32,
    pub(super) base: String,
    pub(super) store: bool,
    pub(super) wide: bool,
    pub(super) off: i32,
    /// The frame slot of the prefetch distance of its base's rows (`blockio.rs`).
    pub(super) pf: i32,
    /// True if its chunks prefetch the lanes' rows ahead ([`V::row_prefetch`]).
    pub(super) prefetch: bool,
}

/// The blocked accesses of the loop being generated, and the copy (iteration of the
/// chunk) now being generated.
#[derive(Clone, Debug, Default)]
pub(super) struct Blocking {
    pub(super) counter: String,
    blocks: Vec<Block>,
    /// The body's `let`s of `b + j` (as CSE leaves an index used twice): name, base.
    aliases: Vec<(String, String)>,
    /// True if those `let`s are read only as blocked indices, so the copies skip them.
    skip_aliases: bool,
    /// Buffers loaded at exactly the counter (checked once per loop): name, table.
    pub(super) bcast: Vec<(String, u32)>,
    /// The counter's frame slot.
    pub(super) cnt: i32,
    /// True if the copies advance the counter one by one (else it stays at the chunk's
    /// first iteration until the chunk's end).
    pub(super) stepped: bool,
    pub(super) k: i32,
}

/// The base of `index` if it is `b + j`, `j + b`, `mad(x, y, j)` (the key of the product,
/// [`product_key`]), or the name of a `let` of one of those in `aliases`.
fn base_of(index: &Expr, j: &str, aliases: &[(String, String)]) -> Option<String> {
    if let ExprNode::Var(v) = index.node() {
        return aliases.iter().find(|a| a.0 == v.name()).map(|a| a.1.clone());
    }
    if let Some((x, y)) = mad_parts(index, j) {
        return Some(product_key(x, y));
    }
    split(index, j).map(str::to_string)
}

/// The factors of `index` if it is `mad(x, y, j)`, `x * y + j` or `j + x * y`, each factor
/// a name other than `j` or a constant: the row's start `x * y` (`r * cols + j`, which the
/// `-O` pipeline writes as `mad`).
fn mad_parts<'a>(index: &'a Expr, j: &str) -> Option<(&'a Expr, &'a Expr)> {
    let is_j = |e: &Expr| matches!(e.node(), ExprNode::Var(v) if v.name() == j);
    let (x, y) = match index.node() {
        ExprNode::Intrinsic { op: Intrinsic::Mad, args } if is_j(&args[2]) => (&args[0], &args[1]),
        ExprNode::Binary { op: BinOp::Add, a, b } => match (a.node(), b.node()) {
            (ExprNode::Binary { op: BinOp::Mul, a: x, b: y }, _) if is_j(b) => (x, y),
            (_, ExprNode::Binary { op: BinOp::Mul, a: x, b: y }) if is_j(a) => (x, y),
            _ => return None,
        },
        _ => return None,
    };
    let leaf = |e: &Expr| match e.node() {
        ExprNode::Var(v) => v.name() != j,
        ExprNode::Imm(_) => true,
        _ => false,
    };
    (leaf(x) && leaf(y)).then_some((x, y))
}

/// The key of a product base `x * y` among the bases (which are otherwise names: the
/// parentheses keep the two apart).
fn product_key(x: &Expr, y: &Expr) -> String {
    format!("({x})*({y})")
}

/// The base of `index` if it is `b + j` or `j + b` (`j` the loop's counter, `b` another
/// name).
fn split<'a>(index: &'a Expr, j: &str) -> Option<&'a str> {
    let ExprNode::Binary { op: BinOp::Add, a, b } = index.node() else { return None };
    let name = |e: &'a Expr| match e.node() {
        ExprNode::Var(v) => Some(v.name()),
        _ => None,
    };
    match (name(a), name(b)) {
        (Some(x), Some(y)) if y == j && x != j => Some(x),
        (Some(x), Some(y)) if x == j && y != j => Some(y),
        _ => None,
    }
}

/// The blocked accesses of a loop: buffer, base, store.
type Plan = Vec<(Var, String, bool)>;
/// `let`s of `b + j` in a body: name, base.
type Aliases = Vec<(String, String)>;
/// Product bases: key, the expression computing it before the loop.
type Products = Vec<(String, Expr)>;
/// Buffers loaded at exactly the counter, each once.
type Bcasts = Vec<Var>;

impl Scan {
    /// Notes a product base's expression (once per key).
    fn product(&mut self, key: &str, prod: Option<Expr>) {
        if let Some(p) = prod.filter(|_| !self.products.iter().any(|x| x.0 == key)) {
            self.products.push((key.to_string(), p));
        }
    }
}

/// What planning found in a body.
#[derive(Default)]
struct Scan {
    /// Blocked accesses: buffer, base, store.
    access: Vec<(Var, String, bool)>,
    /// Loads that are not blocked, or divisions that may fault.
    other: bool,
    /// Loads at exactly the counter (`gamma[j]`) of 32-bit buffers, each buffer once.
    bcast: Vec<Var>,
    /// A blocked load in a statement after a store.
    load_after_store: bool,
    stored: bool,
    /// The counter read elsewhere than in a blocked access's index.
    counter: bool,
    /// The body's `let`s of `b + j`: name, base.
    aliases: Vec<(String, String)>,
    /// One of those read elsewhere than as a blocked index.
    escapes: bool,
    /// Names the body binds.
    bound: Vec<String>,
    /// Every name the body binds, known before the scan (no product's factor is one).
    names: Vec<String>,
    /// The product bases (`mad(x, y, j)`): key, the expression of `x * y`.
    products: Vec<(String, Expr)>,
    nodes: usize,
    ok: bool,
}

/// The types of the `let`s and `var`s a blocked body may bind or assign: 32-bit lanes, and
/// 64-bit ones (`wide64.rs`: row sums in `u64` or `f64` of 32-bit data).
fn body_type(t: Type) -> bool {
    super::lane_type(t) || super::wide64::is_64(t)
}

impl V {
    /// True if an access of type `ty` to `buf` is of a 32-bit lane type, or for a load
    /// (not `store`) a 64-bit one, in a global buffer parameter.
    fn blockable_buf(&self, buf: &Var, ty: Type, store: bool) -> bool {
        let elem = match buf.ty() {
            Type::Ptr(AddrSpace::Global, e) => Type::Scalar(e),
            _ => return false,
        };
        (super::lane_type(elem) || (!store && super::wide64::is_64(elem)))
            && buf.ty().elem().map(Type::Scalar) == Some(ty)
            && self.buf(buf).is_some()
            && self.private(buf).is_none()
    }

    /// The base of an access at `index` that can be blocked in the loop over `j`: a
    /// lane-varying, immutable `let` in a register or slot bound outside the loop, or a
    /// lane-varying product `x * y` of `mad(x, y, j)` whose factors are constants, parameters or
    /// immutable names bound outside the loop (none of `bound`, the body's names); with a
    /// product, the expression that computes it before the loop.
    fn blockable_base(
        &self,
        index: &Expr,
        j: &str,
        aliases: &[(String, String)],
        bound: &[String],
    ) -> Option<(String, Option<Expr>)> {
        if !matches!(index.ty(), Type::Scalar(Scalar::I32 | Scalar::U32)) {
            return None;
        }
        if let Some((x, y)) = mad_parts(index, j) {
            let fixed = |e: &Expr| match e.node() {
                ExprNode::Var(v) => {
                    !bound.iter().any(|b| b == v.name())
                        && match self.find(v.name()) {
                            Some(b) => b.decl.is_none(),
                            None => self.param(v).is_some(),
                        }
                }
                _ => true,
            };
            let prod = Expr::binary(BinOp::Mul, x.clone(), y.clone());
            // (Lane-varying, as a `let` base must be: a row all lanes share, such as
            // `a[row * n + k]` with `row` a `global_id(1)`, is one broadcast load.)
            let varies = self.kind(&prod) == Kind::Div;
            return (varies && fixed(x) && fixed(y)).then(|| (product_key(x, y), Some(prod)));
        }
        let b = base_of(index, j, aliases)?;
        if b.starts_with('(') {
            // (A `let` of a product base: its expression was recorded with the `let`.)
            return Some((b, None));
        }
        let bound = self.find(&b)?;
        let ok = bound.kind == Kind::Div
            && bound.decl.is_none()
            && matches!(bound.loc, Loc::Reg(_) | Loc::Slot(_));
        ok.then_some((b, None))
    }

    fn scan_expr(&self, e: &Expr, j: &str, s: &mut Scan) {
        s.nodes += 1;
        match e.node() {
            ExprNode::Load { buf, index }
                if matches!(index.node(), ExprNode::Var(v) if v.name() == j)
                    && self.blockable_buf(buf, e.ty(), true) =>
            {
                // (The same element for every lane: checked once per loop, then a
                // broadcast per copy, `blockio.rs`; not a read of the counter.)
                if !s.bcast.iter().any(|b| b.name() == buf.name()) {
                    s.bcast.push(buf.clone());
                }
            }
            ExprNode::Load { buf, index } => {
                match self.blockable_base(index, j, &s.aliases, &s.names) {
                    Some((b, prod)) if self.blockable_buf(buf, e.ty(), false) => {
                        if s.stored {
                            s.load_after_store = true;
                        }
                        s.product(&b, prod);
                        s.access.push((buf.clone(), b, false));
                    }
                    _ => {
                        s.other = true;
                        self.scan_expr(index, j, s);
                    }
                }
            }
            ExprNode::Binary { op: BinOp::Div | BinOp::Rem, a, b }
                if a.ty() != Type::F32 && !super::scalar::safe_divisor_expr(b) =>
            {
                s.other = true;
                self.scan_expr(a, j, s);
                self.scan_expr(b, j, s);
            }
            ExprNode::Var(v) if v.name() == j => s.counter = true,
            ExprNode::Var(v) if s.aliases.iter().any(|a| a.0 == v.name()) => s.escapes = true,
            _ => {
                for x in super::uniform::operands(e) {
                    self.scan_expr(x, j, s);
                }
            }
        }
    }

    /// The blocked accesses of a `for` over `var` with step `step` and body `body`, if the
    /// loop can run blocked (see the module docs); `None` leaves it to the ordinary loop.
    /// With them, the body's `let`s of `b + j`, whether one of those is read elsewhere than
    /// as a blocked index, and whether the copies read the counter.
    pub(super) fn block_plan(
        &self,
        var: &Var,
        step: &Expr,
        body: &[Stmt],
    ) -> Option<(Plan, Aliases, Products, Bcasts, bool, bool)> {
        let one = matches!(step.node(), ExprNode::Imm(Imm::Int(_, 1)));
        if !one || self.mask.is_some() || self.regions.is_some() || self.blocking.is_some() {
            return None;
        }
        let j = var.name();
        let names = body
            .iter()
            .filter_map(|st| match st.node() {
                StmtNode::Let { var, .. } => Some(var.name().to_string()),
                _ => None,
            })
            .collect();
        let mut s = Scan { ok: true, names, ..Scan::default() };
        for st in body {
            match st.node() {
                StmtNode::Let { var: v, value } => {
                    s.ok &= v.name() != j && body_type(v.ty());
                    match self.blockable_base(value, j, &[], &s.names) {
                        // (Not a read of the counter unless the name is read elsewhere.)
                        Some((b, prod)) => {
                            s.product(&b, prod);
                            s.aliases.push((v.name().to_string(), b));
                        }
                        None => self.scan_expr(value, j, &mut s),
                    }
                    s.bound.push(v.name().to_string());
                }
                StmtNode::Assign { var: v, value } => {
                    s.ok &= body_type(v.ty());
                    self.scan_expr(value, j, &mut s);
                }
                StmtNode::Store { buf, index, value } => {
                    self.scan_expr(value, j, &mut s);
                    match self.blockable_base(index, j, &s.aliases, &s.names) {
                        Some((b, prod)) if self.blockable_buf(buf, value.ty(), true) => {
                            s.product(&b, prod);
                            s.access.push((buf.clone(), b, true));
                        }
                        _ => s.ok = false,
                    }
                    s.stored = true;
                }
                _ => s.ok = false,
            }
        }
        // (A base the accesses use must not be bound again in the body, nor a name of
        // one of its `let`s of `b + j`.)
        let once = |n: &String| s.bound.iter().filter(|b| *b == n).count() == 1;
        let rebound = s.access.iter().any(|a| s.bound.contains(&a.1))
            || s.aliases.iter().any(|a| !once(&a.0));
        if !s.ok || rebound || s.access.is_empty() || s.nodes > MAX_NODES {
            return None;
        }
        if s.stored {
            let one_base = s.access.iter().all(|a| a.1 == s.access[0].1);
            // (A broadcast buffer that the body stores into would read stores of other
            // lanes: the ordinary loop.)
            let stored_bcast =
                s.bcast.iter().any(|b| s.access.iter().any(|a| a.2 && a.0.name() == b.name()));
            if s.other || s.load_after_store || !one_base || stored_bcast {
                return None;
            }
        }
        let mut distinct: Vec<(Var, String, bool)> = Vec::new();
        for a in s.access {
            if !distinct.iter().any(|d| d.0.name() == a.0.name() && d.1 == a.1 && d.2 == a.2) {
                distinct.push(a);
            }
        }
        // (`let`s of `b + j` computed in the copies read the counter.)
        let counter = s.counter || (s.escapes && !s.aliases.is_empty());
        (distinct.len() <= MAX_BLOCKS)
            .then_some((distinct, s.aliases, s.products, s.bcast, s.escapes, counter))
    }

    /// True if `var`'s `let` is one the current copy skips: a `let` of `b + j` read only as
    /// a blocked index.
    pub(super) fn skipped_let(&self, var: &Var) -> bool {
        self.blocking
            .as_ref()
            .is_some_and(|b| b.skip_aliases && b.aliases.iter().any(|a| a.0 == var.name()))
    }

    /// The frame operand holding the current copy's value of a blocked load of `buf` at
    /// `index` (32-bit elements), if the loop being generated blocks it.
    pub(super) fn blocked_load(&self, buf: &Var, index: &Expr) -> Option<AsmMemoryOperand> {
        self.blocked_slot(buf, index, false).map(|off| ymmword_ptr(r15 + off))
    }

    /// The frame offset of the current copy's slot of a blocked access of 32-bit elements.
    pub(super) fn blocked_slot(&self, buf: &Var, index: &Expr, store: bool) -> Option<i32> {
        self.blocked_at(buf, index, store, false)
    }

    /// The frame offset of the current copy's two vectors (lanes 0-3, then 4-7) of a
    /// blocked load of 64-bit elements.
    pub(super) fn blocked_load64(&self, buf: &Var, index: &Expr) -> Option<i32> {
        self.blocked_at(buf, index, false, true)
    }

    fn blocked_at(&self, buf: &Var, index: &Expr, store: bool, wide: bool) -> Option<i32> {
        let bk = self.blocking.as_ref()?;
        let b = base_of(index, &bk.counter, &bk.aliases)?;
        bk.blocks
            .iter()
            .find(|x| x.buf == buf.name() && x.base == b && x.store == store && x.wide == wide)
            .map(|x| x.off + if wide { 64 } else { 32 } * bk.k)
    }

    /// For a batch-uniform `for` (counter `var`, 64-bit counter and end at frame offsets
    /// `cnt` and `end`, `signed` its type): the blocked loop, if the body qualifies; it
    /// leaves to `ordinary` (the ordinary loop's top, which re-reads the counter) when
    /// fewer than eight iterations remain or a check fails, for good, and when the
    /// back-edge budget would run out within a chunk, until it is refilled: the returned
    /// chunk label and flag slot are for [`V::blocked_resume`] at the ordinary loop's top.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn blocked_for(
        &mut self,
        var: &Var,
        step: &Expr,
        body: &[Stmt],
        cnt: i32,
        end: i32,
        signed: bool,
        ordinary: CodeLabel,
    ) -> R<Option<(CodeLabel, i32)>> {
        let Some((plan, aliases, products, bcast, escapes, uses_counter)) =
            self.block_plan(var, step, body)
        else {
            return Ok(None);
        };
        // Nonzero while the ordinary loop may hand back to the chunks.
        let flag = self.slot();
        self.a.mov(qword_ptr(r15 + flag), 0)?;
        // The bases' lanes, one slot each (read per lane by scalar code).
        let mut bases: Vec<(String, i32, i32)> = Vec::new();
        let mut blocks = Vec::new();
        for (buf, base, store) in &plan {
            let table = self.buf_of(buf, Type::Scalar(buf.ty().elem().expect("a buffer")))?;
            // (`b + j`: the base has the counter's type.)
            if !bases.iter().any(|b| &b.0 == base) {
                let (slot, pf) = (self.slot(), self.slot());
                bases.push((base.clone(), slot, pf));
            }
            let pf = bases.iter().find(|b| &b.0 == base).expect("base slot").2;
            let wide = super::wide64::is_64(Type::Scalar(buf.ty().elem().expect("a buffer")));
            let off = self.next;
            self.next += if wide { 512 } else { 256 };
            blocks.push(Block {
                buf: buf.name().to_string(),
                table,
                base: base.clone(),
                store: *store,
                wide,
                off,
                pf,
                prefetch: false,
            });
        }
        let on = self.row_prefetch(body, &blocks);
        for (bk, on) in blocks.iter_mut().zip(on) {
            bk.prefetch = on;
        }
        let mut bcasts = Vec::new();
        for buf in &bcast {
            let table = self.buf_of(buf, Type::Scalar(buf.ty().elem().expect("a buffer")))?;
            bcasts.push((buf.name().to_string(), table));
        }
        // Entry: a nonempty loop, every lane alive, every row in bounds.
        self.a.mov(rax, qword_ptr(r15 + cnt))?;
        self.a.cmp(rax, qword_ptr(r15 + end))?;
        if signed {
            self.a.jge(ordinary)?;
        } else {
            self.a.jae(ordinary)?;
        }
        if self.may_fault {
            self.a.vmovups(ymm0, ymmword_ptr(r15 + self.alive))?;
            self.a.vmovmskps(eax, ymm0)?;
            self.a.cmp(eax, 0xff)?;
            self.a.jne(ordinary)?;
        }
        for (name, slot, pf) in &bases {
            if let Some(p) = products.iter().find(|p| &p.0 == name) {
                // A product base: `x * y`, wrapping as `mad`'s product does.
                self.expr_top(&p.1, 0)?;
                self.a.vmovups(ymmword_ptr(r15 + *slot), ymm0)?;
            } else {
                match self.find(name).map(|b| b.loc) {
                    Some(Loc::Reg(r)) => self.a.vmovups(ymmword_ptr(r15 + *slot), YMM[r])?,
                    Some(Loc::Slot(o)) => {
                        self.a.vmovups(ymm0, ymmword_ptr(r15 + o))?;
                        self.a.vmovups(ymmword_ptr(r15 + *slot), ymm0)?;
                    }
                    _ => return super::no("internal: a blocked base is not in lanes"),
                }
            }
            // (Only prefetches read the span.)
            if blocks.iter().any(|b| b.prefetch && &b.base == name) {
                self.row_span(*slot, *pf, signed)?;
            }
        }
        // Loads at exactly the counter: every iteration's element in bounds (the counter
        // is at least 0 and its end at most the length).
        for (_, table) in &bcasts {
            if signed {
                self.a.cmp(qword_ptr(r15 + cnt), 0)?;
                self.a.jl(ordinary)?;
            }
            self.a.mov(rax, qword_ptr(r15 + end))?;
            self.a.cmp(rax, qword_ptr(r14 + (*table as i32 * 16 + 8)))?;
            self.a.jg(ordinary)?;
        }
        let mut checked: Vec<(u32, i32)> = Vec::new();
        for bk in &blocks {
            let slot = bases.iter().find(|b| b.0 == bk.base).expect("base slot").1;
            if checked.contains(&(bk.table, slot)) {
                continue;
            }
            checked.push((bk.table, slot));
            let len = qword_ptr(r14 + (bk.table as i32 * 16 + 8));
            for l in 0..8 {
                self.base_lane(slot, l, signed)?;
                if signed {
                    // The first index, b + lo, must not be negative.
                    self.a.mov(rax, qword_ptr(r15 + cnt))?;
                    self.a.add(rax, r10)?;
                    self.a.js(ordinary)?;
                }
                // The last one, b + hi - 1, below the length: b + hi <= len.
                self.a.add(r10, qword_ptr(r15 + end))?;
                self.a.cmp(r10, len)?;
                self.a.jg(ordinary)?;
                // And b + hi within the index type, so that no b + j wraps where the
                // interpreter's 32-bit sum would (buffers of 2^31 elements or more).
                self.a.mov(rax, if signed { 1i64 << 31 } else { 1i64 << 32 })?;
                self.a.cmp(r10, rax)?;
                self.a.jg(ordinary)?;
            }
        }
        // Rows of different lanes apart where the body stores (lane `l + 1`'s row starts
        // at or after the end of lane `l`'s): a chunk that stored into a row another lane
        // also reads or writes would order those accesses otherwise than the interpreter's
        // work-items (and than the ordinary loop), even in a racy kernel.
        if let Some(slot) = bases.first().map(|b| b.1).filter(|_| plan.iter().any(|p| p.2)) {
            self.a.mov(r11, qword_ptr(r15 + end))?;
            self.a.sub(r11, qword_ptr(r15 + cnt))?;
            for l in 0..7 {
                self.base_lane(slot, l, signed)?;
                self.a.lea(rax, qword_ptr(r10 + r11))?;
                self.base_lane(slot, l + 1, signed)?;
                self.a.cmp(r10, rax)?;
                self.a.jl(ordinary)?;
            }
        }
        // A stored buffer and another accessed one are the same table, the same memory
        // (two arguments of one buffer) or apart: a window of a buffer that another
        // overlaps would show a store to a later iteration's load, or two stores to one
        // element in the chunk's order instead of the iterations'.
        for (i, st) in blocks.iter().enumerate().filter(|b| b.1.store) {
            let others = blocks
                .iter()
                .enumerate()
                .filter(|(o, b)| (!b.store || *o > i) && b.table != st.table);
            for (_, ld) in others {
                let scale = if ld.wide { 8 } else { 4 };
                self.tables_apart(st.table, ld.table, scale, true, ordinary)?;
            }
            // (Loads of every lane's element: even the same memory would read other
            // lanes' stores.)
            for (_, table) in &bcasts {
                self.tables_apart(st.table, *table, 4, false, ordinary)?;
            }
        }
        self.a.mov(qword_ptr(r15 + flag), 1)?;
        // Chunks of eight iterations while eight remain.
        let mut chunk = self.a.create_label();
        let mut eight = self.a.create_label();
        self.bind(&mut chunk)?;
        self.a.mov(rax, qword_ptr(r15 + cnt))?;
        self.a.add(rax, 8)?;
        self.a.cmp(rax, qword_ptr(r15 + end))?;
        if signed {
            self.a.jle(eight)?;
        } else {
            self.a.jbe(eight)?;
        }
        self.a.mov(qword_ptr(r15 + flag), 0)?;
        self.a.jmp(ordinary)?;
        self.bind(&mut eight)?;
        // The chunk's eight back-edges at once, where the budget outlasts them (else the
        // ordinary loop counts them one by one, reaching the limit helper exactly, and
        // hands back once it has refilled the budget).
        let budget = qword_ptr(r12 + rt::OFF_BUDGET);
        self.a.cmp(budget, 8)?;
        self.a.jbe(ordinary)?;
        self.a.sub(budget, 8)?;
        for bk in blocks.iter().filter(|b| !b.store) {
            let slot = bases.iter().find(|b| b.0 == bk.base).expect("base slot").1;
            self.block_in(bk, slot, cnt, signed)?;
        }
        let outer = self.blocking.take();
        for k in 0..8 {
            self.blocking = Some(Blocking {
                counter: var.name().to_string(),
                blocks: blocks.clone(),
                aliases: aliases.clone(),
                skip_aliases: !escapes,
                bcast: bcasts.clone(),
                cnt,
                stepped: uses_counter,
                k,
            });
            let name = var.name().to_string();
            let loc = Loc::Scalar(cnt);
            self.lets.push(super::Bound {
                dword: Some(cnt),
                ..super::Bound::new(name, loc, Kind::Uniform)
            });
            self.block(body)?;
            self.lets.pop();
            if uses_counter {
                self.a.inc(qword_ptr(r15 + cnt))?;
            }
        }
        if !uses_counter {
            self.a.add(qword_ptr(r15 + cnt), 8)?;
        }
        self.blocking = outer;
        for bk in blocks.iter().filter(|b| b.store) {
            let slot = bases.iter().find(|b| b.0 == bk.base).expect("base slot").1;
            self.block_out(bk, slot, cnt, signed)?;
        }
        self.a.jmp(chunk)?;
        Ok(Some((chunk, flag)))
    }

    /// At the top of the ordinary loop of a blocked one ([`V::blocked_for`]'s label and
    /// flag): back to the chunks once the budget outlasts a chunk again.
    pub(super) fn blocked_resume(&mut self, chunk: CodeLabel, flag: i32) -> R<()> {
        let mut on = self.a.create_label();
        self.a.cmp(qword_ptr(r15 + flag), 0)?;
        self.a.je(on)?;
        self.a.cmp(qword_ptr(r12 + rt::OFF_BUDGET), 8)?;
        self.a.ja(chunk)?;
        self.bind(&mut on)
    }
}
