//! Runs a compiled [`Program`] over an nd-range: work-groups one after another, the
//! work-items of a group as resumable states that run in index order up to each barrier.

mod matrix;
mod warpgroup;

use std::time::Instant;

use smallvec::SmallVec;

use crate::expr::Imm;
use crate::kernel::Kernel;
use crate::types::Scalar;

use super::compile::{Code, Inst, Mem, MemInfo, Op, Program};
use super::{RunOptions, DEADLINE_CHECK_STEPS};
use crate::eval as ops;
use crate::launch::resolve::fmt3;
use crate::launch::LaunchError;
use crate::launch::{Buffer, Launch};

/// The most memory (local arrays, plus private arrays and variable slots of the work-items
/// of one group that are alive at once) a launch may need: 1 GiB.
pub(super) const MEMORY_LIMIT: u64 = 1 << 30;

/// Why a work-item stopped running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    Done,
    Barrier(u32),
    /// At an `mbar_wait` whose phase has not completed (the pc points at it again).
    Blocked,
}

/// One work-item's resumable state.
struct Item {
    pc: u32,
    slots: Vec<Imm>,
    /// Per for-loop: remaining iterations and the step's bits.
    loops: Vec<(u64, u64)>,
    privates: Vec<Buffer>,
    local_id: [u32; 3],
    global_id: [u32; 3],
    /// The linear local id.
    linear: u64,
    /// Fragment values, whole tiles row-major.
    frags: Vec<Vec<f32>>,
    copies: matrix::AsyncState,
    /// `wgmma`s this work-item has executed in the current work-group.
    wg_count: u32,
}

impl Item {
    fn new(prog: &Program) -> Item {
        Item {
            pc: 0,
            slots: vec![Imm::Bool(false); prog.n_slots as usize],
            loops: vec![(0, 0); prog.loop_vars.len()],
            privates: prog.privates.iter().map(|&(t, n)| Buffer::zeroed(t, n as usize)).collect(),
            local_id: [0; 3],
            global_id: [0; 3],
            linear: 0,
            frags: prog.frags.iter().map(|&n| vec![0.0; n as usize]).collect(),
            copies: matrix::AsyncState::default(),
            wg_count: 0,
        }
    }
}

struct Machine<'a> {
    kernel: &'a str,
    prog: &'a Program,
    launch: Launch,
    buffers: &'a mut [Buffer],
    locals: Vec<Buffer>,
    group_id: [u32; 3],
    steps_left: u64,
    max_steps: Option<u64>,
    /// Steps until the clock is next read (only counts down with a deadline).
    until_clock: u32,
    deadline: Option<(Instant, Instant)>,
    reverse: bool,
    /// Per sub-group of the current work-group: its cooperative matrix operations so far.
    coop_logs: Vec<matrix::CoopLog>,
    /// Per work-item of the current work-group: how many cooperative operations it ran.
    coop_counts: Vec<u32>,
    /// Per warpgroup of the current work-group: the factors of its `wgmma`s so far.
    wg_snaps: Vec<Vec<warpgroup::WgSnap>>,
}

