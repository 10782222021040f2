//! The vector function around a kernel's code: its prologue (registers, the span's end,
//! the broadcasts and buffer bases filled once per call, the top-level `let`s hoisted out
//! of the batch loop), the batch loop or the region code's group loop, and its epilogue
//! and fault exit.

use iced_x86::code_asm::*;
use iced_x86::IcedError;
use kiln_ir::{Kernel, StmtNode, Type};

use super::*;
use crate::x86::gen::MemInfo;
use crate::x86::rt;

/// The vector code for `k`, or why it has none; `param_slots` are the scalar frame's
/// parameter slots (the vector code reads scalar parameters from the scalar frame).
///
/// The function takes (ctx, scalar frame, vector frame), runs `ctx.span` work-items (a
/// multiple of 8) from `global_id(0)` = `ctx.global_id[0]`, of one row (of each row of the
/// group from the context's, with [`Spmd::rows`]), and returns 0, or [`rt::STOP_ERROR`]
/// with the error in the context (`global_id[0]` the faulting lane's, the other ids its
/// row's).
///
/// `known` lists buffer parameters (by position) with a length every launch of the code has
/// at least (the caller checks it before each launch): an index whose form bounds it below
/// that length needs no check, as in a local array.
pub(crate) fn generate(
    k: &Kernel,
    param_slots: &[Option<i32>],
    mems: &[MemInfo],
    known: &[(usize, u32)],
) -> Result<Result<Spmd, String>, IcedError> {
    generate_as(k, param_slots, mems, false, known)
}

/// The region-loop code of a kernel with barriers (`region.rs`), or why it has none: one
/// call runs a whole work-group of one row (`ctx.span` its size, `ctx.global_id` its first
/// work-item), with the group frame followed by one save frame per batch, the frames'
/// stride in bytes in the group frame's [`ROUND_SLOT`].
pub(crate) fn generate_regions(
    k: &Kernel,
    param_slots: &[Option<i32>],
    mems: &[MemInfo],
) -> Result<Result<Spmd, String>, IcedError> {
    generate_as(k, param_slots, mems, true, &[])
}

fn generate_as(
    k: &Kernel,
    param_slots: &[Option<i32>],
    mems: &[MemInfo],
    regions: bool,
    known: &[(usize, u32)],
) -> Result<Result<Spmd, String>, IcedError> {
    match generate_inner(k, param_slots, mems, regions, known) {
        Ok(s) => Ok(Ok(s)),
        Err(Fail::No(why)) => Ok(Err(why)),
        Err(Fail::Asm(e)) => Err(e),
    }
}

