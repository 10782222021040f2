//! Binding arguments given against the original kernels' parameters to a fused kernel's
//! parameters, following its [`ArgMap`]s (the `#fused(args = ...)` mapping).
//!
//! This is the one place that mapping is applied: the fusion tests and the `kiln` facade
//! both call [`FusedKernel::bind_args`], so a launch never guesses by position.

use kiln_ir::launch::{Arg, BufferRef};
use kiln_ir::{Imm, Module};
use thiserror::Error;

use super::{ArgMap, FusedKernel, FusionSpec};

/// Why arguments could not be bound to a fused kernel. Each variant names the entry, the
/// original kernel and its parameter where there is one.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum BindError {
    /// The arguments are not one list per fused entry.
    #[error("{got} argument lists given for a fusion of {expected} kernels (one per entry)")]
    EntryCount {
        /// Entries of the fusion.
        expected: usize,
        /// Argument lists given.
        got: usize,
    },
    /// An entry's argument list does not have one argument per parameter.
    #[error("entry {entry}: kernel `{kernel}` takes {expected} arguments, {got} given")]
    ArgCount {
        /// The entry.
        entry: usize,
        /// The original kernel.
        kernel: String,
        /// Its parameter count.
        expected: usize,
        /// Arguments given.
        got: usize,
    },
    /// Two parameters the fusion merged (identical group) were given different arguments.
    #[error(
        "entry {entry}: kernel `{kernel}` parameter `{param}` was fused as identical to \
         `{first_kernel}` parameter `{first_param}` (entry {first_entry}), but another \
         argument was given for it"
    )]
    NotIdentical {
        /// The entry.
        entry: usize,
        /// The original kernel.
        kernel: String,
        /// Its parameter.
        param: String,
        /// The entry whose argument the fused parameter takes.
        first_entry: usize,
        /// That entry's kernel.
        first_kernel: String,
        /// That parameter.
        first_param: String,
    },
    /// A parameter the fusion replaced by a constant was given another value.
    #[error(
        "entry {entry}: kernel `{kernel}` parameter `{param}` was fused as the constant \
         {constant}, but {given} was given"
    )]
    ConstantMismatch {
        /// The entry.
        entry: usize,
        /// The original kernel.
        kernel: String,
        /// Its parameter.
        param: String,
        /// The constant built into the fused kernel.
        constant: String,
        /// The argument given (`a buffer` or the scalar).
        given: String,
    },
    /// The module or spec is not the one the kernel was fused from.
    #[error("the fused kernel `{fused}` does not match the module and spec given: {why}")]
    Mismatch {
        /// The fused kernel.
        fused: String,
        /// What does not match.
        why: String,
    },
}

impl FusedKernel {
    /// The fused kernel's arguments, from `args[e][p]`: the argument of parameter `p` of
    /// entry `e` (the kernel `spec.kernels[e]` of `module`), as if the originals were
    /// launched one after another.
    ///
    /// Arguments of parameters the fusion merged ([`ArgMap::Identical`]) must be the same
    /// argument ([`Arg::same`]) and arguments of parameters it made constants must equal
    /// the constant: anything else would make the fused kernel compute something other than
    /// the originals, so it is an error. Arguments of promoted (internalized) buffers are
    /// not passed: the fused kernel keeps that data on chip, so those buffers are neither
    /// read nor written.
    ///
    /// `module` and `spec` must be the ones the kernel was fused from.
    pub fn bind_args<B: BufferRef>(
        &self,
        module: &Module,
        spec: &FusionSpec,
        args: &[Vec<Arg<B>>],
    ) -> Result<Vec<Arg<B>>, BindError> {
        let mismatch = |why: String| BindError::Mismatch { fused: self.kernel.name().into(), why };
        if args.len() != self.args.len() {
            return Err(BindError::EntryCount { expected: self.args.len(), got: args.len() });
        }
        if spec.kernels.len() != self.args.len() {
            return Err(mismatch(format!(
                "the spec lists {} kernels, the fused kernel has {} entries",
                spec.kernels.len(),
                self.args.len()
            )));
        }
        let mut kernels = Vec::with_capacity(args.len());
        for (e, name) in spec.kernels.iter().enumerate() {
            let k = module
                .kernel(name)
                .ok_or_else(|| mismatch(format!("entry {e}: no kernel `{name}` in the module")))?;
            if k.params().len() != self.args[e].len() {
                return Err(mismatch(format!(
                    "entry {e}: kernel `{name}` has {} parameters, the fusion mapped {}",
                    k.params().len(),
                    self.args[e].len()
                )));
            }
            if args[e].len() != k.params().len() {
                return Err(BindError::ArgCount {
                    entry: e,
                    kernel: name.clone(),
                    expected: k.params().len(),
                    got: args[e].len(),
                });
            }
            kernels.push(k);
        }
        let n = self.kernel.params().len();
        // The (entry, param) each fused parameter takes its argument from.
        let mut from: Vec<Option<(usize, usize)>> = vec![None; n];
        for (e, maps) in self.args.iter().enumerate() {
            for (p, m) in maps.iter().enumerate() {
                if let ArgMap::Param(j) = m {
                    let slot = from.get_mut(*j).ok_or_else(|| {
                        mismatch(format!("entry {e} parameter {p} maps to fused parameter {j}"))
                    })?;
                    *slot = Some((e, p));
                }
            }
        }
        let name = |e: usize, p: usize| kernels[e].params()[p].name().to_string();
        for (e, maps) in self.args.iter().enumerate() {
            for (p, m) in maps.iter().enumerate() {
                match m {
                    ArgMap::Param(_) | ArgMap::Promoted { .. } => {}
                    ArgMap::Identical(j) => {
                        let Some(Some((fe, fp))) = from.get(*j).copied() else {
                            return Err(mismatch(format!(
                                "entry {e} parameter {p} is identical to fused parameter {j}, \
                                 which takes no argument"
                            )));
                        };
                        if !args[e][p].same(&args[fe][fp]) {
                            return Err(BindError::NotIdentical {
                                entry: e,
                                kernel: kernels[e].name().into(),
                                param: name(e, p),
                                first_entry: fe,
                                first_kernel: kernels[fe].name().into(),
                                first_param: name(fe, fp),
                            });
                        }
                    }
                    ArgMap::Constant(c) => {
                        let given = args[e][p].imm();
                        if given != Some(*c) {
                            return Err(BindError::ConstantMismatch {
                                entry: e,
                                kernel: kernels[e].name().into(),
                                param: name(e, p),
                                constant: imm_text(*c),
                                given: given.map_or("a buffer".into(), imm_text),
                            });
                        }
                    }
                }
            }
        }
        from.into_iter()
            .enumerate()
            .map(|(j, f)| {
                f.map(|(e, p)| args[e][p].clone())
                    .ok_or_else(|| mismatch(format!("fused parameter {j} takes no argument")))
            })
            .collect()
    }
}

/// An immediate as a suffixed literal of the text format (`2.0f32`, `7u32`), so that its
/// type shows; bools need no suffix.
fn imm_text(i: Imm) -> String {
    match i {
        Imm::Bool(b) => b.to_string(),
        _ => format!("{}{}", kiln_ir::Expr::imm(i), i.scalar().name()),
    }
}
