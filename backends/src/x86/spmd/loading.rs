//! Groups of interleaved stores whose values load: `out[4 * i + c] = f(src[4 * i + c],
//! dst[4 * i + c])` for c = 0, 1, 2 (a short loop's copies, `short.rs`) and then
//! `out[4 * i + 3] = 255` (`blend`), the `s` stores of a group as `storegroup.rs` takes
//! them, but spread over a short loop's copies and the statements after it, their values
//! computed by `let`s in the copies and reading memory.
//!
//! The group writes the span after all its values are computed, where the statements
//! interleave loads and stores. The order cannot show where, checked per batch: the span is
//! in bounds (`storegroup.rs`'s test, which a fault before fails), every lane of the control
//! mask is active (the narrow stores need it; the others keep the same rule for
//! simplicity), and every buffer the values load from lies wholly apart from the stored
//! buffer in memory (pointer arguments may alias: the same buffer passed twice, or
//! overlapping views; a buffer that is the stored one by name gives no group), so no load
//! can read what a store of the group writes. A load may fault in the values' code: its
//! fault is recorded as usual and the span test, repeated before the stores, then fails,
//! so the statements run again as written (loads have no effects, the back-edge budget is
//! taken only after that test), and the interpreter's faults and order of effects result
//! for the lanes still alive. Otherwise, and wherever a check fails, the statements as
//! written. Values and `let`s may read only global buffers and must not divide integers
//! (no fault but a load's).

use std::rc::Rc;

use iced_x86::code_asm::*;
use kiln_ir::{BinOp, Expr, ExprNode, Stmt, StmtNode, Type};

use super::storegroup::names_in;
use super::{Kind, Loc, R, V};
use crate::x86::rt;

/// A part of the group: a short loop (its statement and its copies) or a store.
enum Item<'a> {
    Copies(&'a Stmt, Rc<Vec<Vec<Stmt>>>),
    Store(&'a Stmt),
}

/// What a group found by [`V::loading_group_of`] needs.
struct Plan<'a> {
    s: u32,
    buf: kiln_ir::Var,
    /// The base, and the lowest member offset.
    base: Expr,
    o: u32,
    items: Vec<Item<'a>>,
    /// The members in the order they run: their statements' addresses (a copy's store
    /// may be the same statement in every copy, as the counter's substitution leaves a
    /// statement without it as it was) and offsets from `o`.
    members: Vec<(usize, u32)>,
    /// The tables the values load from, with their elements' sizes in bytes.
    loaded: Vec<(u32, u32)>,
    /// The copies of all short loops.
    trips: i32,
}

/// What the group's first member fixes, and the members found.
struct Found {
    first: Option<(kiln_ir::Var, Expr, u32, Type)>,
    members: Vec<(u32, usize)>,
    loaded: Vec<(u32, u32)>,
}

impl V {
    /// True if `e` can fault only by a load of a global buffer (each table pushed to
    /// `loaded` with its elements' size): no integer division, no private array.
    fn quiet_loads(&self, e: &Expr, loaded: &mut Vec<(u32, u32)>) -> bool {
        match e.node() {
            ExprNode::Load { buf, index } => {
                let Some(t) = self.buf(buf).filter(|_| self.private(buf).is_none()) else {
                    return false;
                };
                let Some(elem) = buf.ty().elem() else { return false };
                if !loaded.iter().any(|l| l.0 == t) {
                    loaded.push((t, elem.size_bytes() as u32));
                }
                self.quiet_loads(index, loaded)
            }
            ExprNode::Binary { op: BinOp::Div | BinOp::Rem, a, .. } if !a.ty().is_float() => false,
            ExprNode::Var(_) | ExprNode::Imm(_) | ExprNode::Builtin { .. } => true,
            ExprNode::Unary { .. }
            | ExprNode::Binary { .. }
            | ExprNode::Select { .. }
            | ExprNode::Cast { .. }
            | ExprNode::Intrinsic { .. } => {
                e.children().into_iter().all(|c| self.quiet_loads(c, loaded))
            }
            _ => false,
        }
    }

