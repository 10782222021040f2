//! Private arrays at indices that are not constants on the 8-lane code
//! (backends/src/x86/spmd/privindex.rs): a batch-uniform index as one frame row, a small
//! array (at most 8 rows) at per-lane indices read by a select over its rows and written
//! by a blend into them, a larger one gathered and stored per lane with the inactive
//! lanes' stores sent to a sink element. The interpreter, the scalar code and the 8-lane
//! code agree bit for bit, faults included: every element type, arrays read before they
//! are written, loops that write through per-lane indices under divergent control, two
//! and three arrays in one kernel, indices out of bounds (per lane, uniform, negative) in
//! later batches, under a mask where only inactive lanes are out of bounds, odd sizes and
//! partial batches.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, f32s, kernel, vals, vector_listing};

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::Scalar;

/// The seventh held-out set's `sort8` (an insertion sort of a `private w: f32[8]`).
fn sort8() -> kiln_ir::Kernel {
    let m = kiln_ir::parse_module(include_str!("../benches/cpu_suite_seventh.kir")).unwrap();
    m.kernels.iter().find(|k| k.name() == "sort8").expect("sort8").clone()
}

/// The vector listing of `k`, or `None` (with the skip reported) without AVX2.
fn listing(k: &kiln_ir::Kernel) -> Option<Vec<String>> {
    if !avx2() {
        kiln_ir::testing::skip("no AVX2: no 8-lane code to inspect");
        return None;
    }
    Some(vector_listing(k))
}

/// True if the listing has a select's step: an index compare, then a blend of a frame
/// row into a register under it.
fn has_select(lines: &[String]) -> bool {
    lines.windows(2).any(|w| {
        let ops: Vec<&str> = w[1].split([' ', ',']).collect();
        w[0].starts_with("vpcmpeq")
            && (ops[0] == "vblendvps" || ops[0] == "vblendvpd")
            && ops[1] == ops[2]
            && ops[3].starts_with("[r15+")
    })
}

/// True if the listing has a blend's step: the value (`ymm0` or `ymm1`) blended into a
/// row loaded into `ymm4` (32-bit elements) or `ymm5` (64-bit).
fn has_blend(lines: &[String]) -> bool {
    ["vblendvps ymm4,ymm4,ymm0,ymm3", "vblendvpd ymm5,ymm5,ymm0,ymm4"]
        .iter()
        .any(|b| lines.iter().any(|l| l == b))
}

/// True if the listing gathers from the vector frame (a private array's old form).
fn gathers_frame(lines: &[String]) -> bool {
    let frame = |l: &str| l.contains("[r15+ymm") || l.contains("[r15+xmm");
    lines.iter().any(|l| l.starts_with("vgather") && frame(l))
}

/// True if the listing has a per-lane store to the frame at an index in `r10`.
fn stores_lanes(lines: &[String]) -> bool {
    lines
        .iter()
        .any(|l| l.contains("[r15+r10*") && (l.starts_with("vmov") || l.starts_with("vextractps")))
}

/// True if the listing tests a lane mask bit by bit (the tested per-lane stores).
fn tests_lanes(lines: &[String]) -> bool {
    lines.iter().any(|l| l == "test eax,80h")
}

/// Runs `k(a, c, n)` (`a` u32 indices or data, `c` of `ty`) over sizes with partial
/// batches and `a` from `a_of(i)`; returns how many of the runs fault.
fn run_cases(k: &kiln_ir::Kernel, ty: Scalar, a_of: &dyn Fn(u32) -> u32, what: &str) -> usize {
    let mut faults = 0;
    for (n, global) in [(1u32, 8u32), (13, 16), (37, 40), (61, 64)] {
        let a: Vec<u32> = (0..n).map(a_of).collect();
        let r = NdRange::new(&[global]).with_local(&[8]);
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
        let bufs = [Buffer::from_slice(&a), vals(ty, n as usize, 3)];
        agree(k, &r, &args, &bufs, &format!("{what}\nn {n}"));
        faults += usize::from(kiln_ir::interp::run(k, &r, &args, &mut bufs.to_vec()).is_err());
    }
    faults
}

/// The kernel `k(a: u32s, c: ty, n)` with `body` under the guard `i < n`.
fn guarded(ty: &str, body: &str) -> kiln_ir::Kernel {
    kernel(&format!(
        "kernel k(a: ptr<global, u32>, c: ptr<global, {ty}>, n: u32) {{
           let i: u32 = global_id(0);
           if i < n {{ {body} }}
         }}"
    ))
}

