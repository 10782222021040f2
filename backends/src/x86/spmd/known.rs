//! Group values known when the code is generated (region-loop code, `region.rs`).
//!
//! A group name given a value that is constant once the names it reads are replaced by
//! their known values (`var stride: u32 = 32`) is *known* from there until a statement
//! gives it a value that is not, or until control joins paths that may have changed it
//! (after an `if` around barriers, at the top of a loop that assigns it).
//!
//! A group `while` whose condition and every group statement of its body (all at the
//! body's own level: no nested control around barriers) evaluate to constants from the
//! known values is **unrolled**: its rounds are found by evaluating them, at most
//! [`MAX_ROUNDS`] of them, and each round's region statements and barriers are generated
//! with the group names replaced by their values in that round (`tile[lid + 16u32]`,
//! `if lid < 16u32`). That is the interpreter's schedule: group statements cannot fault
//! and have no effect but on group names (see `region.rs`), so running them when the code
//! is generated, with `kiln_ir::eval`'s operations (the interpreter's), gives every round
//! the values the loop would have computed; the names assigned in the loop get their
//! final values in the group frame after it, for code that reads them later. A region is
//! then a constant range of the group, decided when the code is generated: a region whose
//! range lies within the group's first batch runs under a constant lane mask
//! ([`V::const_lanes`]).
//!
//! (The interpreter matches barriers by statement, which is why `kiln_passes::unroll`
//! leaves loops with barriers alone; region code cannot diverge at a barrier at all, so
//! copies of one barrier are the same point for every work-item.)

use std::collections::{HashMap, HashSet};

use kiln_ir::{walk_mutate_expr, Builtin, Expr, ExprNode, Imm, Mutator, Stmt, StmtNode};
use kiln_passes::util::{fold_node, mutable_names};

use super::{R, V};
use crate::x86::gen::count_barriers;

/// Group loops with more rounds than this are not unrolled.
pub(super) const MAX_ROUNDS: usize = 32;
/// Nor those whose rounds would hold more statements than this in all.
const MAX_STATEMENTS: usize = 512;

/// Replaces known names by their values, and `local_size` by the group's size where the
/// kernel fixes it (`#reqd_work_group_size(L, 1, 1)`), and folds what becomes constant.
struct Subst<'a>(&'a HashMap<String, Imm>, Option<u64>);

impl Mutator for Subst<'_> {
    fn mutate_expr(&mut self, e: &Expr) -> Expr {
        match e.node() {
            ExprNode::Var(v) => {
                if let Some(&i) = self.0.get(v.name()) {
                    return Expr::imm(i);
                }
            }
            ExprNode::Builtin { kind: Builtin::LocalSize, dim } => {
                if let Some(l) = self.1 {
                    // (Fixed sizes are `[L, 1, 1]`, and L fits a u32.)
                    return Expr::u32(if *dim == 0 { l as u32 } else { 1 });
                }
            }
            _ => {}
        }
        let e2 = walk_mutate_expr(self, e);
        if e2.ptr_eq(e) {
            return e2;
        }
        match fold_node(&e2) {
            Some(imm) if e2.ty().scalar() == Some(imm.scalar()) => Expr::imm(imm),
            _ => e2,
        }
    }
}

/// `e`'s value given the known names `env`, if constant.
fn value(e: &Expr, env: &HashMap<String, Imm>, local: Option<u64>) -> Option<Imm> {
    let v = *Subst(env, local).mutate_expr(e).as_imm()?;
    (e.ty().scalar() == Some(v.scalar())).then_some(v)
}

impl V {
    /// The known group values (see the module docs).
    fn known(&mut self) -> &mut HashMap<String, Imm> {
        &mut self.regions.as_mut().expect("region mode").known
    }

    /// After a group `let`, `var` or assignment of `name` to `e`: known if constant.
    pub(super) fn learn(&mut self, name: &str, e: &Expr) {
        match value(e, &self.regions().known, self.regions().group_size) {
            Some(v) => self.known().insert(name.to_string(), v),
            None => self.known().remove(name),
        };
    }

    /// Before and after group control `s` that is not unrolled: what it assigns is unknown.
    pub(super) fn forget_assigned(&mut self, s: &Stmt) {
        for n in mutable_names(s) {
            self.known().remove(&n);
        }
    }

