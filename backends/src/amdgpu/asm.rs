//! The assembly listing: gfx900 code and an `.amdhsa_kernel` descriptor that llvm-mc
//! (`-triple=amdgcn-amd-amdhsa -mcpu=gfx900`) accepts.

use std::fmt::Write;

use super::mir::{MFunc, Opnd, PReg};

fn opnd(f: &MFunc, o: &Opnd) -> String {
    match o {
        Opnd::R(v) => format!("{v}"),
        Opnd::P(PReg::S(n)) => format!("s{n}"),
        Opnd::P(PReg::S2(n)) => format!("s[{n}:{}]", n + 1),
        Opnd::P(PReg::V(n)) => format!("v{n}"),
        Opnd::P(PReg::V2(n)) => format!("v[{n}:{}]", n + 1),
        Opnd::P(PReg::V4(n)) => format!("v[{n}:{}]", n + 3),
        Opnd::Half(v, k) => format!("{v}.{k}"),
        Opnd::Vcc => "vcc".into(),
        Opnd::Imm(x) if (*x as i32) >= -16 && (*x as i32) <= 64 => format!("{}", *x as i32),
        Opnd::Imm(x) => format!("{x:#x}"),
        Opnd::L(l) => format!("{}_{}", f.name, l),
        Opnd::Exec => "exec".into(),
        Opnd::M0 => "m0".into(),
        Opnd::Text(t) => (*t).into(),
        Opnd::Offset(n) => format!(" offset:{n}"),
    }
}

/// Prints the listing of an allocated function.
pub fn print(f: &MFunc) -> String {
    let mut s = String::new();
    let n = &f.name;
    let _ = writeln!(s, "\t.amdgcn_target \"amdgcn-amd-amdhsa--gfx900\"");
    let _ = writeln!(s, "\t.text\n\t.globl {n}\n\t.p2align 8\n\t.type {n},@function\n{n}:");
    let _ = writeln!(
        s,
        "\t; sgprs: {}, vgprs: {}, lds bytes: {}",
        f.num_sgprs, f.num_vgprs, f.lds_bytes
    );
    for i in &f.insts {
        if i.op == "label" {
            let _ = writeln!(s, "{}:", opnd(f, &i.uses[0]));
            continue;
        }
        // Text starting with a space is a modifier (`glc`): appended without a comma.
        let is_mod = |o: &&Opnd| {
            matches!(o, Opnd::Text(t) if t.starts_with(' ')) || matches!(o, Opnd::Offset(_))
        };
        let all = || i.defs.iter().chain(&i.uses);
        let ops: Vec<String> = all().filter(|o| !is_mod(o)).map(|o| opnd(f, o)).collect();
        let mods: String = all().filter(is_mod).map(|o| opnd(f, o)).collect();
        if ops.is_empty() {
            let _ = writeln!(s, "\t{}{mods}", i.op);
        } else {
            let _ = writeln!(s, "\t{} {}{mods}", i.op, ops.join(", "));
        }
    }
    let _ = writeln!(s, "\t.section .rodata,\"a\",@progbits\n\t.p2align 6\n\t.amdhsa_kernel {n}");
    for (k, v) in [
        ("user_sgpr_kernarg_segment_ptr", 1),
        ("user_sgpr_flat_scratch_init", 1),
        ("system_sgpr_workgroup_id_x", 1),
        ("system_sgpr_workgroup_id_y", 1),
        ("system_sgpr_workgroup_id_z", 1),
        ("system_sgpr_private_segment_wavefront_offset", 1),
        ("private_segment_fixed_size", f.scratch_bytes),
        ("system_vgpr_workitem_id", 2),
        ("next_free_vgpr", f.num_vgprs),
        ("next_free_sgpr", f.num_sgprs),
        ("group_segment_fixed_size", f.lds_bytes),
        ("kernarg_size", f.kernarg_bytes),
        ("float_denorm_mode_32", 3),
    ] {
        let _ = writeln!(s, "\t\t.amdhsa_{k} {v}");
    }
    let _ = writeln!(s, "\t.end_amdhsa_kernel");
    s
}
