//! How much of its budget the kernel's verifier spends on each program of
//! an eBPF object: loads every program of `OBJECT` (default: the object the
//! agent embeds) into the running kernel, prints the instructions the
//! kernel's verifier walked (`verified_insns`, of its 1 000 000 limit), and unloads
//! them. Root. For comparing a change of the hooks against the build before
//! it: `cargo run -p srap-tests --example kernel_verifier_walk -- [OBJECT]`.

use anyhow::{Context as _, Result};
use aya::{Ebpf, programs::Program};

fn main() -> Result<()> {
    let bytes;
    let object: &[u8] = match std::env::args().nth(1) {
        Some(path) => {
            bytes = std::fs::read(&path).with_context(|| format!("reading {path}"))?;
            &bytes
        }
        None => srap_daemon::ebpf_object(),
    };
    let mut ebpf = Ebpf::load(object).context("loading the object's maps")?;
    let names: Vec<String> = ebpf.programs().map(|(name, _)| name.to_owned()).collect();
    for name in names {
        let program = ebpf.program_mut(&name).context("a listed program")?;
        match load(program) {
            Ok(walked) => println!("{name:24} {walked:>9} instructions walked"),
            Err(err) => println!("{name:24} refused: {}", first_line(&format!("{err:#}"))),
        }
    }
    Ok(())
}

/// Loads one program; the instructions the kernel's verifier walked.
fn load(program: &mut Program) -> Result<u32> {
    macro_rules! each {
        ($($kind:ident),*) => {
            match program {
                $(Program::$kind(p) => {
                    p.load()?;
                    let walked = p.info()?.verified_instruction_count().unwrap_or(0);
                    Ok(walked)
                })*
                _ => anyhow::bail!("a program type this tool does not load"),
            }
        };
    }
    each!(CgroupSockAddr, CgroupSock, SchedClassifier, Xdp, SockOps)
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}
