//! The packed loop of the 8-lane code (`backends/src/x86/spmd/packed.rs`): elementwise kernels
//! on 8- and 16-bit data computed 32 (16) work-items per register. Random kernels of the class
//! on `i8`, `u8`, `i16` and `u16` — every operator family the class takes, at edge values —
//! and hand cases, against the scalar code and the interpreter, bits and errors compared: odd
//! sizes, guards, ranges rounded up to the group size, a guard past the buffers (the first
//! work-item past the end faults), unguarded launches past them, and kernels just outside the
//! class (which keep the 8-lane code alone).
//!
//! `X86_PACKED_CASES=N` sets the random kernels per type (default 40).
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{avx2, fallback, kernel, three_ways};

use kiln_backends::x86::{compile, X86Options};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{Imm, Kernel, Scalar};

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A narrow type's name, its width's other type, width and signedness.
#[derive(Clone, Copy)]
struct Ty {
    name: &'static str,
    other: &'static str,
    s: Scalar,
    bits: u32,
    signed: bool,
}

const TYPES: [Ty; 4] = [
    Ty { name: "u8", other: "i8", s: Scalar::U8, bits: 8, signed: false },
    Ty { name: "i8", other: "u8", s: Scalar::I8, bits: 8, signed: true },
    Ty { name: "u16", other: "i16", s: Scalar::U16, bits: 16, signed: false },
    Ty { name: "i16", other: "u16", s: Scalar::I16, bits: 16, signed: true },
];

impl Ty {
    /// An edge value or a random one, as a literal of the type.
    fn constant(&self, r: &mut Rng) -> String {
        let (min, max) = if self.signed {
            (-(1i64 << (self.bits - 1)), (1i64 << (self.bits - 1)) - 1)
        } else {
            (0, (1i64 << self.bits) - 1)
        };
        let v = match r.below(8) {
            0 => min,
            1 => max,
            2 => 0,
            3 => 1,
            4 if self.signed => -1,
            _ => min + (r.next() % (max - min + 1) as u64) as i64,
        };
        format!("({v}{})", self.name)
    }
}

/// Random expressions of the class over the names `v`, `w` (loads), `x` (a `var`), `p` (a
/// parameter) and `c` (a `bool`).
struct Gen<'r> {
    r: &'r mut Rng,
    t: Ty,
    /// Allow operators outside the class (division by other constants).
    wild: bool,
    /// Whether `c` and `x` are declared yet.
    c: bool,
    x: bool,
    /// The type of `s` (a load of `d`), of the other width, in mixed kernels.
    other: Option<Ty>,
}

