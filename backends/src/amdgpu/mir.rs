//! Machine IR: a linear list of gfx9 instructions over virtual registers (kept in a
//! cranelift-entity arena) and labels. Basic blocks are the runs between labels and branches.

use cranelift_entity::{entity_impl, PrimaryMap};

/// A virtual register.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VReg(u32);
entity_impl!(VReg, "%r");

/// A label (the start of a basic block).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Label(u32);
entity_impl!(Label, "BB");

/// First SGPR of the work-group ids x, y, z (after the kernarg segment pointer `s[0:1]`
/// and the flat scratch init pair `s[2:3]`).
pub const GROUP_ID_SGPR: u8 = 4;
/// The SGPR with the wave's private segment offset (the scratch base of VGPR spills).
pub const SCRATCH_OFFSET_SGPR: u8 = 7;

/// A register class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RegClass {
    /// One 32-bit SGPR (uniform value).
    S,
    /// An aligned pair of SGPRs (64-bit: addresses, lane masks).
    S2,
    /// One 32-bit VGPR (a value per lane).
    V,
    /// Two consecutive VGPRs (a 64-bit value per lane: i64, u64, f64).
    V2,
    /// Four consecutive VGPRs (the data tuple of a 64-bit compare-and-swap).
    V4,
}

/// A physical register.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PReg {
    /// `sN`
    S(u8),
    /// `s[N:N+1]`
    S2(u8),
    /// `vN`
    V(u8),
    /// `v[N:N+1]`
    V2(u8),
    /// `v[N:N+3]`
    V4(u8),
}

/// An instruction operand.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Opnd {
    /// A virtual register (before register allocation).
    R(VReg),
    /// A physical register.
    P(PReg),
    /// Part `k` (0 low, 1 high; up to 3 for `V4`) of a multi-register virtual register
    /// (`S2`, `V2`, `V4`): register allocation turns it into the single physical register
    /// holding that part.
    Half(VReg, u8),
    /// The 64-bit `vcc` register (carries of 64-bit adds).
    Vcc,
    /// A 32-bit immediate (inline constant or literal).
    Imm(u32),
    /// A branch target.
    L(Label),
    /// The 64-bit exec mask.
    Exec,
    /// The `m0` register.
    M0,
    /// Verbatim text (waitcnt fields); text starting with a space is a modifier.
    Text(&'static str),
    /// A memory instruction's immediate byte offset (the `offset:N` modifier).
    Offset(u32),
}

/// One machine instruction: `op defs, uses` (a label definition has op `label`).
#[derive(Clone, Debug, PartialEq)]
pub struct Inst {
    /// The mnemonic.
    pub op: &'static str,
    /// Written operands.
    pub defs: Vec<Opnd>,
    /// Read operands.
    pub uses: Vec<Opnd>,
}

/// A loop's extent in the instruction list: registers live into it stay live to its end.
#[derive(Clone, Copy, Debug)]
pub struct LoopRange {
    /// Index of the loop header label.
    pub head: usize,
    /// Index of the back-edge branch.
    pub end: usize,
}

/// A lowered kernel before or after register allocation.
#[derive(Clone, Debug, Default)]
pub struct MFunc {
    /// Kernel name.
    pub name: String,
    /// Virtual registers and their classes.
    pub vregs: PrimaryMap<VReg, RegClass>,
    /// Labels.
    pub labels: PrimaryMap<Label, ()>,
    /// The instructions, in layout order.
    pub insts: Vec<Inst>,
    /// Loops, for liveness.
    pub loops: Vec<LoopRange>,
    /// Bytes of local (LDS) memory.
    pub lds_bytes: u32,
    /// Bytes of private (scratch) memory per lane: VGPR spill slots.
    pub scratch_bytes: u32,
    /// Bytes of kernel arguments (explicit and hidden).
    pub kernarg_bytes: u32,
    /// Byte offset of each explicit parameter in the kernarg segment.
    pub param_offsets: Vec<u32>,
    /// Byte offset of the hidden arguments: global offset, local size, global size, number
    /// of groups (three u32 each).
    pub hidden_offset: u32,
    /// Highest SGPR used plus one (after register allocation).
    pub num_sgprs: u32,
    /// Highest VGPR used plus one (after register allocation).
    pub num_vgprs: u32,
}