const TYPES: [(&str, Scalar); 10] = [
    ("f32", Scalar::F32),
    ("i32", Scalar::I32),
    ("u32", Scalar::U32),
    ("f64", Scalar::F64),
    ("i64", Scalar::I64),
    ("u64", Scalar::U64),
    ("u8", Scalar::U8),
    ("i8", Scalar::I8),
    ("u16", Scalar::U16),
    ("i16", Scalar::I16),
];

/// sort8 as the suite runs it (guarded, odd sizes, ties, x one short of the windows'
/// reach: no fault, `min(i + k, n - 1)` stays in bounds), and its listing: the window's
/// reads and writes at `j` are selects and blends, `w[k]` at the uniform counter a row.
#[test]
fn sort8_agrees() {
    let k = sort8();
    for (n, global) in [(1u32, 64u32), (8, 64), (63, 64), (100, 128), (300, 320)] {
        let r = NdRange::new(&[global]).with_local(&[64]);
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
        for seed in [1, 4] {
            let bufs = [f32s(n as usize, seed), Buffer::zeroed(Scalar::F32, n as usize)];
            agree(&k, &r, &args, &bufs, &format!("sort8 n {n} seed {seed}"));
        }
        // A buffer too short for the windows' reach: the interpreter's fault.
        let bufs = [f32s(n as usize - 1, 2), Buffer::zeroed(Scalar::F32, n as usize)];
        agree(&k, &r, &args, &bufs, &format!("sort8 n {n}, x short"));
    }
    let Some(lines) = listing(&k) else { return };
    let text = lines.join("\n");
    assert!(has_select(&lines) && has_blend(&lines), "{text}");
    assert!(!gathers_frame(&lines) && !stores_lanes(&lines), "{text}");
    assert!(lines.iter().any(|l| l.starts_with("vmovups ymm0,[r15+rax+")), "{text}");
}

/// Every element type, small (select and blend) and larger (gather and sink stores)
/// arrays: read before written (zero), written through per-lane indices in a loop under
/// divergent control, read at per-lane and at uniform indices, written at a uniform one.
#[test]
fn element_types_agree() {
    for (ty, scalar) in TYPES {
        let wide = matches!(scalar, Scalar::F64 | Scalar::I64 | Scalar::U64);
        let small = if wide { [1u32, 3, 4] } else { [1, 5, 8] };
        for len in small.into_iter().chain([if wide { 5 } else { 9 }, 24]) {
            let body = format!(
                "private w: {ty}[{len}];
                 let s: u32 = a[i];
                 var acc: {ty} = w[s % {len}u32] + (1u32 as {ty});
                 for t: u32 in 0 .. 20 {{
                   let j: u32 = (s + t * 7u32) % {len}u32;
                   if ((s >> (t & 7u32)) & 1u32) == 1u32 {{
                     w[j] = w[(j + 1u32) % {len}u32] + (t as {ty});
                   }} else {{
                     acc = acc * (3u32 as {ty}) + w[(s ^ t) % {len}u32];
                   }}
                   if t == 9u32 {{ w[t % {len}u32] = acc; }}
                 }}
                 for t: u32 in 0 .. 17 {{ acc = acc * (3u32 as {ty}) - w[t % {len}u32]; }}
                 c[i] = acc;"
            );
            let k = guarded(ty, &body);
            run_cases(&k, scalar, &|i| i.wrapping_mul(2654435761) >> 7, &body);
            let Some(lines) = listing(&k) else { continue };
            let text = lines.join("\n");
            if len * if wide { 2 } else { 1 } <= 8 {
                // (One element: no blend to select it.)
                assert!(len == 1 || has_select(&lines), "{body}\n{text}");
                assert!(has_blend(&lines), "{body}\n{text}");
                assert!(!gathers_frame(&lines) && !stores_lanes(&lines), "{body}\n{text}");
            } else {
                assert!(gathers_frame(&lines) && stores_lanes(&lines), "{body}\n{text}");
                assert!(!tests_lanes(&lines), "{body}\n{text}");
            }
            // The uniform indices' rows.
            assert!(lines.iter().any(|l| l.contains("[r15+rax+")), "{body}\n{text}");
        }
    }
}

