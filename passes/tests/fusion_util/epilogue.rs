//! Random epilogue-fusion scenarios: a producer over a matrix, then element-wise consumers
//! (shared by the epilogue fusion tests and the `fusion_epilogue` fuzz target).

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::parse_module;
use kiln_ir::testing::Choices;
use kiln_passes::fusion::{
    ConstValue, Constant, FusionError, FusionSpec, ParamRef, PromoteTo, Promotion, RangeSpec,
};

use super::{check, Entry, Scenario};

/// Consumer kinds of [`random_chain`]: 0 bias, 1 relu, 2 scale, 3 out of place, 4 2-D
/// residual, 5 a read before its guard.
pub const KINDS: u8 = 6;

/// `n` small exact values (integers), different for each `seed`.
pub fn vals(n: usize, seed: u32) -> Buffer {
    let v: Vec<f32> = (0..n).map(|i| ((i as u32 * 7 + seed) % 23) as f32 - 11.0).collect();
    Buffer::from_slice(&v)
}

/// A random list: a producer over a `w x h` matrix (a reduction over a counted loop, its
/// range rounded up and guarded), then element-wise consumers, each in place or into a new
/// buffer, 1-D over `w * h` rounded up to the work-group size (guarded by `e < n`, ids as
/// `u32` or `i32`) or 2-D over a padded range; kind 5 reads `res` before its guard, which
/// work-items past the end would read out of bounds.
pub fn random_chain(
    w: u32,
    h: u32,
    pad: (u32, u32),
    ops: &[u8],
    ls: u32,
    promote: bool,
) -> Scenario {
    let n = w * h;
    let mut src = format!(
        "kernel prod(a: ptr<global, f32>, x: ptr<global, f32>) {{
  let c: u32 = global_id(0); let r: u32 = global_id(1);
  if c < {w} && r < {h} {{
    var acc: f32 = 0.5;
    for k: u32 in 0 .. 3 {{ acc = acc + a[(r * {w} + c) * 3 + k]; }}
    x[r * {w} + c] = acc;
  }}
}}
"
    );
    let one = NdRange::new(&[n.div_ceil(ls) * ls]).with_local(&[ls]);
    let two = NdRange::new(&[w + pad.0, h + pad.1]);
    let mut entries = vec![Entry {
        kernel: "prod".into(),
        range: NdRange::new(&[w + pad.1, h + pad.0]),
        args: vec![Arg::Buffer(0), Arg::Buffer(1)],
    }];
    // Pool: a, x, bias, res, then one buffer per out-of-place consumer.
    let mut pool = vec![
        vals((n * 3) as usize, 1),
        Buffer::zeroed(kiln_ir::Scalar::F32, n as usize),
        vals(w as usize, 2),
        vals(n as usize, 3),
    ];
    let mut cur = 1usize;
    let mut constants = Vec::new();
    for (i, &op) in ops.iter().enumerate() {
        let e = i + 1;
        let name = format!("op{i}");
        let (body, params, args, range) = match op {
            0 => (
                "let e: u32 = global_id(0); if e < n { x[e] = x[e] + b[e % W]; }"
                    .replace('W', &w.to_string()),
                "x: ptr<global, f32>, b: ptr<global, f32>, n: u32",
                vec![Arg::Buffer(cur), Arg::Buffer(2), Arg::scalar(n)],
                one,
            ),
            1 => (
                "let e: i32 = global_id(0) as i32; if e < n as i32 { x[e] = max(x[e], 0.0); }"
                    .into(),
                "x: ptr<global, f32>, n: u32",
                vec![Arg::Buffer(cur), Arg::scalar(n)],
                one,
            ),
            2 => (
                "let e: u32 = global_id(0); if e < n { x[e] = x[e] * alpha; }".into(),
                "x: ptr<global, f32>, n: u32, alpha: f32",
                vec![Arg::Buffer(cur), Arg::scalar(n), Arg::scalar(-1.5f32)],
                one,
            ),
            3 => {
                pool.push(vals(n as usize, 4));
                let out = pool.len() - 1;
                let a = vec![Arg::Buffer(cur), Arg::Buffer(out), Arg::scalar(n)];
                cur = out;
                (
                    "let e: u32 = global_id(0); if e < n { y[e] = exp(x[e] * 0.25) - 1.0; }".into(),
                    "x: ptr<global, f32>, y: ptr<global, f32>, n: u32",
                    a,
                    one,
                )
            }
            5 => (
                "let e: u32 = global_id(0); let v: f32 = res[e]; if e < n { x[e] = x[e] + v; }"
                    .into(),
                "x: ptr<global, f32>, res: ptr<global, f32>, n: u32",
                vec![Arg::Buffer(cur), Arg::Buffer(3), Arg::scalar(n)],
                one,
            ),
            _ => (
                "let c: u32 = global_id(0); let r: u32 = global_id(1);
                 if c < W && r < H { x[r * W + c] = x[r * W + c] * 0.5 + res[r * W + c]; }"
                    .replace('W', &w.to_string())
                    .replace('H', &h.to_string()),
                "x: ptr<global, f32>, res: ptr<global, f32>",
                vec![Arg::Buffer(cur), Arg::Buffer(3)],
                two,
            ),
        };
        src.push_str(&format!("kernel {name}({params}) {{ {body} }}\n"));
        for (p, a) in args.iter().enumerate() {
            if let Some(v) = a.imm() {
                if v.scalar() == kiln_ir::Scalar::U32 {
                    constants.push(Constant {
                        param: ParamRef::new(e, p),
                        value: ConstValue::Int(n as i128),
                    });
                }
            }
        }
        entries.push(Entry { kernel: name, range, args });
    }
    let module = parse_module(&src).unwrap_or_else(|e| panic!("{e:?}\n{src}"));
    let mut identical = Vec::new();
    for b in 0..pool.len() {
        let g: Vec<ParamRef> = (entries.iter().enumerate())
            .flat_map(|(e, en)| {
                en.args
                    .iter()
                    .enumerate()
                    .filter(|(_, a)| **a == Arg::Buffer(b))
                    .map(move |(p, _)| ParamRef::new(e, p))
            })
            .collect();
        if g.len() > 1 {
            identical.push(g);
        }
    }
    let range_spec = |r: &NdRange| {
        let s = RangeSpec::new(&r.global[..r.dims]);
        match r.local {
            Some(l) => s.with_local(&l[..r.dims]),
            None => s,
        }
    };
    let spec = FusionSpec {
        name: "chain".into(),
        kernels: entries.iter().map(|e| e.kernel.clone()).collect(),
        ndranges: entries.iter().map(|e| range_spec(&e.range)).collect(),
        identical,
        constants,
        promote: if promote {
            vec![Promotion {
                param: ParamRef::new(0, 1),
                to: PromoteTo::Private,
                size: None,
                buffer_len: None,
            }]
        } else {
            vec![]
        },
        epilogue: true,
        ..FusionSpec::default()
    };
    Scenario { module, spec, entries, pool }
}

