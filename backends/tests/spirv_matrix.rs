//! Matrix operations in the SPIR-V Vulkan flavour (SPV_KHR_cooperative_matrix): every form
//! the IR has (both shapes, row and column layouts, global and local memory, loads of each
//! role, fills, `mma`, stores, `var` fragments, `copy_async`) is emitted and passes
//! `spirv-val`; what is not lowered is refused by name.
//!
//! The validator is `$KILN_SPIRV_VAL` (`cargo xtask test` installs SPIRV-Tools 2025.5 from
//! PyPI); it must know the extension (SPIRV-Tools 2023.4 or newer), else the tests skip
//! through `kiln_ir::testing::require` (fail under `KILN_REQUIRE_TOOLS`).

use std::path::{Path, PathBuf};
use std::process::Command;

use kiln_backends::spirv::{emit, Flavour, SpirvModule};
use kiln_ir::{parse_module, Kernel};

/// The first SPIRV-Tools release that validates SPV_KHR_cooperative_matrix.
const FIRST_KNOWING: (u32, u32) = (2023, 4);

/// `$KILN_SPIRV_VAL`, if it knows cooperative matrices.
fn validator() -> Option<PathBuf> {
    let val = kiln_ir::testing::tool("KILN_SPIRV_VAL")?;
    let found = version(&val).and_then(|v| {
        if v >= FIRST_KNOWING {
            Ok(val.clone())
        } else {
            Err(format!(
                "{} is SPIRV-Tools v{}.{}, which does not know SPV_KHR_cooperative_matrix \
                 (v{}.{} or newer does; `cargo xtask tools` installs one)",
                val.display(),
                v.0,
                v.1,
                FIRST_KNOWING.0,
                FIRST_KNOWING.1
            ))
        }
    });
    kiln_ir::testing::require("KILN_REQUIRE_TOOLS", found)
}

/// `SPIRV-Tools vYEAR.MINOR ...`, the first line of `--version`.
fn version(val: &Path) -> Result<(u32, u32), String> {
    let out = Command::new(val)
        .arg("--version")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", val.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let v = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix('v'))
        .and_then(|v| v.split_once('.'))
        .and_then(|(y, m)| {
            let m: String = m.chars().take_while(char::is_ascii_digit).collect();
            Some((y.parse().ok()?, m.parse().ok()?))
        });
    v.ok_or_else(|| format!("{} --version printed no version: {text}", val.display()))
}

/// Runs the validator on `m`.
fn validate(val: &Path, m: &SpirvModule, k: &Kernel) -> Result<(), String> {
    m.validate(val).map_err(|why| {
        format!("spirv-val rejects `{}`:\n{why}\n{k}\n{}", k.name(), m.disassemble())
    })
}

fn kernel(src: &str) -> Kernel {
    parse_module(src).unwrap_or_else(|e| panic!("{e}\n{src}")).kernels.remove(0)
}

