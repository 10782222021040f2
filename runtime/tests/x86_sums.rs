//! Buffers summed per thread (backends/src/x86/sums.rs): which parameters a launch on
//! several threads gives each thread a copy of (reached only through integer
//! `atomic_add`/`atomic_sub` whose results are unused), and that launches split over
//! threads give the interpreter's buffers with them: histograms of local and global
//! counts, additions and subtractions, `i32` and `u32`, beside a buffer atomics reach that
//! is not summed, with the summed buffer passed twice (aliasing: not summed), and with
//! copies that would cost more than the launch.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::kernel;

use kiln_backends::x86::{compile, X86Options, X86Program};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::testing::results_match;
use kiln_ir::Scalar;
use kiln_runtime::device::cpu::{CpuRun, CpuRunOptions};

fn summed(src: &str) -> Vec<usize> {
    let k = kernel(src);
    compile(&k, &X86Options::default()).unwrap().summed_params().to_vec()
}

#[test]
fn which_buffers_are_summed_per_thread() {
    let suite = kiln_ir::parse_module(include_str!("../../runtime/benches/cpu_suite.kir")).unwrap();
    let hist = suite.kernels.iter().find(|k| k.name() == "histogram").unwrap();
    let p = compile(hist, &X86Options::default()).unwrap();
    assert_eq!(p.summed_params(), &[1], "histogram's `hist`");
    // A program loaded from its image (the cpu device's way) has no body to look at: the
    // image carries them.
    let loaded = X86Program::from_image(hist, &p.to_image().unwrap()).unwrap();
    assert_eq!(loaded.summed_params(), &[1], "histogram's `hist`, loaded");
    if x86_common::avx2() {
        // The suite's histogram, as built with -O, counts straight into `hist`.
        let o = X86Options { optimize: true, ..X86Options::default() };
        assert_eq!(compile(hist, &o).unwrap().counts_into(), Some(1));
        assert_eq!(loaded.counts_into(), p.counts_into());
    }
    let head = "kernel k(d: ptr<global, u32>, h: ptr<global, u32>, f: ptr<global, f32>, i: ptr<global, i32>) {";
    for (body, want) in [
        ("atomic_add(h, d[global_id(0)] & 7u32, 1u32); atomic_sub(i, 3, 2);", vec![1, 3]),
        ("atomic_sub(h, 0u32, d[global_id(0)]);", vec![1]),
        // Read back, a result used, another kind, a float, a store, a plain load.
        ("atomic_add(h, 0u32, 1u32); d[global_id(0)] = h[1];", vec![]),
        ("let o: u32 = atomic_add(h, 0u32, 1u32); d[global_id(0)] = o;", vec![]),
        ("atomic_add(h, 0u32, 1u32); atomic_max(h, 1u32, 5u32);", vec![]),
        ("atomic_add(f, 0u32, 1.0); atomic_add(h, 1u32, 1u32);", vec![1]),
        ("atomic_add(h, 0u32, 1u32); h[2] = 7u32;", vec![]),
        ("d[global_id(0)] = 1u32;", vec![]),
    ] {
        assert_eq!(summed(&format!("{head} {body} }}")), want, "{body}");
    }
}

/// The interpreter's buffers, and the same launch's on `threads` threads.
fn agree(src: &str, n: u32, local: u32, args: &[Arg], bufs: &[Buffer]) {
    let k = kernel(src);
    let r = NdRange::new(&[n]).with_local(&[local]);
    let mut want = bufs.to_vec();
    kiln_ir::interp::run(&k, &r, args, &mut want).unwrap();
    for opts in [X86Options::default(), X86Options { scalar: true, ..X86Options::default() }] {
        let built = compile(&k, &opts).unwrap();
        let loaded = X86Program::from_image(&k, &built.to_image().unwrap()).unwrap();
        for (p, threads) in [(&built, 1usize), (&built, 2), (&loaded, 3), (&built, 4)] {
            let mut got = bufs.to_vec();
            p.run_parallel(&r, args, &mut got, threads, &CpuRunOptions::default()).unwrap();
            if let Err(m) = results_match(&want, &got) {
                panic!("{m}\n{threads} threads\n{k}");
            }
        }
    }
}