/// Runs `prog` over the whole launch.
pub(super) fn execute(
    kernel: &Kernel,
    prog: &Program,
    launch: Launch,
    buffers: &mut [Buffer],
    options: &RunOptions,
) -> Result<(), LaunchError> {
    let max_steps = options.max_steps;
    let group_size: u64 = launch.local.iter().map(|&l| l as u64).product();
    // Without barriers each work-item runs to the end in one go: one state serves them all.
    let n_states = if prog.n_barriers == 0 && !prog.blocking { 1 } else { group_size };
    let bytes = |arrays: &[(Scalar, u32)]| -> u128 {
        arrays.iter().map(|&(t, n)| n as u128 * t.size_bytes() as u128).sum()
    };
    let slots = prog.n_slots as u128 + prog.loop_vars.len() as u128;
    let needed = bytes(&prog.locals) + n_states as u128 * (bytes(&prog.privates) + 16 * slots);
    if needed > MEMORY_LIMIT as u128 {
        return Err(LaunchError {
            kernel: kernel.name().to_string(),
            work_item: None,
            message: format!(
                "the arrays and work-item states of a work-group need {needed} bytes, more \
                 than the interpreter's limit of {MEMORY_LIMIT}"
            ),
        });
    }
    let mut m = Machine {
        kernel: kernel.name(),
        prog,
        launch,
        buffers,
        locals: prog.locals.iter().map(|&(t, n)| Buffer::zeroed(t, n as usize)).collect(),
        group_id: [0; 3],
        steps_left: max_steps.unwrap_or(u64::MAX),
        max_steps,
        until_clock: DEADLINE_CHECK_STEPS,
        deadline: options.deadline.map(|d| (Instant::now(), d)),
        reverse: options.reverse_order,
        coop_logs: Vec::new(),
        coop_counts: Vec::new(),
        wg_snaps: Vec::new(),
    };
    if prog.warpgroup {
        if !group_size.is_multiple_of(crate::warpgroup::WARPGROUP) {
            return Err(m.error(
                None,
                format!(
                    "warpgroup operations need work-groups of a multiple of {} work-items \
                     (whole warpgroups); this launch's work-groups have {group_size}",
                    crate::warpgroup::WARPGROUP
                ),
            ));
        }
        m.wg_snaps = (0..group_size / crate::warpgroup::WARPGROUP).map(|_| Vec::new()).collect();
    }
    if prog.n_coop > 0 {
        if !group_size.is_multiple_of(matrix::SUB_GROUP) {
            return Err(m.error(
                None,
                format!(
                    "matrix operations need work-groups of a multiple of {} work-items (whole                      sub-groups); this launch's work-groups have {group_size}",
                    matrix::SUB_GROUP
                ),
            ));
        }
        m.coop_logs = (0..group_size / matrix::SUB_GROUP).map(|_| Default::default()).collect();
        m.coop_counts = vec![0; group_size as usize];
    }
    let groups: [u32; 3] = std::array::from_fn(|d| launch.global[d] / launch.local[d]);
    let mut items: Vec<Item> = (0..n_states).map(|_| Item::new(prog)).collect();
    let [g0, g1, g2] = groups.map(|g| g as u64);
    for g in 0..g0 * g1 * g2 {
        let g = if m.reverse { g0 * g1 * g2 - 1 - g } else { g };
        m.group_id = [(g % g0) as u32, (g / g0 % g1) as u32, (g / (g0 * g1)) as u32];
        m.run_group(&mut items)?;
    }
    Ok(())
}

