//! Cooperative matrices (VK_KHR_cooperative_matrix): what the device offers, and the check
//! that refuses, by name, a kernel using a matrix the device does not list.
//!
//! The SPIR-V backend lowers the IR's sub-group matrix operations to Subgroup-scope
//! cooperative matrices under the Vulkan memory model. Such a kernel loads only where the
//! device has the extension and its `cooperativeMatrix` feature for compute shaders, the
//! `vulkanMemoryModel` feature, subgroups of 32 invocations (the IR's sub-group), and lists
//! every product the kernel computes (M, N, K and the component types of A, B, C and the
//! result, Subgroup scope, no saturation) and every matrix type it declares.

use std::ffi::CStr;
use std::fmt;

use ash::vk;

/// One product the device offers (or a kernel computes): `M x N x K`, component types.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Product {
    pub m: u32,
    pub n: u32,
    pub k: u32,
    /// Component types of A, B, C and the result.
    pub types: [vk::ComponentTypeKHR; 4],
}

fn type_name(t: vk::ComponentTypeKHR) -> String {
    match t {
        vk::ComponentTypeKHR::FLOAT16 => "f16".into(),
        vk::ComponentTypeKHR::FLOAT32 => "f32".into(),
        vk::ComponentTypeKHR::FLOAT64 => "f64".into(),
        vk::ComponentTypeKHR::SINT8 => "i8".into(),
        vk::ComponentTypeKHR::UINT8 => "u8".into(),
        vk::ComponentTypeKHR::SINT32 => "i32".into(),
        vk::ComponentTypeKHR::UINT32 => "u32".into(),
        // VK_COMPONENT_TYPE_BFLOAT16_KHR (VK_KHR_shader_bfloat16), newer than ash's tables.
        t if t.as_raw() == 1_000_141_000 => "bf16".into(),
        other => format!("component type {}", other.as_raw()),
    }
}

impl fmt::Display for Product {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, r] = self.types.map(type_name);
        write!(f, "m{}n{}k{} {a} x {b} + {c} -> {r}", self.m, self.n, self.k)
    }
}

/// What the device offers for cooperative matrices.
#[derive(Clone, Default)]
pub(super) struct CoopSupport {
    /// VK_KHR_cooperative_matrix is offered, with its feature, for compute shaders (then
    /// the extension and the feature are enabled).
    pub enabled: bool,
    /// The Subgroup-scope, non-saturating products listed by
    /// `vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR`.
    pub products: Vec<Product>,
    /// `vulkanMemoryModel` (enabled where offered).
    pub memory_model: bool,
    /// The device's subgroup size.
    pub subgroup_size: u32,
}

/// The extension's name.
pub(super) const EXTENSION: &CStr = ash::khr::cooperative_matrix::NAME;