impl Gen<'_> {
    fn int(&mut self, depth: u32) -> String {
        let t = self.t;
        if depth == 0 || self.r.below(5) == 0 {
            if self.other.is_some() && self.r.below(3) == 0 {
                return format!("(s as {})", t.name);
            }
            return match self.r.below(6) {
                0 => "v".into(),
                1 => "w".into(),
                2 if self.x => "x".into(),
                3 => "p".into(),
                4 => "a[i]".into(),
                _ => t.constant(self.r),
            };
        }
        let d = depth - 1;
        match self.r.below(16) {
            0..=2 => {
                let op = ["+", "-", "*", "&", "|", "^"][self.r.below(6) as usize];
                format!("({} {op} {})", self.int(d), self.int(d))
            }
            3 => {
                let op = ["<<", ">>"][self.r.below(2) as usize];
                let c = self.r.below(u64::from(2 * t.bits.min(63)));
                let c = if t.signed { c.min((1 << (t.bits - 1)) - 1) } else { c };
                format!("({} {op} {c}{})", self.int(d), t.name)
            }
            4 => {
                let op = ["/", "%"][self.r.below(2) as usize];
                let k = self.r.below(u64::from(t.bits - 1));
                let c = if self.wild && self.r.below(2) == 0 { 3 + 2 * k } else { 1 << k };
                format!("({} {op} {c}{})", self.int(d), t.name)
            }
            5 => {
                let f = ["min", "max"][self.r.below(2) as usize];
                format!("{f}({}, {})", self.int(d), self.int(d))
            }
            6 => format!("abs({})", self.int(d)),
            7 => format!("(-{})", self.int(d)),
            8 => format!("(~{})", self.int(d)),
            9..=11 => format!("({} ? {} : {})", self.boolean(d), self.int(d), self.int(d)),
            12 => format!("select({}, {}, {})", self.boolean(d), self.int(d), self.int(d)),
            13 => {
                let via = match self.other {
                    Some(o) if self.r.below(2) == 0 => o.name,
                    _ => t.other,
                };
                format!("(({} as {via}) as {})", self.int(d), t.name)
            }
            14 => format!("({} as {})", self.boolean(d), t.name),
            _ => format!("mad({}, {}, {})", self.int(d), self.int(d), self.int(d)),
        }
    }

    fn boolean(&mut self, depth: u32) -> String {
        if depth == 0 || self.r.below(4) == 0 {
            return match self.r.below(3) {
                0 if self.c => "c".into(),
                1 => "true".into(),
                _ => format!("({} > {})", "v", "p"),
            };
        }
        let d = depth - 1;
        match self.r.below(7) {
            0..=2 => {
                let op = ["<", "<=", "==", "!=", ">", ">="][self.r.below(6) as usize];
                format!("({} {op} {})", self.int(d), self.int(d))
            }
            3 => format!("(!{})", self.boolean(d)),
            4 => format!("({} && {})", self.boolean(d), self.boolean(d)),
            5 => format!("({} || {})", self.boolean(d), self.boolean(d)),
            _ => format!("({} as bool)", self.int(d)),
        }
    }
}

/// A random kernel of the class on type `t`: guarded by `i < n`, or not; with `other`, a
/// sixth parameter, a buffer `d` of that type (of the other width), read and written too.
fn random_kernel(r: &mut Rng, t: Ty, guarded: bool, wild: bool, other: Option<Ty>) -> String {
    let mut g = Gen { r, t, wild, c: false, x: false, other };
    let (mixed, d_param) = match other {
        Some(o) => {
            let e = g.int(3);
            (
                format!("let s: {O} = d[i]; d[i] = (({e}) as {O}) + s;", O = o.name),
                format!(", d: ptr<global, {}>", o.name),
            )
        }
        None => (String::new(), String::new()),
    };
    let b = g.boolean(2);
    g.c = true;
    let e1 = g.int(3);
    g.x = true;
    let (e2, e3, e4) = (g.int(3), g.int(4), g.int(2));
    let body = format!(
        "let v: {T} = a[i];
         let w: {T} = b[i];
         {mixed}
         let c: bool = {b};
         var x: {T} = {e1};
         x = {e2};
         out[i] = {e3};
         b[i] = {e4};",
        T = t.name
    );
    let body = if guarded { format!("if i < n {{ {body} }}") } else { body };
    format!(
        "kernel k(a: ptr<global, {T}>, b: ptr<global, {T}>, out: ptr<global, {T}>, p: {T}, n: u32{d_param}) {{
           let i: u32 = global_id(0);
           {body}
         }}",
        T = t.name
    )
}

/// `len` elements of `t`: edge values and random ones.
fn data(t: Ty, len: usize, r: &mut Rng) -> Buffer {
    let mut b = Buffer::zeroed(t.s, len);
    for i in 0..len {
        let bits = match r.below(6) {
            0 => 0,
            1 => u64::MAX,
            2 => 1u64 << (t.bits - 1),
            _ => r.next(),
        };
        let m = bits & ((1u64 << t.bits) - 1);
        let v = if t.signed && m >> (t.bits - 1) == 1 {
            m as i128 - (1i128 << t.bits)
        } else {
            m as i128
        };
        b.set(i, Imm::int(t.s, v)).expect("an element of the type");
    }
    b
}

