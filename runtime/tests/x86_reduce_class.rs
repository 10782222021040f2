//! Tree reductions in local memory on the region-loop code (backends/src/x86/spmd/): the
//! class of `examples/reduce.kir` (strides from a constant or from `local_size(0) / 2`,
//! groups of 32 to 256, f32/i32/u32 with `+`, `max` and `min`, guarded loads at lengths
//! that are not multiples of the group) agrees with the interpreter, results and errors.
//! Covers the code paths of the reduction's per-group cost: constant lane masks filled
//! once per call, uniform stores under a known mask from its last lane, uniform indices in
//! a general-purpose register (faults included), one-batch rounds that compute no id
//! lanes, and the local block left unzeroed where the first region overwrites it (and
//! zeroed where it does not).
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{avx2, kernel, three_ways, vals};

use kiln_backends::x86::{compile, X86Options};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{Kernel, Scalar};

/// A tree reduction of `ty` by `op` (`+`, `max`, `min`) over groups of `local`: `fixed`
/// fixes the group's size and starts the stride at the constant `local / 2`; otherwise it
/// starts at `local_size(0) / 2`.
fn reduction(ty: &str, op: &str, local: u32, fixed: bool) -> Kernel {
    let attr = if fixed { format!(" #reqd_work_group_size({local}, 1, 1)") } else { String::new() };
    let start = if fixed { format!("{}u32", local / 2) } else { "local_size(0) / 2u32".into() };
    let zero = if ty == "f32" { "0.0".to_string() } else { format!("0{ty}") };
    let combine = match op {
        "+" => "tile[lid] + tile[lid + stride]".to_string(),
        f => format!("{f}(tile[lid], tile[lid + stride])"),
    };
    kernel(&format!(
        "kernel r(x: ptr<global, {ty}>, partial: ptr<global, {ty}>, n: u32){attr} {{
          local tile: {ty}[{local}];
          let gid: u32 = global_id(0);
          let lid: u32 = local_id(0);
          if gid < n {{ tile[lid] = x[gid]; }} else {{ tile[lid] = {zero}; }}
          barrier(local);
          var stride: u32 = {start};
          while stride > 0u32 {{
            if lid < stride {{ tile[lid] = {combine}; }}
            barrier(local);
            stride = stride / 2u32;
          }}
          if lid == 0u32 {{ partial[group_id(0)] = tile[0]; }}
        }}"
    ))
}

fn scalar_of(ty: &str) -> Scalar {
    match ty {
        "f32" => Scalar::F32,
        "i32" => Scalar::I32,
        _ => Scalar::U32,
    }
}

/// Runs `k` three ways over `n` elements (groups of `local`, the launch rounded up to
/// whole groups; `x` holding `len` elements, so a shorter one faults) and requires vector
/// code where AVX2 is there.
fn run_reduction(k: &Kernel, ty: &str, local: u32, n: u32, len: u32) {
    let groups = n.div_ceil(local).max(1);
    let s = scalar_of(ty);
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
    let bufs = [vals(s, len as usize, n), Buffer::zeroed(s, groups as usize)];
    let r = NdRange::new(&[groups * local]).with_local(&[local]);
    assert_eq!(three_ways(k, &r, &args, &bufs), avx2(), "{ty} n={n} local={local}\n{k}");
}

#[test]
fn reductions_of_every_kind_agree() {
    for local in [32, 64, 128, 256] {
        for fixed in [true, false] {
            for (ty, op) in [("f32", "+"), ("f32", "max"), ("i32", "min"), ("u32", "+")] {
                let k = reduction(ty, op, local, fixed);
                for n in [1, local - 1, local, 3 * local + 5, 17 * local] {
                    run_reduction(&k, ty, local, n, n);
                }
            }
        }
    }
    for (ty, op) in [("i32", "+"), ("i32", "max"), ("u32", "min"), ("f32", "min")] {
        run_reduction(&reduction(ty, op, 64, true), ty, 64, 1000, 1000);
    }
}

/// Without the guard's else (`n` past `x`'s end) the first region's loads fault: the
/// interpreter's work-item and message, in the first group and in a later one.
#[test]
fn faults_in_the_first_region_agree() {
    for local in [32, 64, 256] {
        let k = reduction("f32", "+", local, true);
        for (n, len) in [(4 * local, 4 * local - 3), (local, 5), (3 * local, 2 * local)] {
            run_reduction(&k, "f32", local, n, len);
        }
    }
}