impl Machine<'_> {
    fn error(&self, item: Option<&Item>, message: String) -> LaunchError {
        LaunchError {
            kernel: self.kernel.to_string(),
            work_item: item.map(|i| i.global_id),
            message,
        }
    }

    fn start(&self, item: &mut Item, linear: u64) {
        let l = self.launch.local;
        let local_id = [
            (linear % l[0] as u64) as u32,
            (linear / l[0] as u64 % l[1] as u64) as u32,
            (linear / (l[0] as u64 * l[1] as u64)) as u32,
        ];
        item.pc = 0;
        item.linear = linear;
        item.copies.clear();
        item.wg_count = 0;
        item.local_id = local_id;
        item.global_id =
            std::array::from_fn(|d| self.launch.offset[d] + self.group_id[d] * l[d] + local_id[d]);
    }

    fn run_group(&mut self, items: &mut [Item]) -> Result<(), LaunchError> {
        self.run_group_items(items)?;
        if self.prog.n_coop > 0 {
            self.coop_finish().map_err(|e| self.error(None, e))?;
        }
        Ok(())
    }

    fn run_group_items(&mut self, items: &mut [Item]) -> Result<(), LaunchError> {
        for a in &mut self.locals {
            a.fill_zero();
        }
        for s in &mut self.wg_snaps {
            s.clear();
        }
        let group_size: u64 = self.launch.local.iter().map(|&l| l as u64).product();
        if self.prog.n_barriers == 0 && !self.prog.blocking {
            let item = &mut items[0];
            for linear in 0..group_size {
                let linear = if self.reverse { group_size - 1 - linear } else { linear };
                self.start(item, linear);
                self.run_item(item).map_err(|e| self.error(Some(item), e))?;
            }
            return Ok(());
        }
        for (linear, item) in items.iter_mut().enumerate() {
            self.start(item, linear as u64);
        }
        if self.reverse {
            items.reverse();
        }
        let result = self.rounds(items);
        if self.reverse {
            items.reverse();
        }
        result
    }

    /// Runs the work-items of a group, in the order of `items`, from barrier to barrier. A
    /// work-item blocked at an `mbar_wait` is resumed in the next pass; a pass in which no
    /// work-item moves while some are blocked is a deadlock.
    fn rounds(&mut self, items: &mut [Item]) -> Result<(), LaunchError> {
        let mut stops: Vec<Option<Stop>> = vec![None; items.len()];
        loop {
            let mut moved = false;
            let mut first: Option<(Stop, [u32; 3])> = None;
            for (item, stop) in items.iter_mut().zip(stops.iter_mut()) {
                if !matches!(stop, Some(Stop::Done | Stop::Barrier(_))) {
                    let (pc, steps) = (item.pc, self.steps_left);
                    let s = self.run_item(item).map_err(|e| self.error(Some(item), e))?;
                    moved |= s != Stop::Blocked || item.pc != pc || self.steps_left < steps;
                    *stop = Some(s);
                }
                // A blocked work-item may still go either way; the others must agree.
                let s = stop.unwrap_or(Stop::Done);
                if s == Stop::Blocked {
                    continue;
                }
                match first {
                    None => first = Some((s, item.global_id)),
                    Some((f, first_id)) if f != s => {
                        let what = |s: Stop| match s {
                            Stop::Done => "finished".to_string(),
                            Stop::Blocked => "waits at `mbar_wait`".to_string(),
                            Stop::Barrier(id) => format!(
                                "waits at barrier #{} (of {})",
                                id + 1,
                                self.prog.n_barriers
                            ),
                        };
                        let message = format!(
                            "barrier divergence in work-group {}: work-item {} {} while \
                             work-item {} {}",
                            fmt3(self.group_id),
                            fmt3(first_id),
                            what(f),
                            fmt3(item.global_id),
                            what(s)
                        );
                        return Err(self.error(Some(item), message));
                    }
                    Some(_) => {}
                }
            }
            if let Some(k) = stops.iter().position(|s| *s == Some(Stop::Blocked)) {
                if !moved {
                    let message = format!(
                        "deadlock in work-group {}: work-item {} waits at `mbar_wait` for a \
                         phase that no other work-item can complete (the others have \
                         finished, wait at a barrier or wait too)",
                        fmt3(self.group_id),
                        fmt3(items[k].global_id)
                    );
                    return Err(self.error(Some(&items[k]), message));
                }
                continue;
            }
            if matches!(first, None | Some((Stop::Done, _))) {
                return Ok(());
            }
            stops.fill(None);
        }
    }

    /// Runs `item` until it reaches a barrier (its pc then points past it) or finishes.
    fn run_item(&mut self, item: &mut Item) -> Result<Stop, String> {
        let prog = self.prog;
        while let Some(inst) = prog.insts.get(item.pc as usize) {
            item.pc += 1;
            if let Inst::Jump { target } = inst {
                // Jumps are control-flow glue, not statements: they do not count.
                item.pc = *target;
                continue;
            }
            if self.steps_left == 0 {
                return Err(format!(
                    "step limit exceeded: more than {} statements executed",
                    self.max_steps.unwrap_or(u64::MAX)
                ));
            }
            self.steps_left -= 1;
            if let Some((start, deadline)) = self.deadline {
                self.until_clock -= 1;
                if self.until_clock == 0 {
                    self.until_clock = DEADLINE_CHECK_STEPS;
                    let now = Instant::now();
                    if now >= deadline {
                        return Err(format!(
                            "time limit exceeded: still running at the deadline, {:.3}s after \
                             the launch started",
                            (now - start).as_secs_f64()
                        ));
                    }
                }
            }
            match inst {
                Inst::Set { slot, value } => {
                    item.slots[*slot as usize] = self.eval(*value, item)?;
                }
                Inst::SetVector { slot, lanes, value } => {
                    let v = self.eval_lanes(*value, item, *lanes)?;
                    let at = *slot as usize;
                    item.slots[at..at + v.len()].copy_from_slice(&v);
                }
                Inst::VecStore { mem, lanes, index, value } => {
                    let i = self.eval(*index, item)?;
                    let v = self.eval_lanes(*value, item, *lanes)?;
                    let info = &prog.mems[*mem as usize];
                    let (buf, base, len) = self.memory_mut(info, item);
                    let at = base + checked_vector(i, *lanes, len, "vector store", info)?;
                    if v[0].scalar() != buf.elem() {
                        return Err(format!(
                            "vector store of {} lanes into `{}`, whose elements are {}",
                            v[0].scalar(),
                            info.name,
                            buf.elem()
                        ));
                    }
                    for (k, x) in v.into_iter().enumerate() {
                        buf.write(at + k, x);
                    }
                }
                Inst::Store { mem, index, value } => {
                    let i = self.eval(*index, item)?;
                    let v = self.eval(*value, item)?;
                    let info = &prog.mems[*mem as usize];
                    let (buf, base, len) = self.memory_mut(info, item);
                    let at = base + checked_index(i, len, "store", info)?;
                    if v.scalar() != buf.elem() {
                        return Err(format!(
                            "store of a {} value into `{}`, whose elements are {}",
                            v.scalar(),
                            info.name,
                            buf.elem()
                        ));
                    }
                    buf.write(at, v);
                }
                Inst::ZeroPrivate { arr } => item.privates[*arr as usize].fill_zero(),
                Inst::Branch { cond, target } => match self.eval(*cond, item)? {
                    Imm::Bool(true) => {}
                    Imm::Bool(false) => item.pc = *target,
                    v => return Err(format!("condition of type {} is not a bool", v.scalar())),
                },
                Inst::Jump { target } => item.pc = *target,
                Inst::ForInit { var, lp, lo, hi, step, exit } => {
                    let name = &prog.loop_vars[*lp as usize];
                    let int = |v: Imm, what: &str| {
                        v.as_i128().ok_or_else(|| {
                            format!(
                                "for loop over `{name}`: {what} is a {}, not an integer",
                                v.scalar()
                            )
                        })
                    };
                    let lo_v = self.eval(*lo, item)?;
                    let l = int(lo_v, "the start")?;
                    let h = int(self.eval(*hi, item)?, "the end")?;
                    let s = int(self.eval(*step, item)?, "the step")?;
                    if s <= 0 {
                        return Err(format!("for loop over `{name}`: step {s} is not positive"));
                    }
                    let trips = if h > l { (h - l + s - 1) / s } else { 0 };
                    if trips == 0 {
                        item.pc = *exit;
                    } else {
                        item.slots[*var as usize] = lo_v;
                        item.loops[*lp as usize] = ((trips - 1) as u64, s as u64);
                    }
                }
                Inst::ForNext { var, lp, body } => {
                    let (left, step) = &mut item.loops[*lp as usize];
                    if *left > 0 {
                        *left -= 1;
                        let step = *step;
                        let counter = &mut item.slots[*var as usize];
                        if let Imm::Int(t, bits) = *counter {
                            // No wrap-around: the trip count keeps the counter below `hi`.
                            *counter =
                                Imm::Int(t, crate::expr::canonical_int(t, bits.wrapping_add(step)));
                        }
                        item.pc = *body;
                    }
                }
                Inst::Barrier { id } => return Ok(Stop::Barrier(*id)),
                Inst::FragCopy { dst, src } => {
                    if dst != src {
                        let v = item.frags[*src as usize].clone();
                        item.frags[*dst as usize] = v;
                    }
                }
                Inst::Coop { site, op } => self.coop(item, *site, op)?,
                Inst::CopyAsync { dst, di, src, si, n } => {
                    self.copy_async(item, (*dst, *di, *src, *si, *n))?
                }
                Inst::AsyncCommit => self.async_commit(item),
                Inst::AsyncWait { n } => self.async_wait(item, *n),
                Inst::FragElem { frag, index, slot } => self.frag_elem(item, *frag, *index, *slot),
                Inst::Tma(t) => self.tma(item, t)?,
                Inst::Mbar { op, mem, index, value } => {
                    if let warpgroup::Waited::Blocked =
                        self.mbar(item, *op, *mem, *index, *value)?
                    {
                        // Not a step: the wait runs again when the work-item resumes.
                        item.pc -= 1;
                        self.steps_left += 1;
                        return Ok(Stop::Blocked);
                    }
                }
                Inst::Atomic { op, mem, index, cmp, value, result } => {
                    let i = self.eval(*index, item)?;
                    let c = match cmp {
                        Some(c) => Some(self.eval(*c, item)?),
                        None => None,
                    };
                    let v = self.eval(*value, item)?;
                    let info = &prog.mems[*mem as usize];
                    let (buf, base, len) = self.memory_mut(info, item);
                    let at = base + checked_index(i, len, op.name(), info)?;
                    let old = buf.read(at);
                    let new = ops::atomic(*op, old, c, v)?;
                    buf.write(at, new);
                    if let Some(r) = result {
                        item.slots[*r as usize] = old;
                    }
                }
            }
        }
        Ok(Stop::Done)
    }

    /// The memory `info` names, the element its index 0 is at and how many elements it has
    /// (a ranged buffer argument sees only its range).
    fn memory_mut<'m>(
        &'m mut self,
        info: &MemInfo,
        item: &'m mut Item,
    ) -> (&'m mut Buffer, usize, usize) {
        let buf = match info.mem {
            Mem::Buffer(b) => &mut self.buffers[b as usize],
            Mem::Local(a) => &mut self.locals[a as usize],
            Mem::Private(a) => &mut item.privates[a as usize],
        };
        let (base, len) = info.window.unwrap_or((0, buf.len()));
        (buf, base, len)
    }

    /// As [`Self::memory_mut`], to read.
    fn memory<'m>(&'m self, info: &MemInfo, item: &'m Item) -> (&'m Buffer, usize, usize) {
        let buf = match info.mem {
            Mem::Buffer(b) => &self.buffers[b as usize],
            Mem::Local(a) => &self.locals[a as usize],
            Mem::Private(a) => &item.privates[a as usize],
        };
        let (base, len) = info.window.unwrap_or((0, buf.len()));
        (buf, base, len)
    }

    /// Evaluates postfix code of a scalar value.
    fn eval(&self, code: Code, item: &Item) -> Result<Imm, String> {
        Ok(self.eval_lanes(code, item, 1)?[0])
    }

    /// Evaluates postfix code of a value of `lanes` lanes (1 for a scalar).
    fn eval_lanes(
        &self,
        code: Code,
        item: &Item,
        lanes: u8,
    ) -> Result<SmallVec<[Imm; 16]>, String> {
        let mut stack: SmallVec<[Imm; 16]> = SmallVec::new();
        let underflow = || "ill-formed expression".to_string();
        for op in &self.prog.ops[code.start as usize..code.end as usize] {
            let v = match op {
                Op::Slot(s) => item.slots[*s as usize],
                Op::Const(c) => *c,
                Op::LocalId(d) => Imm::Int(Scalar::U32, item.local_id[*d as usize] as u64),
                Op::GlobalId(d) => Imm::Int(Scalar::U32, item.global_id[*d as usize] as u64),
                Op::GroupId(d) => Imm::Int(Scalar::U32, self.group_id[*d as usize] as u64),
                Op::Unary(u) => ops::unary(*u, stack.pop().ok_or_else(underflow)?)?,
                Op::Binary(b) => {
                    let y = stack.pop().ok_or_else(underflow)?;
                    let x = stack.pop().ok_or_else(underflow)?;
                    ops::binary(*b, x, y)?
                }
                Op::DivRem(b, e) => {
                    let y = stack.pop().ok_or_else(underflow)?;
                    let x = stack.pop().ok_or_else(underflow)?;
                    if matches!(y, Imm::Int(_, 0)) && matches!(x, Imm::Int(..)) {
                        return Err(format!(
                            "integer {} by zero in {}",
                            ops::op_word(*b),
                            self.prog.exprs[*e as usize].fault_site()
                        ));
                    }
                    ops::binary(*b, x, y)?
                }
                Op::Select => {
                    let b = stack.pop().ok_or_else(underflow)?;
                    let a = stack.pop().ok_or_else(underflow)?;
                    match stack.pop().ok_or_else(underflow)? {
                        Imm::Bool(c) => {
                            if c {
                                a
                            } else {
                                b
                            }
                        }
                        c => {
                            return Err(format!(
                                "select condition of type {} is not a bool",
                                c.scalar()
                            ))
                        }
                    }
                }
                Op::Cast(to) => ops::cast(*to, stack.pop().ok_or_else(underflow)?),
                Op::Load(m) => {
                    let i = stack.pop().ok_or_else(underflow)?;
                    let info = &self.prog.mems[*m as usize];
                    let (buf, base, len) = self.memory(info, item);
                    buf.read(base + checked_index(i, len, "load", info)?)
                }
                Op::Intrinsic(f, n) => {
                    let n = *n as usize;
                    if stack.len() < n {
                        return Err(underflow());
                    }
                    let at = stack.len() - n;
                    let v = ops::intrinsic(*f, &stack[at..])?;
                    stack.truncate(at);
                    v
                }
                _ => {
                    self.vector_op(op, &mut stack, item)?;
                    continue;
                }
            };
            stack.push(v);
        }
        if stack.len() != lanes as usize {
            return Err(underflow());
        }
        Ok(stack)
    }

    /// Runs one vector operation on the stack (see [`Op`]: a vector is one entry per lane).
    fn vector_op(
        &self,
        op: &Op,
        stack: &mut SmallVec<[Imm; 16]>,
        item: &Item,
    ) -> Result<(), String> {
        let underflow = || "ill-formed expression".to_string();
        let take =
            |stack: &mut SmallVec<[Imm; 16]>, n: usize| -> Result<SmallVec<[Imm; 8]>, String> {
                if stack.len() < n {
                    return Err(underflow());
                }
                let at = stack.len() - n;
                let v = stack[at..].iter().copied().collect();
                stack.truncate(at);
                Ok(v)
            };
        match *op {
            Op::VUnary(u, n) => {
                for x in take(stack, n as usize)? {
                    stack.push(ops::unary(u, x)?);
                }
            }
            Op::VBinary(b, n) | Op::VDivRem(b, _, n) => {
                let y = take(stack, n as usize)?;
                let x = take(stack, n as usize)?;
                for (x, y) in x.into_iter().zip(y) {
                    if let Op::VDivRem(_, e, _) = *op {
                        if matches!(y, Imm::Int(_, 0)) && matches!(x, Imm::Int(..)) {
                            return Err(format!(
                                "integer {} by zero in {}",
                                ops::op_word(b),
                                self.prog.exprs[e as usize].fault_site()
                            ));
                        }
                    }
                    stack.push(ops::binary(b, x, y)?);
                }
            }
            Op::VSelect(n) => {
                let b = take(stack, n as usize)?;
                let a = take(stack, n as usize)?;
                match stack.pop().ok_or_else(underflow)? {
                    Imm::Bool(c) => stack.extend(if c { a } else { b }),
                    c => {
                        return Err(format!(
                            "select condition of type {} is not a bool",
                            c.scalar()
                        ))
                    }
                }
            }
            Op::VSelectMask(n) => {
                let b = take(stack, n as usize)?;
                let a = take(stack, n as usize)?;
                let m = take(stack, n as usize)?;
                for ((c, x), y) in m.into_iter().zip(a).zip(b) {
                    match c {
                        Imm::Bool(c) => stack.push(if c { x } else { y }),
                        c => {
                            return Err(format!(
                                "select mask lane of type {} is not a bool",
                                c.scalar()
                            ))
                        }
                    }
                }
            }
            Op::VCast(to, n) => {
                for x in take(stack, n as usize)? {
                    stack.push(ops::cast(to, x));
                }
            }
            Op::VIntrinsic(f, arity, n) => {
                let mut args: SmallVec<[SmallVec<[Imm; 8]>; 3]> = SmallVec::new();
                for _ in 0..arity {
                    args.push(take(stack, n as usize)?);
                }
                args.reverse();
                for k in 0..n as usize {
                    let lane: SmallVec<[Imm; 3]> = args.iter().map(|a| a[k]).collect();
                    stack.push(ops::intrinsic(f, &lane)?);
                }
            }
            Op::VecLoad(m, n) => {
                let i = stack.pop().ok_or_else(underflow)?;
                let info = &self.prog.mems[m as usize];
                let (buf, base, len) = self.memory(info, item);
                let at = base + checked_vector(i, n, len, "vector load", info)?;
                for k in 0..n as usize {
                    stack.push(buf.read(at + k));
                }
            }
            Op::Extract(lane, n) => {
                let v = take(stack, n as usize)?;
                stack.push(v[lane as usize]);
            }
            Op::Insert(lane, n) => {
                let x = stack.pop().ok_or_else(underflow)?;
                let mut v = take(stack, n as usize)?;
                v[lane as usize] = x;
                stack.extend(v);
            }
            Op::Broadcast(n) => {
                let x = stack.pop().ok_or_else(underflow)?;
                for _ in 0..n {
                    stack.push(x);
                }
            }
            _ => return Err(underflow()),
        }
        Ok(())
    }
}