/// True if the kernel's 8-lane code (plain build) has the packed loop: a step of the
/// block's work-items (32 bytes, 16 words).
fn packed(k: &Kernel) -> bool {
    let p = compile(k, &X86Options::default()).unwrap();
    let text = p.disassemble();
    text.find("; 8-lane").is_some_and(|at| {
        let v = &text[at..];
        v.contains("add rbx,20h") || v.contains("add rbx,10h")
    })
}

/// Launches `k` over `items` work-items (rounded up to each group size), buffers of `len`
/// elements (a fourth of type `other` where given): three ways agree.
fn check(k: &Kernel, t: Ty, other: Option<Ty>, len: usize, items: usize, n: u32, r: &mut Rng) {
    for local in [8usize, 32, 256] {
        let global = items.div_ceil(local) * local;
        let range = NdRange::new(&[global as u32]).with_local(&[local as u32]);
        let mut bufs = vec![data(t, len, r), data(t, len, r), data(t, len, r)];
        let p = Arg::Scalar(data(t, 1, r).get(0).expect("an element"));
        let mut args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), p, Arg::scalar(n)];
        if let Some(o) = other {
            bufs.push(data(o, len, r));
            args.push(Arg::Buffer(3));
        }
        assert_eq!(three_ways(k, &range, &args, &bufs), avx2(), "{k}");
    }
}

/// A type of the other width than `t`'s, of either signedness.
fn partner(t: Ty, r: &mut Rng) -> Ty {
    let i = if t.bits == 8 { 2 } else { 0 } + r.below(2) as usize;
    TYPES[i]
}