    /// Adds the store `st` (after `scope` in its list) to the group's members, if it can
    /// be one.
    fn loading_member(&self, st: &Stmt, scope: &[Stmt], copy: bool, f: &mut Found) -> Option<()> {
        let StmtNode::Store { buf, index, value } = st.node() else { return None };
        if self.private(buf).is_some() || self.buf(buf).is_none() || self.kind(index) != Kind::Div {
            return None;
        }
        if !super::packed::pure(index) || !self.quiet_loads(value, &mut f.loaded) {
            return None;
        }
        // (In a copy, its `let p = base + 0u32` too, which `offset_form` leaves: the
        // counter's value is folded in, not always to a change. Nothing in the group
        // assigns, so the base computed before it has the value the `let` saw.)
        let in_scope = match index.node() {
            ExprNode::Var(x) if copy => scope.iter().rev().find_map(|c| match c.node() {
                StmtNode::Let { var, value } if var == x => Some(value),
                _ => None,
            }),
            _ => None,
        };
        let (b, o) = match in_scope {
            Some(value) if !super::packed::pure(value) => return None,
            Some(value) => super::storegroup::split_offset(value),
            None => self.offset_form(index, scope),
        };
        match &f.first {
            None => {
                let ty = buf.ty().elem().map(Type::Scalar)?;
                let s = self.any_stride(b)?;
                let fits = match super::narrow::narrow(ty) {
                    Some((8, _)) => s <= 4,
                    Some((16, _)) => s == 2,
                    Some(_) => false,
                    None => super::lane_type(ty),
                };
                if !fits || self.kind(b) != Kind::Div || value.ty() != ty {
                    return None;
                }
                f.first = Some((buf.clone(), b.clone(), s, ty));
            }
            Some((fb, fbase, _, ty)) if fb == buf && fbase == b && value.ty() == *ty => {}
            Some(_) => return None,
        }
        f.members.push((o, st.addr()));
        Some(())
    }