#[test]
fn summed_buffers_agree_on_threads() {
    let n: u32 = 3 * 4096 + 512;
    let data: Vec<u32> = (0..n).map(|i| i.wrapping_mul(0x9e37_79b9) ^ (i >> 3)).collect();
    // Starting values, so that the copies add to what is there (and wrap).
    let hist: Vec<u32> = (0..256u32).map(|i| i.wrapping_mul(0x0101_0101) ^ 0xffff_ff00).collect();
    let signed: Vec<i32> = (0..64).map(|i| i * 1_000_003 - 40_000_000).collect();
    let histogram = "kernel k(data: ptr<global, u32>, hist: ptr<global, u32>, s: ptr<global, i32>, n: u32) #reqd_work_group_size(256, 1, 1) {
           local bins: u32[256];
           let lid: u32 = local_id(0);
           bins[lid] = 0u32;
           barrier(local);
           let i: u32 = global_id(0);
           if i < n {
             atomic_add(bins, data[i] & 255u32, 1u32);
             atomic_sub(s, (data[i] >> 8u32) & 63u32, (data[i] & 1023u32) as i32 - 300);
           }
           barrier(local);
           atomic_add(hist, lid, bins[lid]);
           atomic_sub(hist, (lid * 7u32) & 255u32, 3u32);
         }";
    let bufs = [Buffer::from_slice(&data), Buffer::from_slice(&hist), Buffer::from_slice(&signed)];
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(n - 100)];
    agree(histogram, n, 256, &args, &bufs);
    // Beside a buffer that atomics reach and that is read: that one stays shared (locked).
    let mixed =
        "kernel k(data: ptr<global, u32>, hist: ptr<global, u32>, t: ptr<global, u32>, n: u32) {
           let i: u32 = global_id(0);
           atomic_add(hist, data[i] & 255u32, data[i] >> 20u32);
           let old: u32 = atomic_add(t, 0u32, 1u32);
           data[i] = old * 0u32 + data[i] + 1u32;
         }";
    let bufs =
        [Buffer::from_slice(&data), Buffer::from_slice(&hist), Buffer::zeroed(Scalar::U32, 4)];
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(n)];
    agree(mixed, n, 64, &args, &bufs);
    // One buffer passed as both summed parameters: no copies.
    let twice = "kernel k(data: ptr<global, u32>, h: ptr<global, u32>, g: ptr<global, u32>) {
           let i: u32 = global_id(0);
           atomic_add(h, data[i] & 15u32, 1u32);
           atomic_add(g, (data[i] >> 4u32) & 15u32, 2u32);
         }";
    let bufs = [Buffer::from_slice(&data), Buffer::from_slice(&hist[..16])];
    agree(twice, n, 64, &[Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(1)], &bufs);
    // Copies of a buffer as long as the launch: not worth it, the shared path.
    let wide: Vec<u32> = (0..n).collect();
    let bufs = [Buffer::from_slice(&data), Buffer::from_slice(&wide), Buffer::from_slice(&wide)];
    agree(twice, n, 64, &[Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)], &bufs);
}

/// A histogram counted in local bins of `elem`: `count` under `i < n`, `pre` after the
/// zeroing and `extra` after the count (with both empty, the shape `spmd/counted.rs` counts
/// straight into `hist`). Race-free whatever the arguments are.
fn bins_kernel(elem: &str, count: &str, pre: &str, extra: &str) -> String {
    format!(
        "kernel k(data: ptr<global, u32>, hist: ptr<global, {elem}>, o: ptr<global, {elem}>, n: u32) {{
           local bins: {elem}[256];
           let lid: u32 = local_id(0);
           bins[lid] = 0 as {elem};
           {pre}
           barrier(local);
           let i: u32 = global_id(0);
           if i < n {{
             {count}
           }}
           {extra}
           barrier(local);
           atomic_add(hist, lid, bins[lid]);
         }}"
    )
}