fn cases() -> usize {
    std::env::var("X86_PACKED_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(40)
}

#[test]
fn random_packed_kernels_agree_with_the_interpreter() {
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    for t in TYPES {
        let mut with_packed = 0;
        for case in 0..cases() {
            let guarded = case % 3 != 2;
            // Every other kernel of mixed widths (16-bit lanes).
            let o = (case % 2 == 1).then(|| partner(t, &mut r));
            let src = random_kernel(&mut r, t, guarded, false, o);
            let k = kernel(&src);
            assert_eq!(fallback(&k), None, "{k}");
            with_packed += usize::from(packed(&k));
            for (len, n) in [(1usize, 1u32), (31, 31), (32, 32), (97, 94), (300, 300), (517, 517)] {
                let items = if guarded { n as usize } else { len };
                check(&k, t, o, len, items, n, &mut r);
            }
            // A guard past the buffers: the first work-item past the end faults.
            check(&k, t, o, 70, 100, 100, &mut r);
            if !guarded {
                // Unguarded, the range rounded up past the buffers.
                check(&k, t, o, 77, 77, 77, &mut r);
            }
        }
        if avx2() {
            assert_eq!(with_packed, cases(), "{}: every kernel of the class is packed", t.name);
        }
    }
}

/// Kernels just outside the class (divisions by other constants) keep the
/// 8-lane code alone, with the same results.
#[test]
fn random_kernels_outside_the_class_agree_too() {
    let mut r = Rng(0x1234_5678_9abc_def1);
    for t in TYPES {
        for _ in 0..cases() / 4 {
            let o = Some(partner(t, &mut r)).filter(|_| r.below(2) == 0);
            let k = kernel(&random_kernel(&mut r, t, true, true, o));
            for (len, n) in [(33usize, 33u32), (200, 190)] {
                check(&k, t, o, len, n as usize, n, &mut r);
            }
        }
    }
}

/// The thresholding of the held-out suite is packed on every narrow type, as is a blend of
/// 8-bit pixels in 16 bits, and a store under a lane-varying `if`; a kernel with a store
/// under a condition on the id, a signed division by a constant other than a power of two, an
/// access off `global_id(0)` or a division by a parameter is not.
#[test]
fn which_kernels_are_packed() {
    if !avx2() {
        kiln_ir::testing::skip("this CPU has no AVX2");
        return;
    }
    for t in ["u8", "i8", "u16", "i16"] {
        let k = kernel(&format!(
            "kernel threshold(img: ptr<global, {t}>, out: ptr<global, {t}>, lo: {t}, hi: {t}, n: u32) {{
               let i: u32 = global_id(0);
               if i < n {{
                 let v: {t} = img[i];
                 out[i] = v > hi ? 100{t} : v < lo ? 0{t} : v / 2{t};
               }}
             }}"
        ));
        assert!(packed(&k), "{k}");
    }
    let blend = kernel(
        "kernel blend(a: ptr<global, u8>, b: ptr<global, u8>, out: ptr<global, u8>, w: u16, n: u32) {
           let i: u32 = global_id(0);
           if i < n {
             out[i] = ((a[i] as u16 * w + b[i] as u16 * (256u16 - w)) >> 8u16) as u8;
           }
         }",
    );
    assert!(packed(&blend), "{blend}");
    let depth = kernel(
        "kernel depth(d: ptr<global, u16>, out: ptr<global, u16>, near: u16, far: u16, n: u32) {
           let i: u32 = global_id(0);
           if i < n {
             let z: u16 = d[i];
             out[i] = z < near || z > far ? 0u16 : min(z - near, 4095u16);
           }
         }",
    );
    assert!(packed(&depth), "{depth}");
    // A store under a lane-varying `if` (merged, `masked.rs`).
    let under = kernel(
        "kernel k(a: ptr<global, u8>, out: ptr<global, u8>) {
           let i: u32 = global_id(0);
           if a[i] > 3u8 { out[i] = a[i]; }
         }",
    );
    assert!(packed(&under), "{under}");
    for src in [
        "kernel k(a: ptr<global, u8>, out: ptr<global, u8>) {
           let i: u32 = global_id(0);
           if i % 3u32 == 0u32 { out[i] = a[i]; }
         }",
        "kernel k(a: ptr<global, u8>, out: ptr<global, u8>, d: i8) {
           let i: u32 = global_id(0);
           out[i] = (a[i] as i8 / 3i8) as u8;
         }",
        "kernel k(a: ptr<global, u8>, out: ptr<global, u8>) {
           let i: u32 = global_id(0);
           out[i] = a[i + 1u32];
         }",
        "kernel k(a: ptr<global, u8>, out: ptr<global, u8>, d: u8) {
           let i: u32 = global_id(0);
           out[i] = a[i] / d;
         }",
    ] {
        let k = kernel(src);
        assert!(!packed(&k), "{k}");
    }
}

/// Hand cases at the edges of the byte emulations: shifts by every count (arithmetic ones of
/// negative bytes), byte multiplication of every pair of one operand's edge values, unsigned
/// comparisons across the sign bit.
#[test]
fn byte_emulations_at_their_edges() {
    let mut r = Rng(77);
    for t in [TYPES[0], TYPES[1]] {
        for c in 0..16 {
            let k = kernel(&format!(
                "kernel k(a: ptr<global, {T}>, b: ptr<global, {T}>, out: ptr<global, {T}>, p: {T}, n: u32) {{
                   let i: u32 = global_id(0);
                   out[i] = ((a[i] >> {c}{T}) ^ (b[i] << {c}{T})) + a[i] * b[i] * p;
                   b[i] = (a[i] < b[i]) ? (a[i] >= p ? a[i] : p) : ((a[i] <= b[i]) as {T});
                 }}",
                T = t.name
            ));
            assert!(!avx2() || packed(&k), "{k}");
            check(&k, t, None, 256 + 13, 256 + 13, 0, &mut r);
        }
    }
}

