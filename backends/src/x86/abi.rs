//! The code object's calling convention, for the executor that runs it (the cpu device's,
//! `kiln_runtime::device::cpu`): the context block generated code reads its ids, sizes and
//! memory from and reports a stop through, the limit helper, the stop words and fault
//! codes, the vector frames' fixed slots, and the memory and fault-site tables that turn a
//! stop into the interpreter's error. Which code to call and how (frames, entry points)
//! is on [`ScalarCode`](super::ScalarCode) and [`SpmdCode`](super::SpmdCode).

pub use super::gen::{MemInfo, MemKind, Site};
pub use super::rt::{
    bits_of, limit_hit, Ctx, Limits, MemRef, ERR_CANCELLED, ERR_DEADLINE, ERR_DIV_ZERO,
    ERR_FOR_STEP, ERR_MISALIGNED, ERR_OOB, ERR_STEPS, STOP_ERROR,
};
pub use super::spmd::{IOTA, LOOP_SLOT, RESUME_SLOT, ROUND_SLOT, STOP_DIVERGE};