/// Indices out of bounds: per lane (a store, a load, negative `i32`), uniform (a store
/// and a load), in later batches and in a lane after others stored; under a mask where
/// only inactive lanes are out of bounds (no fault), for small and larger arrays of 32-
/// and 64-bit elements.
#[test]
fn faults_agree() {
    let bodies = [
        // A per-lane store past the end where `a[i]` says (work-item 29 and up).
        "private w: T[L]; w[a[i] % 7u32] = (1u32 as T);
         if i > 28u32 { w[a[i]] = (2u32 as T); }
         c[i] = w[a[i] % 7u32] + w[0];",
        // A per-lane load past the end.
        "private w: T[L]; w[i % 5u32] = (3u32 as T); c[i] = w[(a[i] >> 2u32) + i / 5u32];",
        // A negative i32 index in one lane.
        "private w: T[L]; let j: i32 = (a[i] % 5u32) as i32 - (if_neg);
         w[a[i] % 3u32] = (4u32 as T); c[i] = w[j];",
        // A uniform index past the end (a parameter-made one), in a divergent branch.
        "private w: T[L]; if (a[i] & 1u32) == 1u32 { w[n / 5u32 + 1u32] = (5u32 as T); }
         c[i] = w[1];",
        "private w: T[L]; var x: T = (1u32 as T);
         if (a[i] & 2u32) == 2u32 { x = w[n / 5u32 + 1u32]; } c[i] = x;",
        // Out of bounds only in lanes a mask leaves inactive: no fault.
        "private w: T[L]; let j: u32 = a[i] % 11u32;
         if j < L { w[j] = (6u32 as T); c[i] = w[j] + w[(j + 1u32) % L]; }",
        // A loop that writes down the array until its index runs off the start.
        "private w: T[L]; var j: i32 = (a[i] % 9u32) as i32 - 1i32; var m: bool = true;
         while m { if j > -3i32 { w[j] = (j as T); j = j - 1i32; } else { m = false; } }
         c[i] = w[0];",
    ];
    for (ty, scalar) in [("f32", Scalar::F32), ("u16", Scalar::U16), ("i64", Scalar::I64)] {
        let wide = scalar == Scalar::I64;
        for len in [if wide { 4u32 } else { 8 }, 12] {
            for (b, body) in bodies.iter().enumerate() {
                // The negative index only in the lanes with a[i] % 5 == 0 and i odd.
                let body = body
                    .replace("(if_neg)", "((i & 1u32) * 2u32) as i32")
                    .replace("T[L]", &format!("{ty}[{len}]"))
                    .replace("j < L", &format!("j < {len}u32"))
                    .replace("% L", &format!("% {len}u32"))
                    .replace("as T", &format!("as {ty}"))
                    .replace(": T", &format!(": {ty}"));
                let k = guarded(ty, &body);
                let faults = run_cases(&k, scalar, &|i| (i * 5 + 3) % 13, &body);
                // Each body faults in some case but the masked one, which never does.
                assert_eq!(faults == 0, b == 5, "{faults} faults\n{body}");
            }
        }
    }
}

/// Two and three arrays in one kernel (select-sized and larger, 32- and 64-bit), their
/// accesses interleaved at per-lane and uniform indices: each keeps its own elements.
#[test]
fn several_arrays_agree() {
    let body = "private w: f32[8]; private d: u64[3]; private big: i32[20];
       let s: u32 = a[i];
       for t: u32 in 0 .. 24 {
         let j: u32 = (s * 3u32 + t) % 8u32;
         w[j] = w[(j + 5u32) % 8u32] + (t as f32) * 0.5;
         d[(s + t) % 3u32] = d[t % 3u32] * 3u64 + (w[j] as u64);
         big[(s ^ t) % 20u32] = big[(t * 7u32) % 20u32] - (d[s % 3u32] as i32);
       }
       c[i] = w[s % 8u32] + (big[(s + 1u32) % 20u32] as f32) + (d[2] as f32);";
    let k = guarded("f32", body);
    run_cases(&k, Scalar::F32, &|i| i.wrapping_mul(40503) >> 3, body);
    if let Some(lines) = listing(&k) {
        let text = lines.join("\n");
        assert!(has_select(&lines) && has_blend(&lines), "{text}");
        assert!(gathers_frame(&lines) && stores_lanes(&lines), "{text}");
    }
}
