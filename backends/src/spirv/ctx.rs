//! Type, constant and capability bookkeeping shared by both flavours.

use std::collections::{BTreeSet, HashMap};

use rspirv::dr::{Builder, InsertPoint, Instruction, Operand};
use rspirv::spirv::{Capability, Op, StorageClass, Word};

use kiln_ir::Scalar;

use super::Flavour;

/// The emission state: the rspirv builder plus caches, so every type and constant is
/// declared once.
pub(crate) struct Ctx {
    pub b: Builder,
    pub flavour: Flavour,
    caps: Vec<Capability>,
    exts: BTreeSet<&'static str>,
    scalars: HashMap<Scalar, Word>,
    ptrs: HashMap<(u32, Word), Word>,
    consts: HashMap<(Word, u64), Word>,
    bools: [Option<Word>; 2],
    nulls: HashMap<Word, Word>,
    pub void: Word,
    /// Set when an f16 type was needed (the OpenCL flavour cannot express it yet).
    pub f16_used: bool,
    /// The driver's f64 `Fma` rounds once ([`super::Spirv::exact_f64_fma`]).
    pub exact_f64_fma: bool,
    pub ext_set: Word,
    /// The module uses the Vulkan memory model (cooperative matrices require it): barriers
    /// make memory available and visible explicitly, and `Device` scope becomes
    /// `QueueFamily` (the whole dispatch, without the VulkanMemoryModelDeviceScope feature).
    pub vulkan_memory_model: bool,
}

impl Ctx {
    pub fn new(flavour: Flavour) -> Ctx {
        let mut b = Builder::new();
        let ext_set = b.ext_inst_import(match flavour {
            Flavour::OpenCl => "OpenCL.std",
            Flavour::Vulkan => "GLSL.std.450",
        });
        let void = b.type_void();
        Ctx {
            b,
            flavour,
            caps: Vec::new(),
            exts: BTreeSet::new(),
            scalars: HashMap::new(),
            ptrs: HashMap::new(),
            consts: HashMap::new(),
            bools: [None, None],
            nulls: HashMap::new(),
            void,
            ext_set,
            f16_used: false,
            exact_f64_fma: false,
            vulkan_memory_model: false,
        }
    }

    /// Records a capability (declared once, when the module is finished).
    pub fn cap(&mut self, c: Capability) {
        if !self.caps.contains(&c) {
            self.caps.push(c);
        }
    }

    /// The memory scope `Device` (1), or `QueueFamily` (5) under the Vulkan memory model.
    pub fn device_scope(&mut self) -> Word {
        self.u32c(if self.vulkan_memory_model { 5 } else { 1 })
    }

    /// Records an extension.
    pub fn ext(&mut self, e: &'static str) {
        self.exts.insert(e);
    }

    /// Declares the recorded capabilities and extensions; returns the builder.
    pub fn finish(mut self) -> Builder {
        for c in std::mem::take(&mut self.caps) {
            let inst = Instruction::new(Op::Capability, None, None, vec![Operand::Capability(c)]);
            self.b.module_mut().capabilities.push(inst);
        }
        for e in std::mem::take(&mut self.exts) {
            self.b.extension(e);
        }
        self.b
    }

    /// The SPIR-V type of a value of scalar type `s` (bool is OpTypeBool).
    pub fn ty(&mut self, s: Scalar) -> Word {
        if let Some(&t) = self.scalars.get(&s) {
            return t;
        }
        let t = match s {
            Scalar::Bool => self.b.type_bool(),
            Scalar::F16 | Scalar::F32 | Scalar::F64 => {
                match s.bits() {
                    16 => {
                        self.f16_used = true;
                        self.cap(Capability::Float16)
                    }
                    64 => self.cap(Capability::Float64),
                    _ => {}
                }
                self.b.type_float(s.bits())
            }
            _ => {
                match s.bits() {
                    8 => self.cap(Capability::Int8),
                    16 => self.cap(Capability::Int16),
                    64 => self.cap(Capability::Int64),
                    _ => {}
                }
                // Signless integers: the operation, not the type, says signed or unsigned.
                self.b.type_int(s.bits(), 0)
            }
        };
        self.scalars.insert(s, t);
        t
    }

    /// Whether the type of `s` was declared (some value or memory of that type exists).
    pub fn declared(&self, s: Scalar) -> bool {
        self.scalars.contains_key(&s)
    }

    /// The type an element of `s` has in memory (`bool` is stored as a byte).
    pub fn mem_ty(&mut self, s: Scalar) -> Word {
        self.ty(mem_scalar(s))
    }

    /// A pointer type.
    pub fn ptr(&mut self, sc: StorageClass, pointee: Word) -> Word {
        *self
            .ptrs
            .entry((sc as u32, pointee))
            .or_insert_with(|| self.b.type_pointer(None, sc, pointee))
    }

    /// A constant of type `s` from its bit pattern (zero-extended in the word).
    pub fn constant(&mut self, s: Scalar, bits: u64) -> Word {
        if s == Scalar::Bool {
            return self.bool_const(bits != 0);
        }
        let ty = self.ty(s);
        let bits = if s.bits() < 64 { bits & ((1u64 << s.bits()) - 1) } else { bits };
        if let Some(&c) = self.consts.get(&(ty, bits)) {
            return c;
        }
        let c = if s.bits() == 64 {
            self.b.constant_bit64(ty, bits)
        } else {
            self.b.constant_bit32(ty, bits as u32)
        };
        self.consts.insert((ty, bits), c);
        c
    }

    /// `true` or `false`.
    pub fn bool_const(&mut self, v: bool) -> Word {
        if let Some(c) = self.bools[v as usize] {
            return c;
        }
        let t = self.ty(Scalar::Bool);
        let c = if v { self.b.constant_true(t) } else { self.b.constant_false(t) };
        self.bools[v as usize] = Some(c);
        c
    }

    /// A `u32` constant.
    pub fn u32c(&mut self, v: u32) -> Word {
        self.constant(Scalar::U32, v as u64)
    }

    /// An integer constant of type `s` from a signed value.
    pub fn int_const(&mut self, s: Scalar, v: i128) -> Word {
        self.constant(s, v as u64)
    }

    /// A float constant of type `s` (f32 or f64) with value `v`.
    pub fn float_const(&mut self, s: Scalar, v: f64) -> Word {
        self.constant(s, kiln_ir::expr::float_to_bits(s, v))
    }

    /// OpConstantNull of a type.
    pub fn null(&mut self, ty: Word) -> Word {
        *self.nulls.entry(ty).or_insert_with(|| self.b.constant_null(ty))
    }

    /// Declares a Function-storage variable in the entry block of the current function.
    pub fn local_var(&mut self, ptr_ty: Word) -> Word {
        let id = self.b.id();
        let cur = self.b.selected_block();
        self.b.select_block(Some(0)).expect("entry block");
        let inst = Instruction::new(
            Op::Variable,
            Some(ptr_ty),
            Some(id),
            vec![Operand::StorageClass(StorageClass::Function)],
        );
        self.b.insert_into_block(InsertPoint::Begin, inst).expect("entry block");
        self.b.select_block(cur).expect("current block");
        id
    }
}

/// The scalar a value of type `s` is stored as in memory.
pub(crate) fn mem_scalar(s: Scalar) -> Scalar {
    if s == Scalar::Bool {
        Scalar::U8
    } else {
        s
    }
}