impl CoopSupport {
    /// Queries `pd`: `has_extension` says whether the extension is listed, `memory_model`
    /// whether the `vulkanMemoryModel` feature is.
    pub fn query(
        entry: &ash::Entry,
        instance: &ash::Instance,
        pd: vk::PhysicalDevice,
        has_extension: bool,
        memory_model: bool,
    ) -> CoopSupport {
        let mut p11 = vk::PhysicalDeviceVulkan11Properties::default();
        let mut pc = vk::PhysicalDeviceCooperativeMatrixPropertiesKHR::default();
        let mut fc = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default();
        {
            let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut p11);
            if has_extension {
                p2 = p2.push_next(&mut pc);
            }
            // SAFETY: plain queries on a live instance; the chain's structures outlive them.
            unsafe { instance.get_physical_device_properties2(pd, &mut p2) };
            if has_extension {
                let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut fc);
                unsafe { instance.get_physical_device_features2(pd, &mut f2) };
            }
        }
        let mut s =
            CoopSupport { memory_model, subgroup_size: p11.subgroup_size, ..Default::default() };
        s.enabled = has_extension
            && fc.cooperative_matrix != 0
            && pc.cooperative_matrix_supported_stages.contains(vk::ShaderStageFlags::COMPUTE);
        if !s.enabled {
            return s;
        }
        let ext = ash::khr::cooperative_matrix::Instance::new(entry, instance);
        // SAFETY: the extension is offered by `pd`.
        let props = unsafe { ext.get_physical_device_cooperative_matrix_properties(pd) };
        s.products = props
            .unwrap_or_default()
            .iter()
            .filter(|p| p.scope == vk::ScopeKHR::SUBGROUP && p.saturating_accumulation == 0)
            .map(|p| Product {
                m: p.m_size,
                n: p.n_size,
                k: p.k_size,
                types: [p.a_type, p.b_type, p.c_type, p.result_type],
            })
            .collect();
        s
    }

    /// Why the device cannot run `entry`, whose SPIR-V is `words`, if it cannot.
    pub fn check(&self, device: &str, entry: &str, words: &[u32]) -> Result<(), String> {
        let used = uses(words);
        let Some(first) =
            used.products.first().copied().or(used.types.first().map(|t| t.as_product()))
        else {
            return Ok(());
        };
        let what = format!(
            "kernel `{entry}` uses cooperative matrices (SPV_KHR_cooperative_matrix, matrix \
             operations: {first})"
        );
        if !self.enabled {
            return Err(format!(
                "{what}, and Vulkan device `{device}` offers none (no VK_KHR_cooperative_matrix \
                 with cooperativeMatrix for compute shaders); run it on a device that has them, \
                 on CUDA, or on the interpreter"
            ));
        }
        if self.subgroup_size != 32 {
            return Err(format!(
                "{what}: the IR's sub-group is 32 work-items, and Vulkan device `{device}` has \
                 subgroups of {}",
                self.subgroup_size
            ));
        }
        if !self.memory_model {
            return Err(format!(
                "{what}: such modules use the Vulkan memory model, and Vulkan device `{device}` \
                 lacks the vulkanMemoryModel feature"
            ));
        }
        let offered = || {
            let list: Vec<String> = self.products.iter().map(Product::to_string).collect();
            if list.is_empty() {
                "none".to_string()
            } else {
                list.join(", ")
            }
        };
        for p in &used.products {
            if !self.products.contains(p) {
                return Err(format!(
                    "kernel `{entry}`: the cooperative-matrix product {p} (Subgroup scope) is not \
                     one Vulkan device `{device}` offers (it offers: {})",
                    offered()
                ));
            }
        }
        for t in &used.types {
            if !self.products.iter().any(|p| t.fits(p)) {
                return Err(format!(
                    "kernel `{entry}`: the cooperative matrix {t} (Subgroup scope) is not one \
                     Vulkan device `{device}` offers (it offers the products: {})",
                    offered()
                ));
            }
        }
        Ok(())
    }
}

/// The interpreter's rule for a launch of a kernel with matrix operations (`cooperative`):
/// work-groups of whole sub-groups (a multiple of 32 work-items).
pub(super) fn check_group(
    kernel: &str,
    cooperative: bool,
    local: [u32; 3],
) -> Result<(), crate::error::DeviceError> {
    let items: u64 = local.iter().map(|&x| x as u64).product();
    if !cooperative || items.is_multiple_of(32) {
        return Ok(());
    }
    Err(super::launch_err(format!(
        "kernel `{kernel}`: matrix operations need work-groups of a multiple of 32 work-items \
         (whole sub-groups); this launch's work-groups have {items}"
    )))
}

/// A cooperative matrix type a module declares: its use (0 A, 1 B, 2 accumulator), rows,
/// columns and component type.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct MatrixType {
    pub usage: u32,
    pub rows: u32,
    pub cols: u32,
    pub comp: vk::ComponentTypeKHR,
}

impl MatrixType {
    /// Whether the product `p` has this matrix as one of its operands or its result.
    fn fits(&self, p: &Product) -> bool {
        let (r, c) = (self.rows, self.cols);
        match self.usage {
            0 => (r, c, self.comp) == (p.m, p.k, p.types[0]),
            1 => (r, c, self.comp) == (p.k, p.n, p.types[1]),
            _ => (r, c) == (p.m, p.n) && (self.comp == p.types[2] || self.comp == p.types[3]),
        }
    }

