//! What every eBPF object of this crate carries, whatever its programs: the
//! panic handler `no_std` needs and the license section the kernel reads.

/// eBPF programs cannot unwind; the kernel's verifier rejects any path that would reach
/// this, so it is never executed.
#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo<'_>) -> ! {
    loop {}
}

/// GPL-compatible, so the kernel lets the programs use GPL-only helpers.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
