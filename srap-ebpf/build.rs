//! Rebuild the eBPF object when `bpf-linker` changes: cargo cannot see that
//! dependency (it is a linker, not a crate), so point it at the binary's mtime.
fn main() {
    match which::which("bpf-linker") {
        Ok(path) => println!("cargo:rerun-if-changed={}", path.display()),
        Err(err) => println!("cargo:warning=bpf-linker not found ({err}); run `cargo xtask setup`"),
    }
}