/// Every operator on 8-bit values in 16-bit lanes (a kernel with a 16-bit buffer too), one
/// kernel each, at edge values.
#[test]
fn each_operator_on_bytes_in_word_lanes() {
    let mut r = Rng(99);
    for (t, o) in
        [(TYPES[0], TYPES[2]), (TYPES[1], TYPES[3]), (TYPES[0], TYPES[3]), (TYPES[1], TYPES[2])]
    {
        for e in [
            "v + w",
            "v - w",
            "v * w",
            "v & w",
            "v | w",
            "v ^ w",
            "-v",
            "~v",
            "abs(v)",
            "min(v, w)",
            "max(v, w)",
            "v << 3",
            "v >> 3",
            "v / 4",
            "v % 4",
            "v / 1",
            "v % 1",
            "v < w ? v : w",
            "(v <= w) as T",
            "(v == w) as T",
            "(v != w) as T",
            "(v >= p) as T",
            "(v > p) as T",
            "v as bool ? w : p",
            "(s as T)",
            "((v as O) + s) as T",
            "p",
            "mad(v, w, p)",
        ] {
            let e =
                e.replace(" T", &format!(" {}", t.name)).replace(" O)", &format!(" {})", o.name));
            let src = format!(
                "kernel k(a: ptr<global, {T}>, b: ptr<global, {T}>, out: ptr<global, {T}>, p: {T}, n: u32, d: ptr<global, {O}>) {{
                   let i: u32 = global_id(0);
                   let v: {T} = a[i];
                   let w: {T} = b[i];
                   let s: {O} = d[i];
                   out[i] = {e};
                 }}",
                T = t.name,
                O = o.name
            );
            let k = kernel(&src);
            assert!(!avx2() || packed(&k), "{k}");
            check(&k, t, Some(o), 64, 64, 64, &mut r);
        }
    }
}

/// A random kernel of the class with lane-varying `if`s that `ifstore.rs` does not merge: an
/// `else if` chain whose sides hold `let`s, assignments (blended under the masks) and
/// stores of different buffers (merged), one under a nested `if` without `else`. Unsigned
/// types divide by any constant.
fn random_branchy(r: &mut Rng, t: Ty, guarded: bool) -> String {
    let mut g = Gen { r, t, wild: !t.signed, c: false, x: false, other: None };
    let b = g.boolean(2);
    g.c = true;
    let e1 = g.int(2);
    g.x = true;
    let (b1, b2) = (g.boolean(2), g.boolean(2));
    let (e2, e3, e4, e5) = (g.int(3), g.int(2), g.int(3), g.int(2));
    // (Shallower under two masks: the packed code's registers are bounded.)
    let (e6, e7) = (g.int(2), g.int(2));
    let body = format!(
        "let v: {T} = a[i];
         let w: {T} = b[i];
         let c: bool = {b};
         var x: {T} = {e1};
         if {b1} {{
           x = {e2};
           out[i] = {e3};
         }} else if {b2} {{
           let y: {T} = {e4};
           b[i] = y;
           x = x + {e5};
           if c {{ out[i] = y; }}
         }} else {{
           out[i] = {e6};
         }}
         a[i] = x ^ {e7};",
        T = t.name
    );
    let body = if guarded { format!("if i < n {{ {body} }}") } else { body };
    format!(
        "kernel k(a: ptr<global, {T}>, b: ptr<global, {T}>, out: ptr<global, {T}>, p: {T}, n: u32) {{
           let i: u32 = global_id(0);
           {body}
         }}",
        T = t.name
    )
}

#[test]
fn random_branchy_kernels_agree_with_the_interpreter() {
    let mut r = Rng(0x5eed_0053_c0de_cafe);
    for t in TYPES {
        let mut with_packed = 0;
        for case in 0..cases() {
            let guarded = case % 3 != 2;
            let k = kernel(&random_branchy(&mut r, t, guarded));
            assert_eq!(fallback(&k), None, "{k}");
            with_packed += usize::from(packed(&k));
            for (len, n) in [(31usize, 31u32), (97, 94), (300, 300)] {
                let items = if guarded { n as usize } else { len };
                check(&k, t, None, len, items, n, &mut r);
            }
            // A guard past the buffers: the first work-item past the end faults.
            check(&k, t, None, 70, 100, 100, &mut r);
        }
        if avx2() {
            assert_eq!(with_packed, cases(), "{}: every branchy kernel is packed", t.name);
        }
    }
}

