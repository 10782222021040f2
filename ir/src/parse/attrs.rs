//! Parsing of the kernel-fusion attributes `#nd_range(...)` and `#fused(...)` (see
//! `docs/ir-syntax.md`); the attribute name has been consumed.

use super::lexer::Tok;
use super::{PResult, Parser};
use crate::expr::Imm;
use crate::kernel::{FusedArg, FusedAttr, NdRangeAttr};
use crate::types::Scalar;

impl Parser<'_> {
    fn ident_any(&mut self, what: &str) -> PResult<String> {
        if let Tok::Ident(n) = self.peek().clone() {
            self.bump();
            return Ok(n);
        }
        self.error(self.span(), format!("expected {what}, found {}", self.peek().describe()))
    }

    fn u32_list(&mut self, what: &str) -> PResult<Vec<u32>> {
        let start = self.expect_punct("[")?;
        let mut v = Vec::new();
        while !self.is_punct("]") {
            v.push(self.u32_literal(what)?);
            if !self.eat_punct(",") {
                break;
            }
        }
        self.expect_punct("]")?;
        if v.is_empty() || v.len() > 3 {
            return self
                .error(start, format!("{what}s: 1 to 3 entries expected, found {}", v.len()));
        }
        Ok(v)
    }

    /// `(global = [..], local = [..], offset = [..])`, `local` optional.
    pub(super) fn nd_range_attr(&mut self) -> PResult<NdRangeAttr> {
        self.expect_punct("(")?;
        self.expect_word("global")?;
        self.expect_punct("=")?;
        let global = self.u32_list("a global size")?;
        self.expect_punct(",")?;
        let mut local = None;
        if self.eat_word("local") {
            self.expect_punct("=")?;
            local = Some(self.u32_list("a local size")?);
            self.expect_punct(",")?;
        }
        let at = self.span();
        self.expect_word("offset")?;
        self.expect_punct("=")?;
        let offset = self.u32_list("an offset")?;
        self.expect_punct(")")?;
        if local.as_ref().is_some_and(|l| l.len() != global.len()) || offset.len() != global.len() {
            return self.error(at, "`#nd_range` lists must have one entry per dimension");
        }
        Ok(NdRangeAttr { global, local, offset })
    }

    /// `(kernels = [k, ..], args = [[arg, ..], ..])`.
    pub(super) fn fused_attr(&mut self) -> PResult<FusedAttr> {
        self.expect_punct("(")?;
        self.expect_word("kernels")?;
        self.expect_punct("=")?;
        self.expect_punct("[")?;
        let mut kernels = Vec::new();
        while !self.is_punct("]") {
            kernels.push(self.ident_any("a kernel name")?);
            if !self.eat_punct(",") {
                break;
            }
        }
        self.expect_punct("]")?;
        self.expect_punct(",")?;
        let at = self.span();
        self.expect_word("args")?;
        self.expect_punct("=")?;
        self.expect_punct("[")?;
        let mut args = Vec::new();
        while !self.is_punct("]") {
            self.expect_punct("[")?;
            let mut one = Vec::new();
            while !self.is_punct("]") {
                one.push(self.fused_arg()?);
                if !self.eat_punct(",") {
                    break;
                }
            }
            self.expect_punct("]")?;
            args.push(one);
            if !self.eat_punct(",") {
                break;
            }
        }
        self.expect_punct("]")?;
        self.expect_punct(")")?;
        if args.len() != kernels.len() {
            return self.error(at, "`#fused` needs one argument list per kernel");
        }
        Ok(FusedAttr { kernels, args })
    }

    fn fused_arg(&mut self) -> PResult<FusedArg> {
        let at = self.span();
        let kind = self.ident_any("`param`, `identical`, `promoted` or `const`")?;
        self.expect_punct("(")?;
        let arg = match kind.as_str() {
            "param" => FusedArg::Param(self.u32_literal("a parameter index")?),
            "identical" => FusedArg::Identical(self.u32_literal("a parameter index")?),
            "promoted" => {
                let local = match self.ident_any("`private` or `local`")?.as_str() {
                    "local" => true,
                    "private" => false,
                    other => return self.error(at, format!("unknown memory `{other}`")),
                };
                self.expect_punct(",")?;
                FusedArg::Promoted { local, size: self.u32_literal("an element count")? }
            }
            "const" => {
                let tname = self.ident_any("a scalar type")?;
                let Some(ty) = Scalar::from_name(&tname) else {
                    return self.error(at, format!("unknown scalar type `{tname}`"));
                };
                self.expect_punct(",")?;
                let neg = self.eat_punct("-");
                let span = self.span();
                let value = match self.peek().clone() {
                    Tok::Int { text, radix, suffix: None } => {
                        match u128::from_str_radix(&text, radix) {
                            Ok(v) if v <= u64::MAX as u128 => v as i128,
                            _ => return self.error(span, "constant out of range"),
                        }
                    }
                    t => {
                        return self
                            .error(span, format!("expected an integer, found {}", t.describe()))
                    }
                };
                self.bump();
                let value = if neg { -value } else { value };
                let imm = match ty {
                    Scalar::Bool => Imm::Bool(value != 0),
                    t if t.is_float() => Imm::from_bits(t, value as u64),
                    t => Imm::int(t, value),
                };
                FusedArg::Const(imm)
            }
            other => return self.error(at, format!("unknown fused argument kind `{other}`")),
        };
        self.expect_punct(")")?;
        Ok(arg)
    }
}