/// The last region's store at `group_id(0)` (a uniform index in a general-purpose
/// register) past `partial`'s end, and a uniform load past `x`'s end in a one-batch round
/// under a constant mask: the interpreter's error, with the rounds before it run.
#[test]
fn uniform_accesses_that_fault_in_rounds_agree() {
    let k = reduction("f32", "+", 64, true);
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(640u32)];
    let r = NdRange::new(&[640]).with_local(&[64]);
    for parts in [10, 9, 3, 0] {
        let bufs = [vals(Scalar::F32, 640, 3), Buffer::zeroed(Scalar::F32, parts)];
        assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "{parts} partial sums");
    }
    let k = kernel(
        "kernel u(x: ptr<global, f32>, out: ptr<global, f32>, m: u32) #reqd_work_group_size(64, 1, 1) {
          local tile: f32[64];
          let lid: u32 = local_id(0);
          tile[lid] = x[global_id(0)];
          barrier(local);
          if lid < 4u32 { tile[lid] = tile[lid] + x[group_id(0) * m]; }
          barrier(local);
          if lid < 2u32 { out[group_id(0) + lid] = tile[lid]; }
        }",
    );
    for m in [0u32, 1, 64, 100, 200] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(m)];
        let bufs = [vals(Scalar::F32, 256, m), Buffer::zeroed(Scalar::F32, 5)];
        let r = NdRange::new(&[256]).with_local(&[64]);
        assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "m={m}");
    }
}

/// A store at a uniform index under a constant mask of the group's first batch keeps the
/// last active lane's value, whichever lane that is (lanes 0 to 7, from lane 0 or later),
/// as the interpreter's last work-item wins; its index of `group_id(0)` plus a parameter
/// faults past the end.
#[test]
fn uniform_stores_under_known_masks_keep_the_last_lane() {
    for (lo, hi) in [(0, 1), (0, 2), (0, 3), (1, 4), (0, 5), (2, 6), (3, 7), (0, 8), (5, 6)] {
        let k = kernel(&format!(
            "kernel s(x: ptr<global, i32>, out: ptr<global, i32>, o: u32) #reqd_work_group_size(32, 1, 1) {{
              local tile: i32[32];
              let lid: u32 = local_id(0);
              tile[lid] = x[global_id(0)] * 3i32;
              barrier(local);
              if lid >= {lo}u32 && lid < {hi}u32 {{ out[group_id(0) + o] = tile[lid] + 1i32; }}
            }}"
        ));
        for (o, len) in [(0u32, 4usize), (1, 5), (2, 4)] {
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(o)];
            let bufs = [vals(Scalar::I32, 128, o), Buffer::zeroed(Scalar::I32, len)];
            let r = NdRange::new(&[128]).with_local(&[32]);
            assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "[{lo}, {hi}) o={o}");
        }
    }
}

/// Local arrays start zeroed in every group: a first region that leaves elements unstored
/// (an `if` without `else`, an array longer than the group, a store elsewhere than
/// `local_id(0)`, a load before the barrier, a second array it does not store) keeps the
/// zeroing between the groups of a call; the reduction's, which stores every element,
/// does not need it (the results agree either way).
#[test]
fn local_blocks_zeroed_unless_overwritten_agree() {
    let shapes = [
        ("if gid < n { tile[lid] = x[gid]; }", "f32[64]", ""),
        ("tile[lid] = x[gid];", "f32[128]", ""),
        ("tile[63u32 - lid] = x[gid]; tile[lid & 31u32] = 1.0;", "f32[64]", ""),
        ("tile[lid] = x[gid] + tile[(lid + 1u32) & 63u32];", "f32[64]", ""),
        ("tile[lid] = x[gid];", "f32[64]", "local other: f32[64];"),
        ("if gid < n { tile[lid] = x[gid]; } else { tile[lid] = 2.0; }", "f32[64]", ""),
        ("tile[lid] = x[gid];", "f32[64]", "local other: f32[8];"),
    ];
    for (i, (first, ty, extra)) in shapes.into_iter().enumerate() {
        let k = kernel(&format!(
            "kernel z(x: ptr<global, f32>, out: ptr<global, f32>, n: u32) #reqd_work_group_size(64, 1, 1) {{
              local tile: {ty};
              {extra}
              let gid: u32 = global_id(0);
              let lid: u32 = local_id(0);
              {first}
              barrier(local);
              out[gid] = tile[lid] + tile[(lid + 5u32) & 63u32];
              if lid < 8u32 {{ out[gid] = out[gid] + {other}; }}
            }}",
            other = if extra.contains("other") { "other[lid]" } else { "0.0" }
        ));
        for n in [64u32, 100, 640] {
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
            let bufs = [vals(Scalar::F32, 640, i as u32), Buffer::zeroed(Scalar::F32, 640)];
            let r = NdRange::new(&[640]).with_local(&[64]);
            assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "shape {i} n={n}\n{k}");
        }
    }
}