/// Byte kernels the way users write them, packed, on every byte value and random text,
/// with odd sizes and a guard past the buffers: ROT13 as the suite has it (its stores
/// merged into selects by `ifstore.rs`, the `% 26` by a magic number), lower case with a
/// `let` in a side, a character class by an `else if` chain of assignments, clamped
/// arithmetic with divisions, u16 versions, and `a` and `out` aliased.
#[test]
fn branchy_byte_kernels() {
    let sig = |t: &str| {
        format!("kernel k(a: ptr<global, {t}>, b: ptr<global, {t}>, out: ptr<global, {t}>, p: {t}, n: u32)")
    };
    let guard = |t: &str, body: &str| {
        format!("{} {{ let i: u32 = global_id(0); if i < n {{ {body} }} }}", sig(t))
    };
    let bytes = [
        "let c: u8 = a[i];
         if c >= 97u8 && c <= 122u8 { out[i] = (c - 97u8 + 13u8) % 26u8 + 97u8; }
         else if c >= 65u8 && c <= 90u8 { out[i] = (c - 65u8 + 13u8) % 26u8 + 65u8; }
         else { out[i] = c; }",
        "let c: u8 = a[i];
         if c >= 65u8 && c <= 90u8 { let l: u8 = c + 32u8; out[i] = l; } else { out[i] = c; }",
        "let c: u8 = a[i];
         var cls: u8 = 0u8;
         if c >= 48u8 && c <= 57u8 { cls = 1u8; }
         else if (c | 32u8) >= 97u8 && (c | 32u8) <= 122u8 { cls = 2u8 + (c >> 5u8 & 1u8); }
         else if c == 32u8 || c == 9u8 || c == 10u8 { cls = 4u8; }
         out[i] = cls;
         if cls == 0u8 { b[i] = c / 7u8; }",
        "let s: u8 = min(a[i], 255u8 - b[i]) + b[i];
         out[i] = max(s / 3u8, p) % 100u8;
         b[i] = (s % 10u8) * 25u8 / 9u8;",
    ];
    let words = [
        "let c: u16 = a[i];
         if c >= 1000u16 && c <= 50000u16 { out[i] = (c - 1000u16 + 13u16) % 26001u16 + 7u16; }
         else if c > 60000u16 { let h: u16 = c / 641u16; out[i] = h; b[i] = c % 641u16; }
         else { out[i] = c / 10u16; }",
        "let s: u16 = min(a[i], 65535u16 - b[i]) + b[i];
         out[i] = max(s / 7u16, p) % 1000u16;
         if s % 3u16 == 0u16 { b[i] = s / 65535u16 + s % 32769u16; }",
    ];
    let mut r = Rng(2026);
    for (t, bodies) in [(TYPES[0], &bytes[..]), (TYPES[2], &words[..])] {
        for body in bodies {
            let k = kernel(&guard(t.name, body));
            assert!(!avx2() || packed(&k), "{k}");
            for (len, n) in [(256usize, 256u32), (517, 517), (300, 291)] {
                check(&k, t, None, len, n as usize, n, &mut r);
            }
            check(&k, t, None, 70, 100, 100, &mut r);
            // Every value of the type's low byte, and text.
            let mut all = data(t, 1000, &mut r);
            for i in 0..1000 {
                let v = if i < 256 { i as u64 } else { 32 + r.below(95) };
                let v = if t.bits == 16 && i >= 600 { r.below(65536) } else { v };
                all.set(i, Imm::int(t.s, v as i128)).unwrap();
            }
            let range = NdRange::new(&[1024]).with_local(&[256]);
            let p = Arg::Scalar(Imm::int(t.s, 5));
            let bufs = [all, data(t, 1000, &mut r), data(t, 1000, &mut r)];
            let args =
                [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), p.clone(), Arg::scalar(1000u32)];
            assert_eq!(three_ways(&k, &range, &args, &bufs), avx2(), "{k}");
            // `out` aliasing `a`.
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(0), p, Arg::scalar(1000u32)];
            assert_eq!(three_ways(&k, &range, &args, &bufs), avx2(), "{k}");
        }
    }
}

