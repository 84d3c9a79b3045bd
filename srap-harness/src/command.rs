//! Running an outside program (`ip`, `tc`, `objcopy`) whose failure is an
//! error with its stderr. A leaf module: the namespaces, the orphan sweep
//! and the guest image all run commands, and none of them should import
//! another for it.

use std::process::{Command, Output};

use anyhow::{Context as _, bail};

/// Runs `cmd`, returning its output, or an error with its stderr.
pub fn run(cmd: &mut Command) -> anyhow::Result<Output> {
    let output = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !output.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(output)
}
