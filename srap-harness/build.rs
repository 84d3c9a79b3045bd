//! Points `srap_harness::lab_ebpf_object` at the lab's eBPF object, which
//! `srap-daemon`'s build script builds beside the agents' own and names
//! through its `links` metadata.

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_SRAP_EBPF_OBJECTS");
    match std::env::var("DEP_SRAP_EBPF_OBJECTS") {
        Ok(dir) => println!("cargo:rustc-env=SRAP_LAB_EBPF_OBJECT={dir}/srap-lab"),
        Err(_) => {
            println!("cargo:warning=srap-daemon gave no DEP_SRAP_EBPF_OBJECTS");
            std::process::exit(1);
        }
    }
}