    /// A product naming this matrix alone (for the message that the device has none).
    fn as_product(&self) -> Product {
        let t = self.comp;
        match self.usage {
            0 => Product { m: self.rows, n: 0, k: self.cols, types: [t; 4] },
            1 => Product { m: 0, n: self.cols, k: self.rows, types: [t; 4] },
            _ => Product { m: self.rows, n: self.cols, k: 0, types: [t; 4] },
        }
    }
}

impl fmt::Display for MatrixType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let role = match self.usage {
            0 => "A",
            1 => "B",
            _ => "accumulator",
        };
        write!(f, "{role} {}x{} of {}", self.rows, self.cols, type_name(self.comp))
    }
}

/// The cooperative matrices a module declares and the products it computes.
#[derive(Clone, Default, PartialEq, Eq)]
pub(super) struct Uses {
    pub types: Vec<MatrixType>,
    pub products: Vec<Product>,
}

/// Reads the cooperative matrix types and `OpCooperativeMatrixMulAddKHR`s of a module (the
/// words may come from disk: anything malformed is skipped, the driver then rejects it).
pub(super) fn uses(words: &[u32]) -> Uses {
    use std::collections::HashMap;
    const OP_TYPE_FLOAT: u32 = 22;
    const OP_CONSTANT: u32 = 43;
    const OP_LOAD: u32 = 61;
    const OP_COMPOSITE_CONSTRUCT: u32 = 80;
    const OP_TYPE_COOPERATIVE_MATRIX: u32 = 4456;
    const OP_COOPERATIVE_MATRIX_LOAD: u32 = 4457;
    const OP_COOPERATIVE_MATRIX_MUL_ADD: u32 = 4459;
    let mut floats: HashMap<u32, u32> = HashMap::new();
    let mut consts: HashMap<u32, u32> = HashMap::new();
    let mut types: HashMap<u32, MatrixType> = HashMap::new();
    // The type of each value that may be a cooperative matrix.
    let mut value_ty: HashMap<u32, u32> = HashMap::new();
    let mut out = Uses::default();
    let mut i = 5;
    while let Some(&w) = words.get(i) {
        let n = (w >> 16) as usize;
        if n == 0 || i + n > words.len() {
            break;
        }
        let inst = &words[i..i + n];
        match (w & 0xffff, inst.len()) {
            (OP_TYPE_FLOAT, 3..) => {
                floats.insert(inst[1], inst[2]);
            }
            (OP_CONSTANT, 4) => {
                consts.insert(inst[2], inst[3]);
            }
            (OP_TYPE_COOPERATIVE_MATRIX, 7) => {
                let comp = match floats.get(&inst[2]) {
                    Some(16) => vk::ComponentTypeKHR::FLOAT16,
                    Some(32) => vk::ComponentTypeKHR::FLOAT32,
                    Some(64) => vk::ComponentTypeKHR::FLOAT64,
                    _ => vk::ComponentTypeKHR::from_raw(i32::MAX),
                };
                let c = |id: u32| consts.get(&id).copied().unwrap_or(0);
                let t = MatrixType { usage: c(inst[6]), rows: c(inst[4]), cols: c(inst[5]), comp };
                types.insert(inst[1], t);
                if !out.types.contains(&t) {
                    out.types.push(t);
                }
            }
            (OP_LOAD | OP_COMPOSITE_CONSTRUCT | OP_COOPERATIVE_MATRIX_LOAD, 3..) => {
                value_ty.insert(inst[2], inst[1]);
            }
            (OP_COOPERATIVE_MATRIX_MUL_ADD, 6..) => {
                value_ty.insert(inst[2], inst[1]);
                let ty = |id: u32| value_ty.get(&id).and_then(|t| types.get(t)).copied();
                if let (Some(a), Some(b), Some(c), Some(r)) =
                    (ty(inst[3]), ty(inst[4]), ty(inst[5]), types.get(&inst[1]).copied())
                {
                    let p = Product {
                        m: a.rows,
                        n: b.cols,
                        k: a.cols,
                        types: [a.comp, b.comp, c.comp, r.comp],
                    };
                    if !out.products.contains(&p) {
                        out.products.push(p);
                    }
                }
            }
            _ => {}
        }
        i += n;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const F16: vk::ComponentTypeKHR = vk::ComponentTypeKHR::FLOAT16;
    const F32: vk::ComponentTypeKHR = vk::ComponentTypeKHR::FLOAT32;

    fn words(shape: &str) -> Vec<u32> {
        let n = if shape == "m16n8k16" { 8 } else { 16 };
        let src = format!(
            "kernel k(a: ptr<global, f16>, d: ptr<global, f32>) {{
  let fa: frag<a, {shape}, f16> = frag_load(a, 0u32, 16u32, row);
  let fb: frag<b, {shape}, f16> = frag_load(a, 0u32, {n}u32, row);
  let z: frag<acc, {shape}, f32> = frag_fill(0.0f32);
  var acc: frag<acc, {shape}, f32> = z;
  let r: frag<acc, {shape}, f32> = mma(fa, fb, acc);
  frag_store(d, 0u32, {n}u32, col, r);
}}"
        );
        let k = kiln_ir::parse_module(&src).unwrap().kernels.remove(0);
        kiln_backends::spirv::emit(&k, kiln_backends::spirv::Flavour::Vulkan).unwrap().words
    }

    fn product(n: u32) -> Product {
        Product { m: 16, n, k: 16, types: [F16, F16, F32, F32] }
    }

    #[test]
    fn products_and_types_are_read_from_the_module() {
        let u = uses(&words("m16n8k16"));
        assert_eq!(u.products.len(), 1);
        assert_eq!(u.products[0].to_string(), "m16n8k16 f16 x f16 + f32 -> f32");
        assert!(u.products[0] == product(8));
        let mut types: Vec<String> = u.types.iter().map(|t| t.to_string()).collect();
        types.sort();
        assert_eq!(types, ["A 16x16 of f16", "B 16x8 of f16", "accumulator 16x8 of f32"]);
        // A module without fragments uses none.
        let k = kiln_ir::parse_module("kernel c(x: ptr<global, f32>) { x[0] = 1.0; }").unwrap();
        let w = kiln_backends::spirv::emit(&k.kernels[0], kiln_backends::spirv::Flavour::Vulkan);
        assert!(uses(&w.unwrap().words) == Uses::default());
    }

    /// As the interpreter: work-groups of whole sub-groups, for kernels with fragments only.
    #[test]
    fn launches_need_whole_sub_groups() {
        check_group("k", true, [32, 2, 1]).unwrap();
        check_group("k", false, [48, 1, 1]).unwrap();
        let e = check_group("k", true, [16, 3, 1]).unwrap_err().to_string();
        assert!(
            e.contains(
                "kernel `k`: matrix operations need work-groups of a multiple of 32 work-items \
                 (whole sub-groups); this launch's work-groups have 48"
            ),
            "{e}"
        );
    }

    #[test]
    fn what_the_device_does_not_list_is_refused_by_name() {
        let dev = CoopSupport {
            enabled: true,
            products: vec![product(16)],
            memory_model: true,
            subgroup_size: 32,
        };
        dev.check("gpu", "k", &words("m16n16k16")).unwrap();
        let e = dev.check("gpu", "k", &words("m16n8k16")).unwrap_err();
        assert!(
            e.contains(
                "kernel `k`: the cooperative-matrix product m16n8k16 f16 x f16 + f32 -> f32 \
                 (Subgroup scope) is not one Vulkan device `gpu` offers (it offers: m16n16k16 \
                 f16 x f16 + f32 -> f32)"
            ),
            "{e}"
        );
        let wide = CoopSupport { subgroup_size: 64, ..dev.clone() };
        let e = wide.check("gpu", "k", &words("m16n16k16")).unwrap_err();
        assert!(
            e.contains(
                "the IR's sub-group is 32 work-items, and Vulkan device `gpu` has subgroups of 64"
            ),
            "{e}"
        );
        let old = CoopSupport { memory_model: false, ..dev.clone() };
        let e = old.check("gpu", "k", &words("m16n16k16")).unwrap_err();
        assert!(e.contains("lacks the vulkanMemoryModel feature"), "{e}");
        let none = CoopSupport::default();
        let e = none.check("cpu", "k", &words("m16n16k16")).unwrap_err();
        assert!(e.contains("Vulkan device `cpu` offers none"), "{e}");
    }
}
