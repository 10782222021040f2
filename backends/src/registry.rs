//! Every target by name: what `kiln emit --target` accepts. Adding a target is its folder
//! plus one line in [`TARGETS`].

use crate::amdgpu::Amdgpu;
use crate::kir::Kir;
use crate::ptx::{self, Ptx};
use crate::spirv::{Flavour, Spirv};
use crate::target::AnyTarget;
use crate::x86::{X86Options, X86};

/// Settings of the targets that have any, for [`target`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TargetOptions {
    /// The PTX target's architecture and ISA version.
    pub ptx: ptx::Options,
    /// The x86 target's options (`scalar`: no AVX2 lanes; `unchecked`: no bounds checks).
    pub x86: X86Options,
}

/// A target the registry knows.
pub struct TargetInfo {
    /// Its name, as `--target` spells it.
    pub name: &'static str,
    /// What it emits, in a few words.
    pub about: &'static str,
    /// Whether its output is binary (to be written to a file).
    pub binary: bool,
    make: fn(&TargetOptions) -> Box<dyn AnyTarget>,
}

/// Every target, in the order `--help` lists them.
pub const TARGETS: &[TargetInfo] = &[
    TargetInfo {
        name: "ptx",
        about: "PTX text for NVIDIA GPUs (sm_70+)",
        binary: false,
        make: |o| Box::new(Ptx(o.ptx)),
    },
    TargetInfo {
        name: "spirv-cl",
        about: "SPIR-V, OpenCL Kernel flavour (one kernel per module)",
        binary: true,
        make: |_| Box::new(Spirv::new(Flavour::OpenCl)),
    },
    TargetInfo {
        name: "spirv-vk",
        about: "SPIR-V, Vulkan compute flavour (one kernel per module)",
        binary: true,
        make: |_| Box::new(Spirv::new(Flavour::Vulkan)),
    },
    TargetInfo {
        name: "amdgpu",
        about: "gfx900 assembly, scalar/vector by divergence",
        binary: false,
        make: |_| Box::new(Amdgpu),
    },
    TargetInfo {
        name: "x86",
        about: "x86-64 machine code for this host (the cpu device's), as a listing",
        binary: false,
        make: |o| Box::new(X86(o.x86.clone())),
    },
    TargetInfo {
        name: "kir",
        about: "the kernels as the interpreter runs them (text format)",
        binary: false,
        make: |_| Box::new(Kir),
    },
];

/// The registered target called `name`, or `None`.
pub fn info(name: &str) -> Option<&'static TargetInfo> {
    TARGETS.iter().find(|t| t.name == name)
}

/// The target called `name` with `options`; an unknown name is an error listing the known.
pub fn target(name: &str, options: &TargetOptions) -> Result<Box<dyn AnyTarget>, String> {
    info(name)
        .map(|t| (t.make)(options))
        .ok_or_else(|| format!("unknown target `{name}` (targets: {})", names().join(", ")))
}

/// The names of every target.
pub fn names() -> Vec<&'static str> {
    TARGETS.iter().map(|t| t.name).collect()
}
