//! `cargo xtask package`: the `srap` Debian package and, with `--rpm`, the
//! RPM beside it, both from one tree staged here: no cargo-deb, rpmbuild
//! or spec file. The .deb is built with `dpkg-deb`, the .rpm with the
//! `rpm` crate; what they hold and what their scripts do is defined once
//! (`contents`, `scripts`), and the RPM check compares the two.
//!
//! The binaries are linked against glibc 2.28 (`portable` says why), so
//! one build runs on Debian and on RHEL 8 and 9 alike. The
//! man pages and completions come from the built binaries themselves
//! (`srap manpages DIR`, `srap completions SHELL`, and the same hidden
//! commands of `srap-agent`), so xtask needs neither the agent's crates nor
//! nightly. The units and the example settings are files under `deploy/`.

pub mod check;
pub mod contents;
mod deb;
pub mod elf;
mod files;
pub mod portable;
mod rpm;
pub mod rpm_check;
pub mod scripts;
mod stage;
pub mod units;

use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};

use self::{contents::Format, stage::stage};
pub use self::{portable::Profile, rpm::BuiltRpm};
use crate::exec::target_dir;

/// The packages one `build` wrote.
pub struct Built {
    pub deb: PathBuf,
    pub rpm: Option<BuiltRpm>,
}

/// Builds the binaries, stages the tree and writes the .deb and, with
/// `rpm`, the .rpm into `out` (default: the target directory's `package/`).
pub fn build(profile: Profile, rpm: bool, out: Option<&Path>) -> Result<Built> {
    let bins = portable::build(profile)?;
    let target = target_dir();
    let out = out.map_or_else(|| target.join("package"), Path::to_path_buf);
    fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let stages = target.join("package-root").join(profile.dir());
    let deb_stage = stages.join("deb");
    stage(&bins, &deb_stage, Format::Deb)?;
    let deb = deb::build(&deb_stage, &out)?;
    println!("package: {}", deb.display());
    let rpm = if rpm {
        let rpm_stage = stages.join("rpm");
        stage(&bins, &rpm_stage, Format::Rpm)?;
        let built = rpm::build(&rpm_stage, &out)?;
        println!("package: {}", built.path.display());
        Some(built)
    } else {
        None
    };
    Ok(Built { deb, rpm })
}
