//! `srap exec`: run a workload inside the steered cgroup.
//!
//! The simplest transparent way in: move this process into the cgroup
//! (`cgroup.procs`), then `exec()` the command. The workload replaces `srap`
//! in the same process, so its exit status and signals reach the caller
//! unchanged, and everything it forks stays in the cgroup.

use std::{
    ffi::OsString,
    fs,
    os::unix::process::CommandExt as _,
    path::{Component, Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

/// The cgroup `srap-agent sender` uses when none is named.
const DEFAULT_CGROUP: &str = "srap";

#[derive(clap::Args)]
pub struct Args {
    /// The steered cgroup (default `<cgroup2>/srap`; relative paths are below
    /// the cgroup2 mount): the same `--cgroup` given to `srap-agent sender`.
    #[arg(long, value_name = "PATH")]
    cgroup: Option<PathBuf>,
    /// The command and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    command: Vec<OsString>,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let mounts = fs::read_to_string("/proc/mounts").context("reading /proc/mounts")?;
    let Some(mount) = cgroup2_mount(&mounts) else {
        bail!(
            "no cgroup2 file system in /proc/mounts (under `ip netns exec`, /sys is \
             remounted without it: use `nsenter --net=/run/netns/NS srap exec …` instead)"
        );
    };
    let cgroup = resolve(&mount, args.cgroup.as_deref())?;
    let procs = cgroup.join("cgroup.procs");
    if !procs.exists() {
        bail!(
            "cgroup {} does not exist: start `srap-agent sender` first (it creates it), \
             or pass the --cgroup it uses",
            cgroup.display()
        );
    }
    // "0" means the writing process itself.
    fs::write(&procs, "0").with_context(|| {
        format!(
            "joining cgroup {} (writing {})",
            cgroup.display(),
            procs.display()
        )
    })?;
    let (program, rest) = args
        .command
        .split_first()
        .context("no command given: srap exec -- CMD ARGS…")?;
    let error = Command::new(program).args(rest).exec();
    Err(error).with_context(|| format!("running {}", program.to_string_lossy()))
}

/// The first `cgroup2` mount point in a `/proc/mounts` text (octal escapes
/// such as `\040` for a space decoded).
fn cgroup2_mount(mounts: &str) -> Option<PathBuf> {
    mounts.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (_, mount, fstype) = (fields.next()?, fields.next()?, fields.next()?);
        (fstype == "cgroup2").then(|| PathBuf::from(unescape(mount)))
    })
}

fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = (bytes[i] == b'\\')
            .then(|| field.get(i + 1..i + 4))
            .flatten()
            .and_then(|o| u8::from_str_radix(o, 8).ok());
        match octal {
            Some(byte) => {
                out.push(byte);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `--cgroup` as a directory inside the cgroup2 mount (and not the root).
fn resolve(mount: &Path, requested: Option<&Path>) -> anyhow::Result<PathBuf> {
    let path = match requested {
        None => mount.join(DEFAULT_CGROUP),
        Some(path) if path.is_absolute() => path.to_path_buf(),
        Some(path) => mount.join(path),
    };
    match path.strip_prefix(mount) {
        Ok(rest)
            if !rest.as_os_str().is_empty()
                && rest.components().all(|c| matches!(c, Component::Normal(_))) =>
        {
            Ok(path)
        }
        _ => bail!(
            "--cgroup {} is not a cgroup below the cgroup2 mount {}",
            path.display(),
            mount.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_cgroup2_and_resolves_below_it() {
        let mounts = "cgroup /sys/fs/cgroup/cpu cgroup rw 0 0\n\
                      cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n";
        let mount = cgroup2_mount(mounts).unwrap();
        assert_eq!(mount, Path::new("/sys/fs/cgroup/unified"));
        assert_eq!(
            resolve(&mount, None).unwrap(),
            Path::new("/sys/fs/cgroup/unified/srap")
        );
        assert!(resolve(&mount, Some(Path::new("../x"))).is_err());
        assert!(resolve(&mount, Some(Path::new("/tmp"))).is_err());
        assert_eq!(
            cgroup2_mount("x /a\\040b cgroup2 rw 0 0").unwrap(),
            Path::new("/a b")
        );
    }
}
