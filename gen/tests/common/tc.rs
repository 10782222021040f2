//! Shared helpers of the tensor-core tests: small inputs exact in f16 and bf16, buffers and
//! rounding in the 16-bit types, and ptxas (sm_80) on a kernel's mma.sync PTX.

use half::{bf16, f16};
use kiln_ir::launch::Buffer;
use kiln_ir::testing::tool;
use kiln_ir::{Kernel, Scalar};

/// Deterministic small values exact in f16 and bf16 (multiples of 1/8 in [-2, 2)).
pub fn vals(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % 32) as f32 / 8.0 - 2.0
        })
        .collect()
}

/// A buffer of element type `ty` (f32, f16 or bf16) holding `v` rounded to it.
pub fn buffer(ty: Scalar, v: &[f32]) -> Buffer {
    match ty {
        Scalar::F32 => Buffer::from_slice(v),
        Scalar::F16 => Buffer::from_slice(&v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>()),
        Scalar::BF16 => {
            Buffer::from_slice(&v.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>())
        }
        t => panic!("type {t}"),
    }
}

/// `x` rounded to `ty` (f32, f16 or bf16), as an f32.
pub fn round(ty: Scalar, x: f32) -> f32 {
    match ty {
        Scalar::F32 => x,
        Scalar::F16 => f16::from_f32(x).to_f32(),
        Scalar::BF16 => bf16::from_f32(x).to_f32(),
        t => panic!("type {t}"),
    }
}

/// The elements of an f32, f16 or bf16 buffer as f32.
pub fn to_f32(b: &Buffer) -> Vec<f32> {
    match b.elem() {
        Scalar::F32 => b.to_vec::<f32>().unwrap(),
        Scalar::F16 => b.to_vec::<f16>().unwrap().into_iter().map(f16::to_f32).collect(),
        Scalar::BF16 => b.to_vec::<bf16>().unwrap().into_iter().map(bf16::to_f32).collect(),
        t => panic!("type {t}"),
    }
}

/// Emits the kernel's PTX for sm_80, checks that it uses mma.sync m16n8k16 and, where
/// `KILN_PTXAS` is set, that ptxas assembles it (files under a temporary `kiln-<tag>-<pid>`).
pub fn assemble_mma_sm80(kernel: &Kernel, tag: &str) {
    if let Some(ptxas) = tool("KILN_PTXAS") {
        let ptx = kiln_backends::ptx::emit_kernel(kernel, &kiln_backends::ptx::Options::sm(80))
            .unwrap_or_else(|e| panic!("ptx: {e}"));
        assert!(ptx.contains("mma.sync.aligned.m16n8k16"), "{ptx}");
        let dir = std::env::temp_dir().join(format!("kiln-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join(format!("{}.ptx", kernel.name()));
        std::fs::write(&f, &ptx).unwrap();
        let out = std::process::Command::new(ptxas)
            .arg("-arch=sm_80")
            .arg(&f)
            .arg("-o")
            .arg(f.with_extension("cubin"))
            .output()
            .expect("run ptxas");
        assert!(out.status.success(), "ptxas: {}", String::from_utf8_lossy(&out.stderr));
    }
}
