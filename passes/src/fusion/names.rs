//! Naming a fused entry's parameter by kernel and parameter name instead of by position:
//! [`FusionSpec::param`] in code, `["add", "c"]` in a TOML spec
//! ([`FusionSpec::from_toml_for`]).

use kiln_ir::Module;

use super::spec::{FusionSpec, ParamRef};
use super::toml_spec::SpecError;

/// Which entry of a fusion list: by position, or by kernel name (the name must appear once
/// in [`FusionSpec::kernels`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntrySel {
    /// The entry's position, from 0.
    Index(usize),
    /// The name of its kernel.
    Name(String),
}

impl From<usize> for EntrySel {
    fn from(i: usize) -> EntrySel {
        EntrySel::Index(i)
    }
}

impl From<&str> for EntrySel {
    fn from(n: &str) -> EntrySel {
        EntrySel::Name(n.to_string())
    }
}

/// Which parameter of an entry's kernel: by position or by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParamSel {
    /// The parameter's position, from 0.
    Index(usize),
    /// Its name.
    Name(String),
}

impl From<usize> for ParamSel {
    fn from(i: usize) -> ParamSel {
        ParamSel::Index(i)
    }
}

impl From<&str> for ParamSel {
    fn from(n: &str) -> ParamSel {
        ParamSel::Name(n.to_string())
    }
}

impl FusionSpec {
    /// The parameter `param` of entry `entry`, each given by position or by name, as a
    /// [`ParamRef`]: `spec.param(&module, "add", "c")`, `spec.param(&module, 1, "a")`. A
    /// kernel name must be the kernel of exactly one entry; a parameter name must be one of
    /// that kernel's in `module`. Refused, naming what is unknown or ambiguous and what
    /// there is: a kernel not in the list, a kernel listed more than once (give the entry's
    /// index), a parameter the kernel does not have. Positions are taken as given (the
    /// fusion checks them).
    ///
    /// ```
    /// use kiln_passes::fusion::{FusionSpec, ParamRef};
    /// let m = kiln_ir::parse_module(
    ///     "kernel add(a: ptr<global, f32>, c: ptr<global, f32>) { }
    ///      kernel mul(a: ptr<global, f32>, c: ptr<global, f32>) { }",
    /// )
    /// .unwrap();
    /// let spec = FusionSpec { kernels: vec!["add".into(), "mul".into(), "add".into()], ..Default::default() };
    /// assert_eq!(spec.param(&m, "mul", "c").unwrap(), ParamRef::new(1, 1));
    /// assert_eq!(spec.param(&m, 2, "a").unwrap(), ParamRef::new(2, 0));
    /// assert_eq!(
    ///     spec.param(&m, "add", "a").unwrap_err().to_string(),
    ///     "invalid fusion spec: kernel `add` is entries 0 and 2 of the list: name the entry by \
    ///      its index"
    /// );
    /// assert_eq!(
    ///     spec.param(&m, "mul", "b").unwrap_err().to_string(),
    ///     "invalid fusion spec: kernel `mul` (entry 1) has no parameter `b` (parameters: a, c)"
    /// );
    /// ```
    pub fn param(
        &self,
        module: &Module,
        entry: impl Into<EntrySel>,
        param: impl Into<ParamSel>,
    ) -> Result<ParamRef, SpecError> {
        self.resolve(Some(module), &entry.into(), &param.into())
    }

    /// [`param`](Self::param), with the module only where a parameter is named (without it,
    /// a parameter name is refused saying that the module is needed).
    pub(crate) fn resolve(
        &self,
        module: Option<&Module>,
        entry: &EntrySel,
        param: &ParamSel,
    ) -> Result<ParamRef, SpecError> {
        let bad = |m: String| Err(SpecError::Value(m));
        let e = match entry {
            EntrySel::Index(i) => *i,
            EntrySel::Name(n) => {
                let at: Vec<usize> =
                    (0..self.kernels.len()).filter(|&i| self.kernels[i] == *n).collect();
                match at.as_slice() {
                    [i] => *i,
                    [] => {
                        return bad(format!(
                            "kernel `{n}` is not in the list (kernels: {})",
                            self.kernels.join(", ")
                        ))
                    }
                    many => {
                        let mut shown: Vec<String> = many.iter().map(|i| i.to_string()).collect();
                        let last = shown.pop().unwrap_or_default();
                        return bad(format!(
                            "kernel `{n}` is entries {} and {last} of the list: name the entry \
                             by its index",
                            shown.join(", ")
                        ));
                    }
                }
            }
        };
        let p = match param {
            ParamSel::Index(i) => *i,
            ParamSel::Name(n) => {
                let Some(kernel_name) = self.kernels.get(e) else {
                    return bad(format!(
                        "entry {e} is past the list's {} kernels",
                        self.kernels.len()
                    ));
                };
                let Some(module) = module else {
                    return bad(format!(
                        "parameter `{n}` of entry {e} is named: names are resolved against \
                         the kernels' module (`FusionSpec::from_toml_for`, `kiln fuse`)"
                    ));
                };
                let Some(k) = module.kernel(kernel_name) else {
                    return bad(format!("no kernel `{kernel_name}` in the module (entry {e})"));
                };
                match k.params().iter().position(|v| v.name() == n) {
                    Some(i) => i,
                    None => {
                        let names: Vec<&str> = k.params().iter().map(|v| v.name()).collect();
                        return bad(format!(
                            "kernel `{kernel_name}` (entry {e}) has no parameter `{n}` \
                             (parameters: {})",
                            names.join(", ")
                        ));
                    }
                }
            }
        };
        Ok(ParamRef::new(e, p))
    }
}