    /// Unrolls a group `while` if it qualifies (see the module docs); false if not (nothing
    /// generated).
    pub(super) fn unroll_group_while(&mut self, cond: &Expr, body: &[Stmt]) -> R<bool> {
        let group_value = |v: &V, s: &Stmt| match s.node() {
            StmtNode::Let { var, value } | StmtNode::Decl { var, init: value } => {
                v.regions().group.contains(var.name()).then(|| (var.clone(), value.clone(), true))
            }
            StmtNode::Assign { var, value } => {
                v.regions().group.contains(var.name()).then(|| (var.clone(), value.clone(), false))
            }
            _ => None,
        };
        let mut env = self.regions().known.clone();
        let local = self.regions().group_size;
        let mut rounds: Vec<Vec<Stmt>> = Vec::new();
        let mut declared = HashSet::new();
        let mut assigned = Vec::new();
        let mut size = 0;
        loop {
            match value(cond, &env, local) {
                Some(Imm::Bool(true)) => {}
                Some(Imm::Bool(false)) => break,
                _ => return Ok(false),
            }
            if rounds.len() == MAX_ROUNDS {
                return Ok(false);
            }
            let mut round = Vec::new();
            for s in body {
                if let Some((var, e, decl)) = group_value(self, s) {
                    let Some(v) = value(&e, &env, local) else { return Ok(false) };
                    env.insert(var.name().to_string(), v);
                    if decl {
                        declared.insert(var.name().to_string());
                    } else if !assigned.contains(&var) {
                        assigned.push(var);
                    }
                    continue;
                }
                let is_barrier = matches!(s.node(), StmtNode::Call { func, .. }
                    if matches!(func.kind(), kiln_ir::FuncKind::Barrier(_)));
                if count_barriers(s) > 0 && !is_barrier {
                    return Ok(false);
                }
                size += 1;
                round.push(Subst(&env, local).mutate_stmt(s));
            }
            rounds.push(round);
            if size > MAX_STATEMENTS {
                return Ok(false);
            }
        }
        // (As one list where a round's last region and the next one's first run as one:
        // `merge.rs`.)
        let flat = self.merged_rounds(&rounds);
        match &flat {
            Some(flat) => self.group_block(flat)?,
            None => {
                for round in &rounds {
                    self.group_block(round)?;
                }
            }
        }
        // The names the loop assigned (declared outside it) hold their last values.
        for var in assigned.iter().filter(|v| !declared.contains(v.name())) {
            let last = Stmt::assign(var, Expr::imm(env[var.name()]));
            self.stmt(&last)?;
        }
        for n in &declared {
            env.remove(n);
        }
        *self.known() = env;
        // (Proofs name accesses by the address of their index: the copies stay alive.)
        self.regions.as_mut().expect("region mode").keep.extend(rounds.into_iter().chain(flat));
        Ok(true)
    }

    /// The lanes of the group's first batch in the range `[lo, hi)` of `local_id(0)`, both
    /// known, as a mask of bits (lane k: bit k); `None` if a bound is not known.
    pub(super) fn const_lanes(&self, lo: Option<&(Expr, u64)>, hi: &(Expr, u64)) -> Option<u8> {
        let at = |b: &(Expr, u64)| match b.0.as_imm() {
            Some(Imm::Int(_, bits)) => Some((*bits as u32 as u64).saturating_add(b.1)),
            _ => None,
        };
        let lo = match lo {
            Some(b) => at(b)?,
            None => 0,
        };
        let hi = at(hi)?;
        Some((0..8u64).filter(|k| (lo..hi).contains(k)).fold(0, |m, k| m | 1 << k))
    }

    /// The body of a region's `if` run as the group's first batch alone, its condition
    /// true in exactly the lanes of `lanes` (every lane is alive at the batch's start): no
    /// lane, nothing; every lane, the body under no mask; else under that constant mask.
    pub(super) fn const_mask_block(&mut self, lanes: u8, then: &[Stmt]) -> R<()> {
        match lanes {
            0 => Ok(()),
            0xff => self.block(then),
            m => {
                // The mask's slot is filled once per call (a constant of the call, as the
                // broadcast constants are): a tree reduction's one-batch rounds set no mask.
                let t = self.const_slot((u64::from(m), super::CONST_LANES));
                let outer = self.mask.replace(t);
                let outer_lanes = self.const_mask.replace((t, m));
                self.dctl += 1;
                self.block(then)?;
                self.dctl -= 1;
                self.mask = outer;
                self.const_mask = outer_lanes;
                Ok(())
            }
        }
    }
}