/// The first element index of a vector access of `lanes` lanes at `i`: in bounds with all its
/// lanes, and aligned (a multiple of `lanes`), or an error naming the access.
fn checked_vector(
    i: Imm,
    lanes: u8,
    len: usize,
    what: &str,
    info: &MemInfo,
) -> Result<usize, String> {
    let at = checked_index(i, len, what, info)?;
    if at % lanes as usize != 0 {
        return Err(format!(
            "misaligned {what} `{}[{at}]` of {lanes} lanes: the index must be a multiple of {lanes}",
            info.name
        ));
    }
    if at + lanes as usize > len {
        let last = at + lanes as usize - 1;
        checked_index(Imm::Int(Scalar::U64, last as u64), len, what, info)?;
    }
    Ok(at)
}

/// The element index `i` of an access, or an error naming the access.
fn checked_index(i: Imm, len: usize, what: &str, info: &MemInfo) -> Result<usize, String> {
    let Some(v) = i.as_i128() else {
        return Err(format!(
            "{what} `{}[..]`: the index is a {}, not an integer",
            info.name,
            i.scalar()
        ));
    };
    if v >= 0 && v < len as i128 {
        return Ok(v as usize);
    }
    let kind = match info.mem {
        Mem::Buffer(_) => "buffer",
        Mem::Local(_) => "local array",
        Mem::Private(_) => "private array",
    };
    let note = crate::launch::bounds_note(kind, len as u64, info.window.map(|w| w.0));
    Err(format!("{what} `{}[{v}]` out of bounds ({note})", info.name))
}