    /// The group the statements of `all` from `i` start with, if they do (see the module
    /// docs).
    fn loading_group_of<'a>(&self, all: &'a [Stmt], i: usize) -> Option<Plan<'a>> {
        if self.blocking.is_some() || !self.capture.is_empty() {
            return None;
        }
        let mut f = Found { first: None, members: Vec::new(), loaded: Vec::new() };
        let mut items = Vec::new();
        let mut trips = 0;
        let mut copy_lets: Vec<String> = Vec::new();
        for (j, st) in all.iter().enumerate().skip(i) {
            if f.first.as_ref().is_some_and(|x| f.members.len() >= x.2 as usize) {
                break;
            }
            match st.node() {
                StmtNode::Store { .. } => {
                    self.loading_member(st, &all[..j], false, &mut f)?;
                    items.push(Item::Store(st));
                }
                StmtNode::For { var, step, body, .. } => {
                    let copies = self.short_trip(st, var, step, body.stmts())?;
                    for copy in copies.iter() {
                        for (k, c) in copy.iter().enumerate() {
                            match c.node() {
                                StmtNode::Let { var, value } => {
                                    let hoisted = self.hoisted.iter().any(|h| h.0 == c.addr());
                                    if var.ty().is_vector()
                                        || hoisted
                                        || !self.quiet_loads(value, &mut f.loaded)
                                    {
                                        return None;
                                    }
                                    copy_lets.push(var.name().to_string());
                                }
                                StmtNode::Store { .. } => {
                                    self.loading_member(c, &copy[..k], true, &mut f)?
                                }
                                _ => return None,
                            }
                        }
                    }
                    trips += copies.len() as i32;
                    items.push(Item::Copies(st, copies));
                }
                _ => return None,
            }
        }
        let (buf, base, s, _) = f.first?;
        // Exactly `s` members at `o .. o + s`, each once; some value loads (else
        // `storegroup.rs`), none from the stored buffer; no copy binds a name of the base
        // (it is computed outside them).
        if f.members.len() != s as usize || f.loaded.is_empty() {
            return None;
        }
        let o = f.members.iter().map(|m| m.0).min()?;
        let mut members = Vec::with_capacity(s as usize);
        let mut seen = 0u32;
        for &(off, addr) in &f.members {
            let d = off.checked_sub(o)?;
            if d >= s || seen >> d & 1 != 0 {
                return None;
            }
            seen |= 1 << d;
            members.push((addr, d));
        }
        o.checked_add(s)?;
        let mut names = Vec::new();
        names_in(&base, &mut names);
        let t = self.buf(&buf)?;
        if names.iter().any(|n| copy_lets.iter().any(|c| c == n))
            || f.loaded.iter().any(|l| l.0 == t)
        {
            return None;
        }
        Some(Plan { s, buf, base, o, items, members, loaded: f.loaded, trips })
    }

    /// If `stmts` starts with a group of stores that load (see the module docs), its code
    /// and the number of statements it takes; `None` (no code) otherwise.
    pub(super) fn loading_group(&mut self, all: &[Stmt], i: usize) -> R<Option<usize>> {
        let Some(plan) = self.loading_group_of(all, i) else { return Ok(None) };
        let ty = plan.buf.ty().elem().map(Type::Scalar).expect("a buffer");
        let narrow = super::narrow::narrow(ty);
        let t = self.buf_of(&plan.buf, ty)?;
        let s = plan.s;
        self.batch_mark = None;
        self.fwd_clear();
        // Lane 0's index of the span's first element (the base is the copies' and the
        // statements' alike).
        let first = if plan.o == 0 {
            plan.base.clone()
        } else {
            let o = kiln_ir::Imm::int(plan.base.ty().scalar().expect("an index"), plan.o.into());
            Expr::binary(BinOp::Add, plan.base.clone(), Expr::imm(o))
        };
        let mut done = self.a.create_label();
        let mut slow = self.a.create_label();
        self.expr_top(&first, 1)?;
        self.span_test_to(t, 8 * s, 1, slow)?;
        if let Some(m) = self.mask {
            self.mask_to(m, 2)?;
            self.a.vmovmskps(r11d, ymm2)?;
            self.a.cmp(r11d, 0xff)?;
            self.a.jne(slow)?;
        }
        let bytes = narrow.map_or(4, |n| n.0 / 8);
        for &(u, size) in &plan.loaded {
            self.apart((t, bytes), (u, size), slow)?;
        }
        let budget = qword_ptr(r12 + rt::OFF_BUDGET);
        if plan.trips > 0 {
            self.a.cmp(budget, plan.trips)?;
            self.a.jbe(slow)?;
        }
        // The values, each into a slot of its own, the statements' `let`s as written.
        let slots: Vec<i32> = plan.members.iter().map(|_| self.slot()).collect();
        self.capture = plan.members.iter().map(|&(addr, d)| (addr, slots[d as usize])).collect();
        for item in &plan.items {
            match item {
                Item::Store(st) => self.stmt(st)?,
                Item::Copies(_, copies) => {
                    for copy in copies.iter() {
                        self.block(copy)?;
                    }
                }
            }
        }
        self.capture.clear();
        // (A fault in the values' loads fails the test: the statements then run again.)
        self.expr_top(&first, 1)?;
        self.span_test_to(t, 8 * s, 1, slow)?;
        let srcs: Vec<Loc> = slots.iter().map(|&off| Loc::Slot(off)).collect();
        match narrow {
            Some((bits, signed)) => self.narrow_group(t, s, bits, signed, &srcs, slow)?,
            None if s > 8 => self.dword_rows(t, s, &srcs, slow)?,
            None => self.dword_group(t, s, &srcs)?,
        }
        if plan.trips > 0 {
            self.a.sub(budget, plan.trips)?;
        }
        self.a.jmp(done)?;
        self.bind(&mut slow)?;
        for item in &plan.items {
            match item {
                Item::Store(st) | Item::Copies(st, _) => self.stmt(st)?,
            }
        }
        self.bind(&mut done)?;
        self.fwd_clear();
        Ok(Some(plan.items.len()))
    }

    /// The value of a captured store (`s`, see [`V::capture`]) into its slot.
    pub(super) fn capture_value(&mut self, s: usize, value: &Expr) -> R<()> {
        // (The first of the statement's places: they are taken in the order they run.)
        let at = self.capture.iter().position(|c| c.0 == s).expect("a captured store");
        let off = self.capture.remove(at).1;
        self.expr_top(value, 0)?;
        self.a.vmovups(ymmword_ptr(r15 + off), ymm0)?;
        Ok(())
    }

    /// A jump to `slow` unless tables `t` and `u` (with their elements' sizes in bytes) lie
    /// wholly apart in memory, each from its base to its base plus its length in bytes.
    /// (`rax`, `r10`, `r11` clobbered.)
    fn apart(&mut self, (t, st): (u32, u32), (u, su): (u32, u32), slow: CodeLabel) -> R<()> {
        let mut ok = self.a.create_label();
        let (bt, bu) = (t as i32 * 16, u as i32 * 16);
        // u's end at or below t's base: apart.
        self.a.mov(r10, qword_ptr(r14 + bu))?;
        self.a.mov(r11, qword_ptr(r14 + (bu + 8)))?;
        self.a.lea(r11, qword_ptr(r10 + r11 * su as i32))?;
        self.a.mov(rax, qword_ptr(r14 + bt))?;
        self.a.cmp(r11, rax)?;
        self.a.jbe(ok)?;
        // Else t's end must be at or below u's base.
        self.a.mov(r11, qword_ptr(r14 + (bt + 8)))?;
        self.a.lea(rax, qword_ptr(rax + r11 * st as i32))?;
        self.a.cmp(rax, r10)?;
        self.a.ja(slow)?;
        self.bind(&mut ok)
    }
}
