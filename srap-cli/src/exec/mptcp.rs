//! `srap exec --mptcp`: a TCP application's sockets become MPTCP without
//! changing it, through mptcpize's library (`libmptcpwrap.so.0`, preloaded:
//! its `socket()` asks for `IPPROTO_MPTCP` where the application asks for
//! TCP). The kernel's own way, a BPF program on `update_socket_protocol`,
//! is a tracing program (`fmod_ret`); hosts that refuse tracing programs
//! (this project's test machines do) cannot use it, so it is not offered.
//!
//! A preload reaches only a dynamically linked program that the loader
//! does not run in secure mode: a static binary, or a set-user-ID one,
//! would keep plain TCP without a word, so both are refused up front.

use std::{
    ffi::{OsStr, OsString},
    fs,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
};

use thiserror::Error;

/// `/proc/sys/net/mptcp/enabled`: MPTCP for this network namespace.
const ENABLED: &str = "/proc/sys/net/mptcp/enabled";

/// Why a command cannot be run as MPTCP.
#[derive(Debug, Error)]
pub enum MptcpError {
    #[error(
        "this kernel has no MPTCP ({ENABLED} is missing: a kernel built without \
         CONFIG_MPTCP); run the command without --mptcp"
    )]
    NoKernelMptcp,
    #[error(
        "MPTCP is off in this network namespace (net.mptcp.enabled = 0): \
         `sysctl -w net.mptcp.enabled=1`, or run without --mptcp"
    )]
    Disabled,
    #[error(
        "mptcpize's library (libmptcpwrap.so.0) is not installed: looked in {looked}. \
         Install mptcpize (Debian, Ubuntu: `apt install mptcpize`; Fedora, RHEL: \
         `dnf install mptcpd`)"
    )]
    NoLibrary { looked: String },
    #[error("{program}: not found in PATH")]
    NotFound { program: String },
    #[error(
        "{program} is statically linked: a preloaded library cannot reach its sockets, \
         which would stay plain TCP. Run a dynamically linked build, or make the \
         application open MPTCP sockets itself (IPPROTO_MPTCP)"
    )]
    Static { program: String },
    #[error(
        "{program} is set-user-ID or set-group-ID: the loader ignores LD_PRELOAD for it, \
         so its sockets would stay plain TCP"
    )]
    SetId { program: String },
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// How the command's sockets become MPTCP: the library to preload.
#[derive(Debug, PartialEq, Eq)]
pub struct Mptcpize {
    pub library: PathBuf,
}

impl Mptcpize {
    /// Checks that `program` (as `exec` will find it) can run as MPTCP in
    /// this namespace, and finds the library.
    pub fn for_program(program: &OsStr) -> Result<Self, MptcpError> {
        namespace_enabled()?;
        let library = library()?;
        let path = resolve(program)?;
        preload_reaches(&path)?;
        Ok(Self { library })
    }

    /// `LD_PRELOAD` with the library first and what the caller already
    /// preloads after it.
    pub fn ld_preload(&self, existing: Option<&OsStr>) -> OsString {
        let mut value = self.library.as_os_str().to_owned();
        if let Some(existing) = existing.filter(|e| !e.is_empty()) {
            value.push(":");
            value.push(existing);
        }
        value
    }
}

fn namespace_enabled() -> Result<(), MptcpError> {
    match fs::read_to_string(ENABLED) {
        Ok(text) if text.trim() == "0" => Err(MptcpError::Disabled),
        Ok(_) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Err(MptcpError::NoKernelMptcp),
        Err(source) => Err(MptcpError::Read {
            path: ENABLED.into(),
            source,
        }),
    }
}

/// Where distributions install the library: Debian's multiarch directory,
/// then Fedora's and a plain `/usr/lib`.
fn library_candidates() -> Vec<PathBuf> {
    let arch = std::env::consts::ARCH;
    [
        format!("/usr/lib/{arch}-linux-gnu/mptcpize"),
        "/usr/lib64/mptcpize".to_owned(),
        "/usr/lib/mptcpize".to_owned(),
    ]
    .into_iter()
    .map(|dir| Path::new(&dir).join("libmptcpwrap.so.0"))
    .collect()
}