/// A kernel computing `d = a·b + c` on one tile of `shape`, with `a` and `b` in `la` and
/// `lb` layouts, read from (and `d` written to) global or local memory.
fn product(shape: &str, la: &str, lb: &str, lc: &str, local: bool) -> String {
    let n = if shape == "m16n8k16" { 8 } else { 16 };
    // Strides: the tile's row or column length, rounded up to the IR's 8 elements, plus 8.
    let (sa, sb, sc) = (24, if lb == "row" { n + 8 } else { 24 }, if lc == "row" { n } else { 16 });
    let frags = format!(
        "  let fa: frag<a, {shape}, f16> = frag_load(A, 8u32, {sa}u32, {la});
  let fb: frag<b, {shape}, f16> = frag_load(B, 0u32, {sb}u32, {lb});
  let fc: frag<acc, {shape}, f32> = frag_load(C, 0u32, {sc}u32, {lc});
  let z: frag<acc, {shape}, f32> = frag_fill(0.0f32);
  var acc: frag<acc, {shape}, f32> = z;
  let r: frag<acc, {shape}, f32> = mma(fa, fb, fc);
  acc = r;
  let h: frag<a, {shape}, f16> = frag_fill(1.5f16);
  let r2: frag<acc, {shape}, f32> = mma(h, fb, acc);
  acc = r2;
  frag_store(D, 0u32, {sc}u32, {lc}, acc);"
    );
    let params =
        "a: ptr<global, f16>, b: ptr<global, f16>, c: ptr<global, f32>, d: ptr<global, f32>";
    if !local {
        let body = frags.replace('A', "a").replace('B', "b").replace('C', "c").replace('D', "d");
        return format!("kernel mm_{shape}_{la}_{lb}_{lc}_global({params}) {{\n{body}\n}}\n");
    }
    let body = frags.replace('A', "sa").replace('B', "sb").replace('C', "sc").replace('D', "sd");
    format!(
        "kernel mm_{shape}_{la}_{lb}_{lc}_local({params}) {{
  local sa: f16[512];
  local sb: f16[512];
  local sc: f32[512];
  local sd: f32[512];
  let t: u32 = local_id(0);
  copy_async(sa, t * 8u32, a, t * 8u32, 8);
  async_commit();
  copy_async(sb, t * 8u32, b, t * 8u32, 8);
  copy_async(sc, t * 4u32, c, t * 4u32, 4);
  async_commit();
  async_wait(1);
  async_wait(0);
  barrier(local);
{body}
  barrier(local);
  for i: u32 in t .. 512u32 step 32u32 {{
    d[i] = sd[i];
  }}
}}
"
    )
}

/// Every form, as (kernel, source).
fn every_form() -> Vec<Kernel> {
    let mut out = Vec::new();
    for shape in ["m16n8k16", "m16n16k16"] {
        for (la, lb, lc) in [
            ("row", "row", "row"),
            ("row", "col", "col"),
            ("col", "row", "row"),
            ("col", "col", "col"),
        ] {
            for local in [false, true] {
                out.push(kernel(&product(shape, la, lb, lc, local)));
            }
        }
    }
    out
}

#[test]
fn every_matrix_form_validates() {
    let val = validator();
    let forms = every_form();
    assert_eq!(forms.len(), 16);
    for k in &forms {
        let m = emit(k, Flavour::Vulkan).unwrap_or_else(|e| panic!("{e}\n{k}"));
        let text = m.disassemble();
        for op in [
            "OpCapability CooperativeMatrixKHR",
            "OpExtension \"SPV_KHR_cooperative_matrix\"",
            "OpTypeCooperativeMatrixKHR",
            "OpCooperativeMatrixLoadKHR",
            "OpCooperativeMatrixMulAddKHR",
            "OpCooperativeMatrixStoreKHR",
            "OpCompositeConstruct",
        ] {
            assert!(text.contains(op), "`{}` has no {op}:\n{text}", k.name());
        }
        // Under the Vulkan memory model, shared memory accesses must be non-private for the
        // barriers to order them.
        for l in text.lines().filter(|l| l.contains("OpCooperativeMatrixLoadKHR")) {
            assert!(l.contains("NonPrivatePointer"), "`{}`: {l}", k.name());
        }
        if let Some(val) = &val {
            validate(val, &m, k).unwrap();
        }
    }
}

/// The types say which matrix each is: Subgroup scope (3), the tile's rows and columns, and
/// the use (MatrixAKHR 0, MatrixBKHR 1, MatrixAccumulatorKHR 2).
#[test]
fn fragment_types_are_the_tiles() {
    let k = kernel(&product("m16n8k16", "row", "col", "row", false));
    let m = emit(&k, Flavour::Vulkan).unwrap();
    // rspirv's loader does not know the type: read the instructions as they come.
    let insts = instructions(&m.words);
    let constant = |id: u32| -> u32 {
        let c = insts.iter().find(|i| i.result_id == Some(id)).unwrap();
        match c.operands[0] {
            rspirv::dr::Operand::LiteralBit32(v) => v,
            ref o => panic!("{o:?}"),
        }
    };
    let mut tiles: Vec<(u32, u32, u32, u32)> = insts
        .iter()
        .filter(|i| i.class.opcode == rspirv::spirv::Op::TypeCooperativeMatrixKHR)
        .map(|i| {
            let id = |n: usize| match i.operands[n] {
                rspirv::dr::Operand::IdRef(id) | rspirv::dr::Operand::IdScope(id) => constant(id),
                ref o => panic!("{o:?}"),
            };
            (id(1), id(2), id(3), id(4))
        })
        .collect();
    tiles.sort();
    assert_eq!(tiles, [(3, 16, 8, 1), (3, 16, 8, 2), (3, 16, 16, 0)]);
}