fn generate_inner(
    k: &Kernel,
    param_slots: &[Option<i32>],
    mems: &[MemInfo],
    regions: bool,
    known: &[(usize, u32)],
) -> R<Spmd> {
    let mut a = CodeAssembler::new(64)?;
    let ret = a.create_label();
    let fault_exit = a.create_label();
    let n_barriers = crate::x86::gen::count_barriers(k.body());
    if regions && n_barriers == 0 {
        return no("no barriers");
    }
    let resumes = (0..n_barriers).map(|_| a.create_label()).collect();
    // The code runs every row of its group itself where a row's set-up depends on the row.
    let rows = !regions && n_barriers == 0 && reads_row_ids(k);
    let next_batch = a.create_label();
    let mut v = V {
        a,
        lets: Vec::new(),
        next: END_SLOT + 32,
        next_reg: LET_REGS.start,
        params: Vec::new(),
        bufs: Vec::new(),
        mems: mems.to_vec(),
        based: Vec::new(),
        accessed: Vec::new(),
        consts: Vec::new(),
        hoisted: Vec::new(),
        row_lets: Vec::new(),
        memos: Default::default(),
        hoisted_conds: Vec::new(),
        magics: Vec::new(),
        shares: Default::default(),
        hoisted_ranges: Vec::new(),
        call_ranges: Vec::new(),
        mask: None,
        dctl: 0,
        div_vars: uniform::divergent_vars(k),
        may_fault: false,
        const_mask: None,
        alive: 0,
        fault_lane: 0,
        tmp_i: 0,
        tmp_v: 0,
        save: 0,
        sites: Vec::new(),
        stubs: Vec::new(),
        ret,
        fault_exit,
        per_group: false,
        resumes,
        next_batch,
        resume: 0,
        barriers: 0,
        atomic_problem: atomic::batch_order_problem(k),
        privs: Vec::new(),
        fma: false,
        scratch64: None,
        last_label_at: None,
        regions: regions.then(|| region::Regions::new(k)),
        proven: None,
        guarded: Vec::new(),
        batch_mark: None,
        known: known.to_vec(),
        blocking: None,
        byte_cache: None,
        row_reads: Default::default(),
        homes: Vec::new(),
        free_gprs: Vec::new(),
        gid0: expr::gid0_names(k.body().stmts()),
        vhomes: Vec::new(),
        fwd: Vec::new(),
        deep: false,
        spill_slots: Vec::new(),
        spill_used: 0,
        save_ptr: None,
        short: Default::default(),
        capture: Vec::new(),
        frame_names: false,
        gpr_loads: false,
        reg_end: GID,
    };
    if regions {
        v.per_group = true;
    }
    if n_barriers > 0 {
        // Values live across a barrier stay in the batch's vector frame: no let registers.
        v.next_reg = GID;
        v.frame_names = true;
    }
    let mut table = 0;
    for (p, slot) in k.params().iter().zip(param_slots) {
        match (p.ty(), slot) {
            (Type::Ptr(_, e), _) if elem_type(e) => {
                v.bufs.push((p.name().to_string(), table));
                table += 1;
            }
            (Type::Ptr(..), _) => table += 1,
            (_, Some(s)) if value_type(p.ty()) => v.params.push((p.name().to_string(), *s)),
            _ => {}
        }
    }
    // Local arrays (kernel scope only), after the parameters in declaration order, as the
    // scalar code's table has them.
    let mut local_bytes = 0;
    for s in k.body().stmts() {
        if let StmtNode::Alloc { var, count } = s.node() {
            if let Type::Ptr(kiln_ir::AddrSpace::Local, elem) = var.ty() {
                if elem_type(elem) {
                    v.bufs.push((var.name().to_string(), table));
                }
                v.mems.push(MemInfo {
                    name: var.name().to_string(),
                    elem,
                    kind: crate::x86::gen::MemKind::Table(table),
                    param: None,
                    local: Some((local_bytes, *count)),
                });
                local_bytes += crate::x86::gen::array_bytes(elem, *count);
                table += 1;
                // Local arrays start zeroed in every group: one group per call.
                v.per_group = true;
            }
        }
    }
    if regions && (table as usize) < BASES.len() {
        // No table reaches the last base register (a table's is its first-access position):
        // a region's batches advance their save frame's address there, not through memory,
        // whose read-modify-write per batch was a chain of store-to-load forwards.
        v.save_ptr = Some(BASES[BASES.len() - 1]);
    }
    if n_barriers == 0 {
        // A table takes a base register at its first access, in the order met: the ones
        // past the kernel's tables never do, so uniform integers may live there (a batch
        // stopped at a barrier keeps only its frame, so not in kernels with barriers).
        v.free_gprs = BASES[v.bufs.len().min(BASES.len())..].to_vec();
    }
    // Private array accesses are always checked.
    v.may_fault = v.needs_alive(k) || super::private::has_private(k.body());
    v.alive = v.slot();
    v.tmp_i = v.slot();
    v.tmp_v = v.slot();
    v.fault_lane = v.slot();
    v.resume = v.slot();
    debug_assert_eq!(v.resume, RESUME_SLOT);
    v.save = v.next;
    v.next += 32 * 8;
    let a = &mut v.a;
    a.push(rbp)?;
    a.mov(rbp, rsp)?;
    a.push(rbx)?;
    a.push(r12)?;
    a.push(r13)?;
    a.push(r14)?;
    a.push(r15)?;
    a.mov(r12, rdi)?;
    a.mov(r13, rsi)?;
    a.mov(r15, rdx)?;
    if n_barriers > 0 {
        // The round's stop, for every batch of this call, and the call's first frame (two
        // pushes keep the stack's 16-byte alignment, which the limit stub's call needs).
        a.mov(rax, qword_ptr(r15 + ROUND_SLOT))?;
        a.push(rax)?;
        a.push(r15)?;
    }
    a.mov(r14, qword_ptr(r12 + rt::OFF_MEMS))?;
    a.mov(rbx, qword_ptr(r12 + rt::OFF_GLOBAL_ID))?;
    a.mov(rax, qword_ptr(r12 + rt::OFF_SPAN))?;
    a.add(rax, rbx)?;
    a.mov(qword_ptr(r15 + END_SLOT), rax)?;
    // Broadcast constants and load buffer bases (emitted last, when all are known), then
    // come back for the uniform `let`s.
    let init = a.create_label();
    // Where the next group of a call of region code starts (see `V::next_group`).
    let group_init = a.create_label();
    // Where the next row of a call that runs every row of its group starts (`V::next_row`).
    let row_init = a.create_label();
    let mut hoist = a.create_label();
    // A batch resuming after a barrier has its broadcasts and hoisted lets in its own
    // frame already: only the base registers are loaded again.
    let bases_only = a.create_label();
    // Where the next batch of a call with barriers starts (its frame and ids set).
    let mut dispatch = a.create_label();
    if n_barriers > 0 && !regions {
        v.bind(&mut dispatch)?;
        v.a.cmp(dword_ptr(r15 + RESUME_SLOT), 0)?;
        v.a.jne(bases_only)?;
    }
    if (regions || rows) && v.may_fault {
        // Every lane alive: once per call, as a fault ends the call (at its region's or
        // batch's end), so every later group (row) of the call starts with the lanes as the
        // first left them.
        v.a.vpcmpeqd(ymm0, ymm0, ymm0)?;
        v.a.vmovups(ymmword_ptr(r15 + v.alive), ymm0)?;
        v.a.mov(dword_ptr(r15 + v.fault_lane), 8)?;
    }
    let a = &mut v.a;
    a.jmp(init)?;
    v.bind(&mut hoist)?;
    // A call that runs every row of its group: the ranges' bounds fixed for all its rows
    // once, then each row's set-up from `row_hoist` (`hoist.rs`).
    let mut row_hoist = v.a.create_label();
    if rows {
        v.hoist_call_ranges(k)?;
        v.bind(&mut row_hoist)?;
    }
    // Top-level lets of values fixed for the call: computed once, before the loop. Other
    // top-level names are in scope as divergent, so that a later let naming one (through
    // shadowing) is not hoisted.
    for s in k.body().stmts() {
        let other = match s.node() {
            StmtNode::Let { var, value } if value_type(var.ty()) && v.invariant(value) => {
                let (loc, dword) = v.bind_let(var, value, Kind::Uniform, true)?;
                v.hoisted.push((s.addr(), loc, dword));
                None
            }
            StmtNode::Let { var, .. } | StmtNode::Decl { var, .. } => Some(var),
            StmtNode::Call { result: Some(r), .. } => Some(r),
            _ => None,
        };
        if let Some(var) = other {
            let name = var.name().to_string();
            let loc = Loc::Slot(0);
            v.lets.push(Bound { decl: Some(0), ..Bound::new(name, loc, Kind::Div) });
        }
    }
    if n_barriers == 0 && !regions {
        // Nested `let`s fixed for the row that cannot fault (`rowwise.rs`).
        v.hoist_nested(k)?;
    }
    v.hoist_conds(k)?;
    v.hoist_magic(k)?;
    if n_barriers == 0 {
        // (Region code runs this set-up once per group: a group guard or the group's
        // known batches serve it better there.)
        v.hoist_ranges(k)?;
        v.memo_flags(k)?;
    }
    v.lets.clear();
    if !regions && n_barriers == 0 && !rows {
        // Blocks of 32 (or 16) work-items of 8- (16-)bit data first, where the kernel is of
        // that class (`packed.rs`); the batches left run below.
        v.packed(k)?;
    }
    let mut lanes = v.a.create_label();
    v.bind(&mut lanes)?;
    v.a.vmovd(xmm15, ebx)?;
    v.a.vpbroadcastd(ymm15, xmm15)?;
    v.a.vpaddd(ymm15, ymm15, ymmword_ptr(r15))?;
    let mut resumed = v.a.create_label();
    if n_barriers > 0 && !regions {
        v.bind(&mut resumed)?;
    }
    // A batch stopped at a barrier resumes after it (its state is in its vector frame).
    for (k, &l) in v.resumes.iter().enumerate().filter(|_| !regions) {
        v.a.cmp(dword_ptr(r15 + v.resume), k as i32 + 1)?;
        v.a.je(l)?;
    }
    // Every lane alive, the fault lane none. Without barriers once per call (and per row
    // of a group that the call runs row by row), not per batch: only a fault stub narrows
    // the alive lanes, and it also records the fault, which ends the call at its batch's
    // end, so a batch that reaches the next one leaves both as they were set here. A batch
    // resuming after a barrier has its own lanes: reset with every batch there.
    let per_batch = n_barriers > 0;
    if v.may_fault && !regions && !per_batch && !rows {
        v.all_alive()?;
    }
    let mut top = v.a.create_label();
    v.bind(&mut top)?;
    let mut fault_exit = v.fault_exit;
    if v.may_fault && !regions && per_batch {
        v.all_alive()?;
    }
    if !regions && n_barriers == 0 {
        // Every lane is alive at a batch's start (a fault ends the call at its end).
        v.batch_mark = Some(v.fault_mark());
    }
    let mut eight = 0;
    if regions {
        v.group_block(k.body().stmts())?;
        // (A block that the group's first region overwrites whole needs no zeros.)
        let g = v.regions();
        let overwritten =
            g.group_size.is_some_and(|l| super::zeroing::first_region_overwrites(k, l, &g.lids));
        let zeroed = if overwritten { 0 } else { local_bytes };
        v.next_group(group_init, zeroed, &mems_first_local(&v.mems))?;
        v.a.xor(eax, eax)?;
    } else {
        v.block(k.body().stmts())?;
        if n_barriers > 0 {
            // Finished (see `barrier`).
            v.a.mov(dword_ptr(r15 + RESUME_SLOT), 0)?;
        }
        if v.may_fault {
            v.a.cmp(dword_ptr(r15 + v.fault_lane), 8)?;
            v.a.jne(fault_exit)?;
        }
        if n_barriers > 0 {
            v.a.xor(eax, eax)?;
            v.a.jmp(v.next_batch)?;
        }
        eight = v.imm_slot(8);
        let a = &mut v.a;
        a.add(rbx, 8)?;
        a.vpaddd(ymm15, ymm15, ymmword_ptr(r15 + eight))?;
        a.cmp(rbx, qword_ptr(r15 + END_SLOT))?;
        a.jb(top)?;
        if rows {
            v.next_row(row_init)?;
        }
        v.a.xor(eax, eax)?;
    }
    let mut ret = v.ret;
    v.bind(&mut ret)?;
    let a = &mut v.a;
    a.vzeroupper()?;
    a.lea(rsp, qword_ptr(rbp - 40))?;
    a.pop(r15)?;
    a.pop(r14)?;
    a.pop(r13)?;
    a.pop(r12)?;
    a.pop(rbx)?;
    a.pop(rbp)?;
    a.ret()?;
    v.bind(&mut fault_exit)?;
    v.a.mov(eax, dword_ptr(r15 + v.fault_lane))?;
    v.a.add(rax, rbx)?;
    v.a.mov(qword_ptr(r12 + rt::OFF_GLOBAL_ID), rax)?;
    v.a.mov(rax, rt::STOP_ERROR)?;
    v.a.jmp(v.ret)?;
    v.stubs()?;
    let mut init = init;
    v.bind(&mut init)?;
    // Values fixed for the call first; the context's ids and base, which change from one
    // group of a call to the next, after `group_init`, where the next group starts.
    let per_group = |&((key, what), _): &((u64, u8), i32)| {
        what == 2 && (key < rt::OFF_GLOBAL_SIZE as u64 || key >= rt::OFF_BASE as u64)
    };
    let consts: Vec<_> = v.consts.iter().filter(|c| !per_group(c)).copied().collect();
    let group_consts: Vec<_> = v.consts.iter().filter(|c| per_group(c)).copied().collect();
    v.broadcasts(&consts)?;
    // The bases are fixed for the call: a call that runs every row of its group loads them
    // once, not per row (nothing in a batch leaves them changed: the limit stub saves them).
    if rows {
        v.load_bases()?;
    }
    let mut group_init = group_init;
    v.bind(&mut group_init)?;
    v.broadcasts(&group_consts)?;
    if !rows {
        v.load_bases()?;
    }
    v.a.jmp(hoist)?;
    if rows {
        // The next row: its ids' broadcasts, then what the call hoists for the row (the
        // values fixed for the whole call, `hoist.rs`'s call parts, are in their slots).
        let mut row_init = row_init;
        v.bind(&mut row_init)?;
        v.broadcasts(&group_consts)?;
        v.a.jmp(row_hoist)?;
    }
    let mut bases_only = bases_only;
    v.bind(&mut bases_only)?;
    v.load_bases()?;
    v.a.jmp(lanes)?;
    if n_barriers > 0 && !regions {
        v.next_batch_code(dispatch, lanes, resumed, eight)?;
    }
    Ok(Spmd {
        asm: v.a,
        vframe_bytes: v.next as usize,
        accessed: v.accessed,
        sites: v.sites,
        per_group: v.per_group,
        mems: v.mems,
        local_bytes,
        n_barriers,
        fma: v.fma,
        rows,
    })
}