fn library() -> Result<PathBuf, MptcpError> {
    let candidates = library_candidates();
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| MptcpError::NoLibrary {
            looked: candidates
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// The file `exec` runs for `program`: itself when it names a path, else
/// the first executable of that name in `PATH`.
fn resolve(program: &OsStr) -> Result<PathBuf, MptcpError> {
    let as_path = Path::new(program);
    if as_path.components().count() > 1 {
        return Ok(as_path.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| {
            fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .ok_or_else(|| MptcpError::NotFound {
            program: program.to_string_lossy().into_owned(),
        })
}

/// Refuses a program the preload cannot reach: an ELF without an
/// interpreter (static), or one the loader runs in secure mode. A script
/// (`#!`) is run by its interpreter, which the preload reaches.
fn preload_reaches(path: &Path) -> Result<(), MptcpError> {
    let read = |source| MptcpError::Read {
        path: path.to_path_buf(),
        source,
    };
    let program = path.display().to_string();
    let mode = fs::metadata(path).map_err(read)?.permissions().mode();
    if mode & 0o6000 != 0 {
        return Err(MptcpError::SetId { program });
    }
    let bytes = fs::read(path).map_err(read)?;
    match elf_has_interpreter(&bytes) {
        Some(false) => Err(MptcpError::Static { program }),
        Some(true) | None => Ok(()),
    }
}

/// `PT_INTERP`: the program header naming the dynamic loader.
const PT_INTERP: u32 = 3;

/// Whether a 64- or 32-bit little-endian ELF file has a `PT_INTERP`
/// program header (`None`: not such an ELF file, e.g. a script).
fn elf_has_interpreter(bytes: &[u8]) -> Option<bool> {
    if bytes.get(..4)? != b"\x7fELF" || *bytes.get(5)? != 1 {
        return None;
    }
    let u16_at = |at: usize| Some(u16::from_le_bytes(bytes.get(at..at + 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?));
    let (phoff, entsize, count) = match *bytes.get(4)? {
        2 => (
            usize::try_from(u64_at(0x20)?).ok()?,
            u16_at(0x36)?,
            u16_at(0x38)?,
        ),
        1 => (
            usize::try_from(u32_at(0x1c)?).ok()?,
            u16_at(0x2a)?,
            u16_at(0x2c)?,
        ),
        _ => return None,
    };
    let mut found = false;
    for i in 0..usize::from(count) {
        let at = phoff.checked_add(i.checked_mul(usize::from(entsize))?)?;
        if u32_at(at)? == PT_INTERP {
            found = true;
        }
    }
    Some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test binary is linked dynamically: it has an interpreter.
    #[test]
    fn a_dynamic_executable_has_an_interpreter() {
        let bytes = fs::read("/proc/self/exe").expect("this test's binary");
        assert_eq!(elf_has_interpreter(&bytes), Some(true));
    }

    /// A static ELF (built here from its header fields: one `PT_LOAD`, no
    /// `PT_INTERP`) has none; a script is no ELF; a cut header is no
    /// answer, not a panic.
    #[test]
    fn static_scripts_and_cut_files_are_told_apart() {
        let mut elf = vec![0u8; 0x40 + 0x38];
        elf[..4].copy_from_slice(b"\x7fELF");
        elf[4] = 2; // 64-bit
        elf[5] = 1; // little-endian
        elf[0x20..0x28].copy_from_slice(&0x40u64.to_le_bytes());
        elf[0x36..0x38].copy_from_slice(&0x38u16.to_le_bytes());
        elf[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        elf[0x40..0x44].copy_from_slice(&1u32.to_le_bytes()); // PT_LOAD
        assert_eq!(elf_has_interpreter(&elf), Some(false));
        elf[0x40..0x44].copy_from_slice(&PT_INTERP.to_le_bytes());
        assert_eq!(elf_has_interpreter(&elf), Some(true));
        assert_eq!(elf_has_interpreter(b"#!/bin/sh\necho\n"), None);
        assert_eq!(elf_has_interpreter(&elf[..0x30]), None);
        assert_eq!(elf_has_interpreter(&elf[..0x42]), None);
    }

    #[test]
    fn the_library_goes_first_in_ld_preload() {
        let wrap = Mptcpize {
            library: "/usr/lib/x/libmptcpwrap.so.0".into(),
        };
        assert_eq!(wrap.ld_preload(None), "/usr/lib/x/libmptcpwrap.so.0");
        assert_eq!(
            wrap.ld_preload(Some(OsStr::new(""))),
            "/usr/lib/x/libmptcpwrap.so.0"
        );
        assert_eq!(
            wrap.ld_preload(Some(OsStr::new("/opt/a.so"))),
            "/usr/lib/x/libmptcpwrap.so.0:/opt/a.so"
        );
    }

    #[test]
    fn a_program_not_in_path_is_named() {
        let err = resolve(OsStr::new("srap-no-such-program")).expect_err("not found");
        assert!(err.to_string().contains("srap-no-such-program"), "{err}");
    }
}