/// The module's instructions in order.
fn instructions(words: &[u32]) -> Vec<rspirv::dr::Instruction> {
    use rspirv::binary::{Consumer, ParseAction};
    struct All(Vec<rspirv::dr::Instruction>);
    impl Consumer for All {
        fn initialize(&mut self) -> ParseAction {
            ParseAction::Continue
        }
        fn finalize(&mut self) -> ParseAction {
            ParseAction::Continue
        }
        fn consume_header(&mut self, _: rspirv::dr::ModuleHeader) -> ParseAction {
            ParseAction::Continue
        }
        fn consume_instruction(&mut self, inst: rspirv::dr::Instruction) -> ParseAction {
            self.0.push(inst);
            ParseAction::Continue
        }
    }
    let mut all = All(Vec::new());
    rspirv::binary::parse_words(words, &mut all).unwrap();
    all.0
}

#[test]
fn copy_async_is_a_plain_copy() {
    let k = kernel(&product("m16n8k16", "row", "row", "row", true));
    let m = emit(&k, Flavour::Vulkan).unwrap();
    let text = m.disassemble();
    // 8 + 8 + 4 elements: each a load of the source and a store into the local array.
    let stores = text
        .lines()
        .filter(|l| l.trim_start().starts_with("OpStore") && l.contains("NonPrivatePointer"))
        .count();
    assert!(stores >= 20, "{stores} stores:\n{text}");
    // Each 16-byte copy reads its source with one load of a vector of four u32 (bitcast to
    // the elements), so the loads of shared memory are those three and the final loop's.
    let loads =
        text.lines().filter(|l| l.contains("= OpLoad") && l.contains("NonPrivatePointer")).count();
    assert_eq!(loads, 4, "{text}");
    assert!(text.contains("OpBitcast"), "{text}");
    // Nothing waits: commits and waits emit no instruction (no barrier beyond the IR's two
    // and the local arrays' zeroing).
    assert_eq!(text.matches("OpControlBarrier").count(), 3, "{text}");
}

/// A copy pipeline without fragments declares no cooperative-matrix capability, so that
/// devices without the extension run it.
#[test]
fn copies_alone_need_no_cooperative_matrices() {
    let k = kernel(
        "kernel cp(a: ptr<global, f32>, d: ptr<global, f32>) {
  local s: f32[128];
  let t: u32 = local_id(0);
  copy_async(s, t * 4u32, a, t * 4u32, 4);
  async_commit();
  async_wait(0);
  barrier(local);
  d[t] = s[127u32 - t];
}",
    );
    let m = emit(&k, Flavour::Vulkan).unwrap();
    assert!(!m.disassemble().contains("CooperativeMatrix"), "{}", m.disassemble());
    if let Some(val) = validator() {
        validate(&val, &m, &k).unwrap();
    }
}

#[test]
fn what_is_not_lowered_is_refused_by_name() {
    let bf16 = "kernel k(a: ptr<global, bf16>, d: ptr<global, f32>) {
  let fa: frag<a, m16n8k16, bf16> = frag_load(a, 0u32, 16u32, row);
  let fb: frag<b, m16n8k16, bf16> = frag_load(a, 0u32, 8u32, col);
  let c: frag<acc, m16n8k16, f32> = frag_fill(0.0f32);
  let r: frag<acc, m16n8k16, f32> = mma(fa, fb, c);
  frag_store(d, 0u32, 8u32, row, r);
}";
    let e = emit(&kernel(bf16), Flavour::Vulkan).unwrap_err().to_string();
    assert!(e.contains("bf16 is not yet emitted for SPIR-V (it needs SPV_KHR_bfloat16)"), "{e}");

    let f16 = product("m16n8k16", "row", "col", "row", false);
    let e = emit(&kernel(&f16), Flavour::OpenCl).unwrap_err().to_string();
    assert!(e.contains("matrix operations are emitted for the Vulkan flavour only"), "{e}");
}