#[test]
fn histograms_count_straight_into_the_buffer_exactly() {
    // Above INLINE_ITEMS, so that launches on several threads use them.
    let n: u32 = 20 * 256;
    let data: Vec<u32> = (0..n).map(|i| i.wrapping_mul(0x9e37_79b9) ^ (i >> 3)).collect();
    let start: Vec<u32> = (0..256u32).map(|i| i.wrapping_mul(0x0101_0101) ^ 0xffff_ff00).collect();
    let u = |v: &[u32]| Buffer::from_slice(v);
    let i = |v: &[u32]| Buffer::from_slice(&v.iter().map(|&x| x as i32).collect::<Vec<_>>());
    let f = |v: &[u32]| Buffer::from_slice(&v.iter().map(|&x| x as f32).collect::<Vec<_>>());
    let add = "atomic_add(bins, data[i] & 255u32, 1 as ELEM);";
    let sub = "atomic_sub(bins, (data[i] >> 3u32) % 200u32, (data[i] & 7u32) as ELEM);";
    // (element, count, statement before the first barrier, after the count, counted
    // straight into `hist`?)
    let cases: Vec<(&str, String, &str, &str, bool)> = vec![
        ("u32", add.into(), "", "", true),
        ("i32", format!("{add} {sub}"), "", "", true),
        // Other forms of index and constant amounts (their indices from registers), a
        // count whose index can fault (an alive mask kept), counts in a loop.
        ("i32", "atomic_sub(bins, data[i] >> 24u32, 1 as ELEM);".into(), "", "", true),
        ("u32", "atomic_add(bins, data[i] % 16u32, 3 as ELEM);".into(), "", "", true),
        ("i32", "atomic_add(bins, (data[i] >> 16u32) & 255u32, 1 as ELEM);".into(), "", "", true),
        ("u32", "atomic_sub(bins, (data[i] * 2654435761u32) >> 24u32, 2 as ELEM);".into(), "", "", true),
        ("u32", "atomic_add(bins, (data[i] ^ i) & 255u32, 1 as ELEM);".into(), "", "", true),
        ("u32", "atomic_add(bins, data[(i * 7u32) % 1024u32] & 63u32, 1 as ELEM);".into(), "", "", true),
        (
            "i32",
            "for j: u32 in 0u32 .. 3u32 { atomic_add(bins, (data[i] >> (8u32 * j)) & 255u32, 1 as ELEM); }"
                .into(),
            "",
            "",
            true,
        ),
        // The bins read or written elsewhere, a result used, a float, another use of
        // `hist`, an index not bounded below the bins' count, a third barrier, another
        // kind of atomic, a statement before the first barrier that can fault: as written.
        ("u32", add.into(), "o[lid] = bins[lid] + 4u32;", "", false),
        ("u32", add.into(), "bins[lid] = 3u32;", "", false),
        (
            "u32",
            "let r: u32 = atomic_add(bins, data[i] & 255u32, 1u32); o[i] = r;".into(),
            "",
            "",
            false,
        ),
        ("f32", "atomic_add(bins, data[i] & 255u32, 1.5);".into(), "", "", false),
        ("u32", add.into(), "", "atomic_add(hist, 3u32, 1u32);", false),
        ("u32", "atomic_add(bins, data[i] & 511u32, 1u32);".into(), "", "", false),
        ("u32", add.into(), "", "barrier(local);", false),
        ("u32", "atomic_max(bins, data[i] & 255u32, data[i]);".into(), "", "", false),
        // (its fault would come before an earlier work-item's fault in the count, whose
        // `data` index runs 7 times as fast)
        (
            "u32",
            "atomic_add(bins, data[(i * 7u32) % 1024u32] & 255u32, 1u32);".into(),
            "let z: u32 = data[lid * 4u32];",
            "o[i] = z;",
            false,
        ),
    ];
    for (elem, count, pre, extra, direct) in cases {
        let src = bins_kernel(elem, &count.replace("ELEM", elem), pre, extra);
        let k = kernel(&src);
        let p = compile(&k, &X86Options::default()).unwrap();
        if x86_common::avx2() {
            assert_eq!(p.counts_into(), direct.then_some(1), "{src}");
            let loaded = X86Program::from_image(&k, &p.to_image().unwrap()).unwrap();
            assert_eq!(loaded.counts_into(), p.counts_into(), "loaded\n{src}");
        }
        let buf = |v: &[u32]| match elem {
            "u32" => u(v),
            "i32" => i(v),
            _ => f(v),
        };
        let bufs = [u(&data), buf(&start), buf(&data)];
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(n - 37)];
        // (2048 elements: copies per thread not worth it, so the `lock`ed lanes)
        for (local, hist_len) in [(256, 256), (256, 255), (128, 256), (256, 300), (256, 2048)] {
            let r = NdRange::new(&[n]).with_local(&[local]);
            let mut bufs = bufs.clone();
            bufs[1] = buf(&(0..hist_len).map(|x| start[x as usize % 256]).collect::<Vec<_>>());
            x86_common::three_ways(&k, &r, &args, &bufs);
            let ok = kiln_ir::interp::run(&k, &r, &args, &mut bufs.clone()).is_ok();
            // Float bins added into `hist` from several threads add in another order.
            if ok && elem != "f32" {
                agree(&src, n, local, &args, &bufs);
            }
        }
        // A fault in the count (data read past its end) reads the same either way.
        let short = [u(&data[..700]), buf(&start), buf(&data)];
        x86_common::three_ways(&k, &NdRange::new(&[n]).with_local(&[256]), &args, &short);
    }
    // `hist` is `data` (its first groups' counts read what the add-backs wrote, and no
    // count may write what a later count reads): the kernel as written. On one thread only:
    // group 0 reads the elements every group's add-back writes, a race between work-groups,
    // so on several threads no result is defined (docs/cpu.md) and none is compared.
    let k = kernel(&bins_kernel("u32", add.replace("ELEM", "u32").as_str(), "", ""));
    let args = [Arg::Buffer(0), Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
    let bufs = [u(&data), u(&data)];
    x86_common::three_ways(&k, &NdRange::new(&[n]).with_local(&[256]), &args, &bufs);
}

