//! The lab's own eBPF object, embedded in the harness. It holds the bytes
//! and nothing else: loading and attaching its programs is the emulator's,
//! the drift injector's and the benchmarks' business.

/// The lab's eBPF object (`srap-ebpf`'s `srap-lab` binary): the RSS-NIC
/// emulator, the benchmarks' bare programs of each hook and the audit
/// tests' drift injector, built by
/// `srap-daemon`'s build script beside the agents' object and embedded here,
/// so only the lab, the tests and the benchmarks carry them.
pub fn lab_ebpf_object() -> &'static [u8] {
    static OBJECT: &[u8] = aya::include_bytes_aligned!(env!("SRAP_LAB_EBPF_OBJECT"));
    OBJECT
}