/// True if `k` reads an id of dimension 1 or 2 (`global_id(1)`, `local_id(2)`, ...): what
/// a call computes once for its row (broadcasts, hoisted `let`s and conditions) then
/// depends on the row.
fn reads_row_ids(k: &Kernel) -> bool {
    struct Scan(bool);
    impl kiln_ir::Visitor for Scan {
        fn visit_expr(&mut self, e: &kiln_ir::Expr) {
            if let kiln_ir::ExprNode::Builtin { kind, dim } = e.node() {
                use kiln_ir::Builtin::{GlobalId, GroupId, LocalId};
                self.0 |= *dim > 0 && matches!(kind, GlobalId | LocalId | GroupId);
            }
            kiln_ir::walk_expr(self, e)
        }
    }
    let mut s = Scan(false);
    kiln_ir::Visitor::visit_kernel(&mut s, k);
    s.0
}

impl V {
    /// Fills the vector frame slots of `consts` (keys as in `V::consts`).
    fn broadcasts(&mut self, consts: &[((u64, u8), i32)]) -> R<()> {
        let v = self;
        for &((key, what), off) in consts {
            match what {
                1 => v.a.vbroadcastss(ymm0, dword_ptr(r13 + key as i32))?,
                2 => v.a.vbroadcastss(ymm0, dword_ptr(r12 + key as i32))?,
                4 => {
                    v.a.mov(rax, key)?;
                    v.a.vmovq(xmm0, rax)?;
                    v.a.vpbroadcastq(ymm0, xmm0)?;
                }
                super::CONST_LANES => {
                    // (Each byte 0 or -1, sign-extended to its lane's dword.)
                    let bytes =
                        (0..8).filter(|k| key >> k & 1 != 0).fold(0u64, |b, k| b | 0xff << (8 * k));
                    v.a.mov(rax, bytes)?;
                    v.a.vmovq(xmm0, rax)?;
                    v.a.vpmovsxbd(ymm0, xmm0)?;
                }
                super::strided::CONST_BYTES => {
                    v.a.mov(rax, key)?;
                    v.a.vmovq(xmm0, rax)?;
                }
                super::storegroup::CONST_SHUFFLE => {
                    let (lo, hi) = super::storegroup::shuffle_bytes(key);
                    v.a.mov(rax, lo)?;
                    v.a.vmovq(xmm0, rax)?;
                    v.a.mov(rax, hi)?;
                    v.a.vpinsrq(xmm0, xmm0, rax, 1)?;
                    v.a.vinserti128(ymm0, ymm0, xmm0, 1)?;
                }
                super::strided::CONST_STRIDE => {
                    v.a.mov(rax, key)?;
                    v.a.vmovq(xmm0, rax)?;
                    v.a.vpmovzxbd(ymm0, xmm0)?;
                }
                5 => {
                    v.a.mov(rax, qword_ptr(r14 + (key as i32 * 16 + 8)))?;
                    v.a.sub(rax, 8)?;
                    v.a.mov(qword_ptr(r15 + off), rax)?;
                    continue;
                }
                3 => {
                    v.a.mov(eax, dword_ptr(r14 + (key as i32 * 16 + 8)))?;
                    v.a.sub(eax, 1)?;
                    v.a.xor(eax, 0x8000_0000u32 as i32)?;
                    v.a.vmovd(xmm0, eax)?;
                    v.a.vpbroadcastd(ymm0, xmm0)?;
                }
                _ => {
                    v.a.mov(eax, key as u32)?;
                    v.a.vmovd(xmm0, eax)?;
                    v.a.vpbroadcastd(ymm0, xmm0)?;
                }
            }
            v.a.vmovups(ymmword_ptr(r15 + off), ymm0)?;
        }
        Ok(())
    }
}