/// Counting programs whose indices each lane computes from 8/16-bit data (`counted.rs`,
/// `V::lane_index`): the interpreter's buffers and errors, one to four threads.
#[test]
fn narrow_data_counts_straight_into_the_buffer_exactly() {
    let n: u32 = 20 * 256;
    let words: Vec<u32> = (0..n).map(|i| i.wrapping_mul(0x9e37_79b9) ^ (i >> 3)).collect();
    for (ty, index) in [
        ("u8", "data[i] as u32"),
        ("i8", "(data[i] as u32) & 255u32"),
        ("u16", "(data[i] as u32) & 255u32"),
        ("i16", "((data[i] as i32) >> 3i32) & 127i32"),
    ] {
        let src = format!(
            "kernel k(data: ptr<global, {ty}>, hist: ptr<global, u32>, n: u32) {{
               local bins: u32[256];
               let lid: u32 = local_id(0);
               bins[lid] = 0u32;
               barrier(local);
               let i: u32 = global_id(0);
               if i < n {{ atomic_add(bins, {index}, 1u32); }}
               barrier(local);
               atomic_add(hist, lid, bins[lid]);
             }}"
        );
        let k = kernel(&src);
        let data = |len: usize| -> Buffer {
            let w = &words[..len];
            match ty {
                "u8" => Buffer::from_slice(&w.iter().map(|&x| x as u8).collect::<Vec<_>>()),
                "i8" => Buffer::from_slice(&w.iter().map(|&x| x as i8).collect::<Vec<_>>()),
                "u16" => Buffer::from_slice(&w.iter().map(|&x| x as u16).collect::<Vec<_>>()),
                _ => Buffer::from_slice(&w.iter().map(|&x| x as i16).collect::<Vec<_>>()),
            }
        };
        if x86_common::avx2() {
            let p = compile(&k, &X86Options::default()).unwrap();
            assert_eq!(p.counts_into(), Some(1), "{src}");
            let l = p.counting().unwrap().0.disassemble();
            assert!(
                l.contains(if ty.len() == 2 {
                    "byte ptr [rcx+rbx+7]"
                } else {
                    "word ptr [rcx+rbx*2+0Eh]"
                }),
                "{l}"
            );
        }
        let hist = Buffer::from_slice(&(0..256u32).map(|x| x * 7).collect::<Vec<_>>());
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n - 37)];
        let r = NdRange::new(&[n]).with_local(&[256]);
        for len in [n as usize, 700] {
            let bufs = [data(len), hist.clone()];
            x86_common::three_ways(&k, &r, &args, &bufs);
            if len == n as usize {
                agree(&src, n, 256, &args, &bufs);
            }
        }
    }
}