/// The listing of the reduction's region code: no local zeroing between groups (its first
/// region stores every element), its one-batch rounds compute no lane mask and no id lanes
/// (the masks are constants of the call), and its last store takes lane 0's value with no
/// `bsr`. A kernel whose first region leaves elements unstored keeps the zeroing.
#[test]
fn reduction_group_code_has_no_per_group_overhead() {
    if !avx2() {
        return kiln_ir::testing::skip("region loops need AVX2, which this CPU lacks");
    }
    let reduce = kiln_ir::parse_module(include_str!("../../examples/reduce.kir")).unwrap();
    for optimize in [false, true] {
        let p =
            compile(&reduce.kernels[0], &X86Options { optimize, ..X86Options::default() }).unwrap();
        let text = p.disassemble();
        let regions = &text[text.find("; 8-lane region loops").expect("region code")..];
        // The group's end: from the loop count's decrement to the jump back.
        let end = &regions[regions.find("dec qword ptr").expect("the group loop")..];
        let end = &end[..end.find("jmp ").expect("the jump back")];
        assert!(!end.contains("vmovups [r10"), "optimize {optimize}: zeroing\n{end}");
        // The rounds, from the first addition to the load of `tile[0]`: no lane mask is
        // computed, no id lane either, and the values of the rounds of at most 8 lanes come
        // from registers (a lane extraction, byte shifts), not through memory.
        let rounds = &regions[regions.find("vaddps").expect("the rounds")..];
        let rounds = &rounds[..rounds.find("vbroadcastss").expect("tile[0]'s load")];
        for absent in ["vpcmpgtd", "ymm15", "ymm14", "xmm0,[rdx", "xmm1,[rdx"] {
            assert!(!rounds.contains(absent), "optimize {optimize}: {absent}\n{rounds}");
        }
        for present in ["vextractf128 xmm1,ymm", "vpsrldq xmm1,xmm", "vmovss [rdx],xmm0"] {
            assert!(rounds.contains(present), "optimize {optimize}: {present}\n{rounds}");
        }
        // The last store takes lane 0's value (the mask is known), with no `bsr` first.
        let last = &regions[regions.find("vbroadcastss").expect("tile[0]'s load")..];
        let last = &last[..last.find("jmp ").expect("the store's end")];
        assert!(last.contains("vmovd r11d,xmm0") && !last.contains("bsr"), "{last}");
        // The group's loads of `x` are prefetched ahead.
        assert!(regions.contains("prefetcht0 ["), "optimize {optimize}\n{regions}");
    }
    let k = kernel(
        "kernel z(x: ptr<global, f32>, out: ptr<global, f32>, n: u32) #reqd_work_group_size(64, 1, 1) {
          local tile: f32[64];
          let lid: u32 = local_id(0);
          if global_id(0) < n { tile[lid] = x[global_id(0)]; }
          barrier(local);
          out[global_id(0)] = tile[lid];
        }",
    );
    let text = compile(&k, &X86Options::default()).unwrap().disassemble();
    let regions = &text[text.find("; 8-lane region loops").expect("region code")..];
    let end = &regions[regions.find("dec qword ptr").expect("the group loop")..];
    assert!(end.contains("vmovups [r10"), "{end}");
}

/// Values stored at constant displacements are forwarded in registers to later rounds'
/// loads (`forward.rs`); a store to the array in another form in between (at `lid` plus a
/// value the code computes, a masked one, a narrow-typed array's) leaves later loads to read
/// memory: the rounds see the values the second store wrote, as the interpreter does.
#[test]
fn stores_between_forwarded_rounds_agree() {
    let bodies = [
        "tile[lid] = tile[lid] + tile[lid + stride]; tile[lid + (n - n)] = tile[lid] * 2.0;",
        "tile[lid] = tile[lid] + tile[lid + stride]; if lid == 1u32 { tile[lid] = 5.0; }",
        "tile[lid] = tile[lid] + tile[lid + stride]; tile[lid + (n & 0u32)] = tile[lid] - 1.0;",
    ];
    for body in bodies {
        let k = kernel(&format!(
            "kernel f(x: ptr<global, f32>, partial: ptr<global, f32>, n: u32) #reqd_work_group_size(64, 1, 1) {{
              local tile: f32[64];
              let gid: u32 = global_id(0);
              let lid: u32 = local_id(0);
              if gid < n {{ tile[lid] = x[gid]; }} else {{ tile[lid] = 0.0; }}
              barrier(local);
              var stride: u32 = 32u32;
              while stride > 0u32 {{
                if lid < stride {{ {body} }}
                barrier(local);
                stride = stride / 2u32;
              }}
              if lid < 3u32 {{ partial[group_id(0) * 3u32 + lid] = tile[lid]; }}
            }}"
        ));
        for n in [640u32, 600] {
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
            let bufs = [vals(Scalar::F32, 640, n), Buffer::zeroed(Scalar::F32, 30)];
            let r = NdRange::new(&[640]).with_local(&[64]);
            assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "{body} n={n}\n{k}");
        }
    }
}