/// A [`random_chain`] from fuzzer choices.
pub fn random_chain_from(raw: &[u32]) -> (Scenario, Vec<u8>) {
    let mut c = Choices::new(raw);
    let (w, h) = (1 + c.below(8) as u32, 1 + c.below(5) as u32);
    let pad = (c.below(3) as u32, c.below(3) as u32);
    let ops: Vec<u8> = (0..1 + c.below(4)).map(|_| c.below(KINDS as usize) as u8).collect();
    let ls = [1, 4, 8, 16][c.below(4)];
    let promote = c.chance(50);
    (random_chain(w, h, pad, &ops, ls, promote), ops)
}

/// The property of a random chain: fused, it gives the bits of its kernels one after
/// another; or, when a consumer reads before its guard (kind 5) and some of its work-items
/// touch no element of the producer's output, the fusion is refused by name for that.
pub fn check_chain(s: &Scenario, ops: &[u8]) -> Result<(), String> {
    let n = s.pool[1].len() as u32;
    let reads_past_n =
        ops.iter().zip(&s.entries[1..]).any(|(&op, e)| op == 5 && e.range.global[0] > n);
    if !reads_past_n {
        return check(s).map(|_| ());
    }
    match kiln_passes::fusion::fuse_kernels(&s.module, &s.spec) {
        Ok(f) => Err(format!("fused although a work-item that runs nowhere reads:\n{}", f.kernel)),
        Err(e @ FusionError::Epilogue { .. }) if e.to_string().contains("runs nowhere") => Ok(()),
        Err(e) => Err(format!("refused for another reason: {e}")),
    }
}