/// `/` and `%` by every byte constant in byte lanes and in word lanes (a kernel with a
/// 16-bit buffer too), on every byte value; by u16 constants of each kind of magic number
/// (a 16-bit one, a 17-bit one, with and without a shift) on edge and random words.
#[test]
fn divisions_by_constants_in_packed_lanes() {
    let mut r = Rng(53);
    let bytes = Buffer::from_slice(&(0..300u32).map(|i| (i % 256) as u8).collect::<Vec<_>>());
    for c in 1..=255u32 {
        for wide in [false, c % 5 == 0] {
            let (d, dd) =
                if wide { (", d: ptr<global, u16>", "d[i] = d[i] / 3u16;") } else { ("", "") };
            let k = kernel(&format!(
                "kernel k(a: ptr<global, u8>, b: ptr<global, u8>, out: ptr<global, u8>, p: u8, n: u32{d}) {{
                   let i: u32 = global_id(0);
                   if i < n {{ out[i] = a[i] / {c}u8; b[i] = a[i] % {c}u8; {dd} }}
                 }}"
            ));
            assert!(!avx2() || packed(&k), "{k}");
            let range = NdRange::new(&[320]).with_local(&[32]);
            let mut args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)];
            args.extend([Arg::Scalar(Imm::int(Scalar::U8, 0)), Arg::scalar(300u32)]);
            let mut bufs = vec![bytes.clone(), bytes.clone(), bytes.clone()];
            if wide {
                args.push(Arg::Buffer(3));
                bufs.push(data(TYPES[2], 300, &mut r));
            }
            assert_eq!(three_ways(&k, &range, &args, &bufs), avx2(), "{k}");
        }
    }
    let mut words = data(TYPES[2], 2100, &mut r);
    for i in 0..2048u32 {
        words.set(i as usize, Imm::int(Scalar::U16, (i * 32 + i % 32) as i128)).unwrap();
    }
    for c in [
        3u32, 5, 7, 10, 19, 26, 49, 100, 255, 257, 641, 1000, 4093, 10000, 32767, 32769, 65534,
        65535,
    ] {
        let k = kernel(&format!(
            "kernel k(a: ptr<global, u16>, b: ptr<global, u16>, out: ptr<global, u16>, p: u16, n: u32) {{
               let i: u32 = global_id(0);
               if i < n {{ out[i] = a[i] / {c}u16; b[i] = a[i] % {c}u16; }}
             }}"
        ));
        assert!(!avx2() || packed(&k), "{k}");
        for (lo, hi) in [(0usize, 0), (65534 / c as usize * c as usize, 65535)] {
            let mut w = words.clone();
            // Both ends of a quotient's run near the top, and the edges.
            for (j, v) in
                [lo, lo.saturating_sub(1), hi, c as usize - 1, c as usize].iter().enumerate()
            {
                w.set(2050 + j, Imm::int(Scalar::U16, *v as i128)).unwrap();
            }
            let range = NdRange::new(&[2112]).with_local(&[64]);
            let args = [
                Arg::Buffer(0),
                Arg::Buffer(1),
                Arg::Buffer(2),
                Arg::Scalar(Imm::int(Scalar::U16, 0)),
                Arg::scalar(2100u32),
            ];
            let bufs = [w.clone(), w.clone(), w];
            assert_eq!(three_ways(&k, &range, &args, &bufs), avx2(), "{k}");
        }
    }
}