/// The memory-table index of the local array at the local block's start, if any.
fn mems_first_local(mems: &[MemInfo]) -> Option<u32> {
    mems.iter().find_map(|m| match (m.local, m.kind) {
        (Some((0, _)), crate::x86::gen::MemKind::Table(t)) => Some(t),
        _ => None,
    })
}

impl V {
    /// Every lane alive (the alive slot all ones) and no fault recorded (the fault lane 8).
    fn all_alive(&mut self) -> R<()> {
        let ones = self.imm_slot(u32::MAX);
        self.a.vmovups(ymm0, ymmword_ptr(r15 + ones))?;
        self.a.vmovups(ymmword_ptr(r15 + self.alive), ymm0)?;
        self.a.mov(dword_ptr(r15 + self.fault_lane), 8)?;
        Ok(())
    }

    /// The resident buffer bases into their registers.
    fn load_bases(&mut self) -> R<()> {
        for (&t, &r) in self.based.iter().zip(&BASES[..self.resident_bases()]) {
            self.a.mov(r, qword_ptr(r14 + (t as i32 * 16)))?;
        }
        Ok(())
    }

    /// After a row's last batch, in code that runs every row of its group (see
    /// [`SpmdCode::rows`](crate::x86::SpmdCode::rows)): unless the row is the group's last,
    /// the next row in the interpreter's order (dimension 1, then 2): its ids in the
    /// context, where the fault reports and the code's reads of them find them, and the code
    /// again from the broadcasts of the ids (`init`), which recomputes what a call hoists
    /// for its row. The values fixed for the call (constants, bases, the alive lanes, the
    /// row's end, the ranges' bounds of `hoist_call_ranges`) are in place already.
    fn next_row(&mut self, init: CodeLabel) -> R<()> {
        let lid = |d: i32| qword_ptr(r12 + (rt::OFF_LOCAL_ID + 8 * d));
        let gid = |d: i32| qword_ptr(r12 + (rt::OFF_GLOBAL_ID + 8 * d));
        let mut finish = self.a.create_label();
        let mut next_y = self.a.create_label();
        let mut start = self.a.create_label();
        self.a.mov(rax, lid(1))?;
        self.a.inc(rax)?;
        self.a.cmp(rax, qword_ptr(r12 + (rt::OFF_LOCAL_SIZE + 8)))?;
        self.a.jb(next_y)?;
        self.a.mov(rax, lid(2))?;
        self.a.inc(rax)?;
        self.a.cmp(rax, qword_ptr(r12 + (rt::OFF_LOCAL_SIZE + 16)))?;
        self.a.jae(finish)?;
        self.a.mov(lid(2), rax)?;
        self.a.inc(gid(2))?;
        self.a.mov(lid(1), 0)?;
        self.a.mov(rax, qword_ptr(r12 + (rt::OFF_BASE + 8)))?;
        self.a.mov(gid(1), rax)?;
        self.a.jmp(start)?;
        self.bind(&mut next_y)?;
        self.a.mov(lid(1), rax)?;
        self.a.inc(gid(1))?;
        self.bind(&mut start)?;
        // (The row's end is the first row's: the context's `global_id(0)` is the group's
        // first column in every row, and nothing else writes the end's slot here.)
        self.a.mov(rbx, gid(0))?;
        self.a.jmp(init)?;
        self.bind(&mut finish)
    }

