//! Reading kernel memory at offsets the agent found in the kernel's BTF:
//! the fields whose place changed across kernels, read by the programs
//! that cannot use BTF-typed pointers (this kernel refuses tracing
//! programs, and aya's Rust has no CO-RE relocations).

use aya_ebpf::helpers::generated::bpf_probe_read_kernel;

/// A `T` read from kernel memory at `base + offset`; `None` when the read
/// fails.
#[inline(always)]
pub fn read_at<T: Copy + Default>(base: *const u8, offset: u32) -> Option<T> {
    let mut value = T::default();
    // SAFETY: a kernel read into a local of its size; a failed read
    // returns non-zero and leaves nothing used.
    let read = unsafe {
        bpf_probe_read_kernel(
            core::ptr::from_mut(&mut value).cast(),
            size_of::<T>() as u32,
            base.wrapping_add(offset as usize).cast(),
        )
    };
    (read == 0).then_some(value)
}
