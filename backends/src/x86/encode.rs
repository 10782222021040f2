//! One-pass encoding of the code assembler's instructions: the x86 JIT's hot path.
//!
//! iced-x86's block encoder picks the shortest form of every branch, which takes several
//! passes and most of the compile time of a small kernel. Here every branch is encoded in
//! its `rel32` form in a single pass over the instructions (each goes through iced-x86's
//! encoder once), and the branch displacements are patched when all labels are placed: the
//! code is a little larger, and built several times faster.

use std::collections::HashMap;

use iced_x86::{Encoder, Instruction, OpKind};

use super::X86Error;

/// Machine code and where each instruction starts.
pub(crate) struct Encoded {
    pub bytes: Vec<u8>,
    /// Byte offset of each instruction, in order.
    pub offsets: Vec<u32>,
}

/// Encodes `instrs` (from a `CodeAssembler`: a labelled instruction has the label's id as
/// its `ip`, a branch the target label's id as its target) for address 0; the result is
/// position independent as long as the instructions are (no absolute addresses).
pub(crate) fn encode(instrs: &[Instruction]) -> Result<Encoded, X86Error> {
    let mut enc = Encoder::try_with_capacity(64, instrs.len() * 6)
        .map_err(|e| X86Error::Internal(e.to_string()))?;
    let mut offsets = Vec::with_capacity(instrs.len());
    let mut labels: HashMap<u64, u32> = HashMap::new();
    // (position of the rel32 field, target label id, end of the branch instruction)
    let mut fixups: Vec<(usize, u64, usize)> = Vec::new();
    let mut at = 0usize;
    for ins in instrs {
        if ins.ip() != 0 {
            labels.insert(ins.ip(), at as u32);
        }
        offsets.push(at as u32);
        let len = if ins.op0_kind() == OpKind::NearBranch64 {
            let target = ins.near_branch64();
            let mut b = *ins;
            b.set_code(b.code().as_near_branch());
            // A branch to itself for now; the displacement is patched below.
            b.set_near_branch64(at as u64);
            let len = enc.encode(&b, at as u64).map_err(|e| X86Error::Internal(e.to_string()))?;
            fixups.push((at + len - 4, target, at + len));
            len
        } else if ins.op_kinds().any(|k| matches!(k, OpKind::NearBranch16 | OpKind::NearBranch32))
            || ins.is_ip_rel_memory_operand()
        {
            return Err(X86Error::Internal(format!(
                "cannot encode `{ins}` position-independently"
            )));
        } else {
            enc.encode(ins, at as u64).map_err(|e| X86Error::Internal(e.to_string()))?
        };
        at += len;
    }
    let mut bytes = enc.take_buffer();
    for (pos, label, end) in fixups {
        let Some(&target) = labels.get(&label) else {
            return Err(X86Error::Internal(format!("branch to a label never placed ({label})")));
        };
        let rel = target as i64 - end as i64;
        bytes[pos..pos + 4].copy_from_slice(&(rel as i32).to_le_bytes());
    }
    Ok(Encoded { bytes, offsets })
}