/// The counting program's listing: its loads of `data` prefetched ahead, its counts'
/// indices extracted from the register they were computed in (not stored and loaded back)
/// in the batches with every lane active,
/// and no alive mask where no count can fault (an index from a load at another index than
/// `global_id(0)` can: that program keeps it).
#[test]
fn counting_program_streams_its_counts() {
    if !x86_common::avx2() {
        return kiln_ir::testing::skip("the counting program needs AVX2, which this CPU lacks");
    }
    let listing = |count: &str| {
        let k = kernel(&bins_kernel("u32", count, "", ""));
        let p = compile(&k, &X86Options::default()).unwrap();
        p.counting().expect("a counting program").0.disassemble()
    };
    let alive = |l: &str| l.lines().any(|x| x.contains("mov dword ptr [r15+") && x.ends_with(",8"));
    // A byte of each lane's element: one load per lane in the batches with every lane
    // active (prefetched there too), the vector load where `i < n` cuts the batch.
    let l = listing("atomic_add(bins, data[i] & 255u32, 1u32);");
    assert!(l.contains("movzx r10d,byte ptr [rcx+rbx*4+1Ch]"), "{l}");
    assert_eq!(l.matches("prefetcht0 [").count(), 2, "{l}");
    let l = listing("atomic_add(bins, (data[i] ^ i) & 255u32, 1u32);");
    assert!(l.contains("prefetcht0 [") && l.contains("vextracti128 xmm2,ymm0,1"), "{l}");
    // (Loaded back once: in the batch that `i < n` cuts, where the lanes are tested.)
    assert!(l.matches("vmovdqu ymm1,[r15").count() == 1 && !alive(&l), "{l}");
    let l = listing("atomic_add(bins, data[(i * 7u32) % 1024u32] & 255u32, 1u32);");
    assert!(alive(&l), "{l}");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 24, ..Default::default() })]
    /// Random histograms of the counting shape (bins of 64 to 256, additions and
    /// subtractions of data-dependent amounts at masked, remaindered or shifted indices,
    /// under a guard or not), launched with local sizes that fit the bins or not, buffers
    /// long enough or not, and data that may end early (faults): the interpreter's buffers
    /// and errors on one thread, and its buffers on several.
    #[test]
    fn random_counting_histograms_agree(
        signed in proptest::prelude::any::<bool>(),
        bins in proptest::sample::select(vec![64u32, 128, 256]),
        index in proptest::sample::select(vec!["d & MASK", "(d >> 5u32) % BINS", "(d * 3u32) >> 26u32", "(d ^ i) & MASK"]),
        amount in proptest::sample::select(vec!["1u32", "d >> 28u32", "(d & 5u32)"]),
        sub in proptest::prelude::any::<bool>(),
        guarded in proptest::prelude::any::<bool>(),
        local_fits in proptest::prelude::any::<bool>(),
        hist_extra in proptest::sample::select(vec![-1i32, 0, 7]),
        data_len in proptest::sample::select(vec![4608u32, 4584, 3]),
    ) {
        let elem = if signed { "i32" } else { "u32" };
        let index = index.replace("MASK", &format!("{}u32", bins - 1)).replace("BINS", &format!("{bins}u32"));
        let op = if sub { "atomic_sub" } else { "atomic_add" };
        let count = format!("let d: u32 = data[i]; {op}(bins, {index}, ({amount}) as {elem});");
        let count = if guarded { format!("if i < n {{ {count} }}") } else { count };
        let src = format!(
            "kernel k(data: ptr<global, u32>, hist: ptr<global, {elem}>, n: u32) {{
               local bins: {elem}[{bins}];
               let lid: u32 = local_id(0);
               bins[lid] = 0 as {elem};
               barrier(local);
               let i: u32 = global_id(0);
               {count}
               barrier(local);
               atomic_add(hist, lid, bins[lid]);
             }}"
        );
        let k = kernel(&src);
        let p = compile(&k, &X86Options::default()).unwrap();
        if x86_common::avx2() {
            proptest::prop_assert_eq!(p.counts_into(), Some(1), "{}", src);
        }
        // Above INLINE_ITEMS, so that launches on several threads use them.
        let n = 4608u32;
        let data: Vec<u32> = (0..data_len).map(|i| i.wrapping_mul(0x9e37_79b9).rotate_left(i % 13)).collect();
        let hist_len = (bins as i32 + hist_extra) as u32;
        let start: Vec<u32> = (0..hist_len).map(|i| i.wrapping_mul(0x0101_0101) ^ 0xffff_ff00).collect();
        let hist = if signed {
            Buffer::from_slice(&start.iter().map(|&x| x as i32).collect::<Vec<_>>())
        } else {
            Buffer::from_slice(&start)
        };
        let bufs = [Buffer::from_slice(&data), hist];
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n - 29)];
        let local = if local_fits { bins } else { bins / 2 };
        let r = NdRange::new(&[n]).with_local(&[local]);
        x86_common::three_ways(&k, &r, &args, &bufs);
        if kiln_ir::interp::run(&k, &r, &args, &mut bufs.clone()).is_ok() {
            agree(&src, n, local, &args, &bufs);
        }
    }
}