    /// The end of a group's region code: while the call has groups left (the qword at
    /// [`LOOP_SLOT`], counted down), the next group of the row: ids in the context advanced
    /// by one group, its local block zeroed, and the code from the broadcasts of the ids on
    /// (`init`; the values fixed for the call are in their slots already).
    fn next_group(&mut self, init: CodeLabel, local_bytes: usize, first: &Option<u32>) -> R<()> {
        let mut finish = self.a.create_label();
        self.a.dec(qword_ptr(r15 + LOOP_SLOT))?;
        self.a.je(finish)?;
        self.a.mov(rax, qword_ptr(r12 + rt::OFF_SPAN))?;
        self.a.add(qword_ptr(r12 + rt::OFF_GLOBAL_ID), rax)?;
        self.a.add(qword_ptr(r12 + rt::OFF_BASE), rax)?;
        self.a.add(qword_ptr(r12 + rt::OFF_GROUP_ID), 1)?;
        if let (Some(t), true) = (first, local_bytes > 0) {
            // The driver's block holds local_bytes rounded up to 8.
            let words = local_bytes.div_ceil(8) as i32;
            self.a.mov(r10, qword_ptr(r14 + (*t as i32 * 16)))?;
            self.a.vpxor(ymm0, ymm0, ymm0)?;
            let n32 = words / 4;
            if n32 <= 16 {
                for i in 0..n32 {
                    self.a.vmovups(ymmword_ptr(r10 + 32 * i), ymm0)?;
                }
            } else {
                // Four stores per iteration (a histogram's 1 KB: 8 iterations, not 32).
                let mut zero = self.a.create_label();
                self.a.mov(r11, (n32 / 4) as u64)?;
                self.bind(&mut zero)?;
                for i in 0..4 {
                    self.a.vmovups(ymmword_ptr(r10 + 32 * i), ymm0)?;
                }
                self.a.add(r10, 128)?;
                self.a.dec(r11)?;
                self.a.jne(zero)?;
                self.a.sub(r10, 128 * (n32 / 4))?;
                for i in (n32 / 4) * 4..n32 {
                    self.a.vmovups(ymmword_ptr(r10 + 32 * i), ymm0)?;
                }
            }
            for i in (words / 4) * 4..words {
                self.a.mov(qword_ptr(r10 + 8 * i), 0)?;
            }
        } else if local_bytes > 0 {
            return no("internal: local arrays without one at the block's start");
        }
        self.a.mov(rbx, qword_ptr(r12 + rt::OFF_GLOBAL_ID))?;
        self.a.mov(rax, qword_ptr(r12 + rt::OFF_SPAN))?;
        self.a.add(rax, rbx)?;
        self.a.mov(qword_ptr(r15 + END_SLOT), rax)?;
        // Every lane alive again (a fault ended the call).
        self.a.jmp(init)?;
        self.bind(&mut finish)
    }
}
