//! Loading the binder with its maps pinned, attaching its programs to the
//! cgroup through pinned links, and taking all of it down again.
//!
//! Loading always goes through the pins: a map already pinned is reused (its
//! occupancy and socket records carry over to a restarted agent), a missing
//! one is created and pinned. The programs are loaded with the agent's
//! settings as constants ([`LoadConfig`]) and every one of them is verified
//! before anything is attached, so the cgroup they serve is created only
//! once steering can begin at once. A link already pinned stays attached
//! and gets the new program behind it in one step (`BPF_LINK_UPDATE`): a
//! restarted or upgraded agent never leaves a connect unsteered. A program
//! the settings do not use is not loaded, and its pinned link, if a
//! previous agent left one, is removed.

use std::{
    fs, io,
    os::fd::{AsFd, BorrowedFd},
    path::{Path, PathBuf},
};

use aya::{
    Ebpf, EbpfLoader,
    programs::{
        CgroupAttachMode, CgroupSock, CgroupSockAddr, Program, ProgramError, SockOps, links::FdLink,
    },
};
use srap_common::binder::{
    BinderSizes, CLOSE_PROGRAM, LOAD_CONFIG_GLOBAL, LoadConfig, PINNED_MAPS, RELEASE_PROGRAM,
    SizeSetting,
};
use srap_status::sender::ProgramRow;
use tracing::{debug, info, warn};

use self::seam::{Attacher, Bpffs, Pins, remove_if_present};
use super::{
    error::SenderError,
    layout::{PROGRAMS, PinLayout},
};

mod seam;
#[cfg(test)]
mod tests;
pub mod trace;

/// Fails unless `dir` (or its nearest existing ancestor) is on bpffs, after
/// mounting bpffs at `/sys/fs/bpf` if `dir` is under it and none is there.
pub fn check_bpffs(dir: &Path) -> Result<(), SenderError> {
    srap_host::bpffs::mount_if_missing(dir).map_err(|source| SenderError::Io {
        what: format!("mounting bpffs at {}", srap_host::bpffs::BPFFS_ROOT),
        source,
    })?;
    let existing = dir.ancestors().find(|p| p.exists()).unwrap_or(dir);
    let on_bpffs = srap_host::bpffs::is_bpffs(existing).map_err(|source| SenderError::Io {
        what: format!("statfs {}", existing.display()),
        source,
    })?;
    if !on_bpffs {
        return Err(SenderError::NotBpffs {
            dir: dir.to_path_buf(),
        });
    }
    Ok(())
}

/// Checks the maps pinned under `layout` against this agent's: a map whose
/// key or value differs was left by another SRAP version (reusing it would
/// misread every entry) and is refused. A map of another size than `sizes`
/// make it is re-created while no program is attached (nothing claims in
/// it then), and refused under an attached binder, naming the settings the
/// pins were made with: the occupancy maps hold the open flows' slots, and
/// the attached programs keep using the maps they were loaded with.
fn check_pinned_maps(
    pins: &mut impl Pins,
    layout: &PinLayout,
    sizes: &BinderSizes,
) -> Result<(), SenderError> {
    let mut resized = Vec::new();
    for spec in PINNED_MAPS {
        let path = layout.map(spec.name);
        if !pins.exists(&path) {
            continue;
        }
        let shape = pins.map_shape(spec.name, &path)?;
        let found = (shape.key_size, shape.value_size);
        let wanted = (spec.key_size, spec.value_size);
        if found != wanted {
            return Err(SenderError::StalePins {
                dir: layout.dir().to_path_buf(),
                detail: format!(
                    "{} has key/value sizes {found:?}, this agent uses {wanted:?}",
                    spec.name,
                ),
            });
        }
        if shape.max_entries != spec.max_entries(sizes) {
            resized.push((spec.name, shape.max_entries, spec.max_entries(sizes)));
        }
    }
    if resized.is_empty() {
        return Ok(());
    }
    let maps: Vec<String> = resized
        .iter()
        .map(|(name, pinned, wanted)| format!("{name} {pinned} → {wanted} entries"))
        .collect();
    if PROGRAMS.iter().any(|p| pins.exists(&layout.link(p))) {
        return Err(SenderError::PinnedSizes {
            dir: layout.dir().to_path_buf(),
            pinned: pins
                .pinned_sizes(layout)
                .map_or_else(|| "other settings".into(), |s| settings_text(&s)),
            wanted: settings_text(sizes),
            maps: maps.join(", "),
        });
    }
    for (name, ..) in &resized {
        pins.remove(&layout.map(name))?;
    }
    info!(
        "no binder attached under {}: re-created its maps for {} ({})",
        layout.dir().display(),
        settings_text(sizes),
        maps.join(", ")
    );
    Ok(())
}

/// The settings the pinned maps were sized by, from the pinned config (an
/// agent writes them there with its first plan).
pub fn pinned_sizes(layout: &PinLayout) -> Option<BinderSizes> {
    Bpffs.pinned_sizes(layout)
}

/// `sizes` as the flags that set them.
pub fn settings_text(sizes: &BinderSizes) -> String {
    let flags: Vec<String> = SizeSetting::ALL
        .iter()
        .map(|s| format!("--{} {}", s.key(), sizes.get(*s)))
        .collect();
    flags.join(" ")
}

/// Loads the object with every binder map opened from, or created at, its
/// pin, each created with the entries `sizes` give it, and `config` as the
/// programs' load-time settings (no program is verified yet: `verify` does that).
/// Any object whose maps bear the binder's names shares them so: the lab's
/// drift injector is loaded this way beside a running binder.
pub fn load(
    layout: &PinLayout,
    object: &[u8],
    sizes: &BinderSizes,
    config: &LoadConfig,
) -> Result<Ebpf, SenderError> {
    check_bpffs(layout.dir())?;
    fs::create_dir_all(layout.dir()).map_err(|source| SenderError::Io {
        what: format!("creating pin directory {}", layout.dir().display()),
        source,
    })?;
    check_pinned_maps(&mut Bpffs, layout, sizes)?;
    let mut loader = EbpfLoader::new();
    for spec in PINNED_MAPS {
        loader.map_pin_path(spec.name, layout.map(spec.name));
        loader.map_max_entries(spec.name, spec.max_entries(sizes));
    }
    loader.override_global(LOAD_CONFIG_GLOBAL, config, true);
    loader.load(object).map_err(SenderError::Load)
}

/// Loads (the kernel's verifier walks) each program of `names`: the slow
/// part of a start, done before the cgroup exists. Returns what each cost.
pub fn verify(ebpf: &mut Ebpf, names: &[&'static str]) -> Result<Vec<ProgramRow>, SenderError> {
    names.iter().map(|&name| verify_one(ebpf, name)).collect()
}

fn verify_one(ebpf: &mut Ebpf, name: &'static str) -> Result<ProgramRow, SenderError> {
    let program = ebpf.program_mut(name).ok_or(SenderError::Missing(name))?;
    let program_error = |source| SenderError::Program {
        program: name,
        source,
    };
    let started = std::time::Instant::now();
    macro_rules! load_as {
        ($($kind:ident),*) => {
            match program {
                $(Program::$kind(p) => {
                    p.load().map_err(program_error)?;
                    p.info().ok().and_then(|info| info.verified_instruction_count())
                })*
                _ => return Err(SenderError::Missing(name)),
            }
        };
    }
    let walked = load_as!(CgroupSockAddr, CgroupSock, SockOps);
    let load_ms = started.elapsed().as_millis() as u64;
    note_verifier_walk(name, walked, load_ms);
    Ok(ProgramRow {
        name: name.to_owned(),
        verified_insns: walked.unwrap_or(0),
        load_ms,
    })
}

/// How the binder came to be attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attachment {
    /// This agent attached and pinned the links.
    Attached,
    /// The links were pinned already (a previous agent): they stayed
    /// attached, and run this agent's programs now.
    Adopted,
}

/// Attaches each program of `wanted` (loaded: [`verify`]) to `cgroup`, or
/// puts it behind its link if one is pinned already; removes the pinned
/// link of every other binder program.
///
/// Link file descriptors are closed on return: the pins alone keep the
/// programs attached, so `srap-agent detach` really detaches even while an
/// agent runs.
pub fn ensure_attached(
    ebpf: &mut Ebpf,
    layout: &PinLayout,
    cgroup: &Path,
    wanted: &[&'static str],
) -> Result<Attachment, SenderError> {
    let mut attacher = CgroupAttacher {
        ebpf,
        layout,
        cgroup: cgroup.to_path_buf(),
    };
    attach_missing(&mut Bpffs, &mut attacher, layout, wanted)
}

/// [`ensure_attached`]'s decisions: each program of [`PROGRAMS`] in that
/// order that `wanted` names is put behind its link when one is pinned
/// (and opens as a link), attached by `attacher` otherwise; a stray file
/// where a link's pin should be stops it. Then the links of the programs
/// `wanted` leaves out are removed (the settings no longer use them).
fn attach_missing(
    pins: &mut impl Pins,
    attacher: &mut impl Attacher,
    layout: &PinLayout,
    wanted: &[&'static str],
) -> Result<Attachment, SenderError> {
    let mut adopted = 0;
    for name in PROGRAMS.into_iter().filter(|n| wanted.contains(n)) {
        let link_pin = layout.link(name);
        if pins.exists(&link_pin) {
            // Opening it proves it is a live link, not a stray file.
            pins.open_link(&link_pin)
                .map_err(|err| SenderError::StalePins {
                    dir: layout.dir().to_path_buf(),
                    detail: format!("{} is not a usable link: {err}", link_pin.display()),
                })?;
            attacher.replace(name)?;
            debug!(link = %link_pin.display(), "this agent's program behind the pinned link");
            adopted += 1;
            continue;
        }
        attacher.attach_and_pin(name)?;
    }
    for name in PROGRAMS.into_iter().filter(|n| !wanted.contains(n)) {
        if pins.remove(&layout.link(name))? {
            pins.remove(&layout.program(name))?;
            info!(program = name, "detached: these settings do not use it");
        }
    }
    match adopted {
        0 => Ok(Attachment::Attached),
        n if n == wanted.len() => Ok(Attachment::Adopted),
        n => {
            warn!(
                "{n} of {} links were pinned already; attached the rest",
                wanted.len()
            );
            Ok(Attachment::Adopted)
        }
    }
}

/// The binder's three types of cgroup program (`sock_release` is a
/// [`CgroupSock`], the TCP close's a [`SockOps`], the connect and bind
/// hooks are [`CgroupSockAddr`]s): loaded, attached and their link taken
/// alike.
trait CgroupHook {
    /// Attaches program `name` (loaded) to `cgroup` and takes its link
    /// out of the program, so that the pin alone keeps it attached.
    fn link_to(
        &mut self,
        name: &'static str,
        cgroup: BorrowedFd<'_>,
    ) -> Result<FdLink, SenderError>;
}

macro_rules! cgroup_hook {
    ($($program:ty),+) => {$(
        impl CgroupHook for $program {
            fn link_to(
                &mut self,
                name: &'static str,
                cgroup: BorrowedFd<'_>,
            ) -> Result<FdLink, SenderError> {
                let program_error = |source| SenderError::Program {
                    program: name,
                    source,
                };
                let id = self
                    .attach(cgroup, CgroupAttachMode::Single)
                    .map_err(program_error)?;
                let link = self.take_link(id).map_err(program_error)?;
                link.try_into().map_err(|source| SenderError::Link {
                    program: name,
                    source,
                })
            }
        }
    )+};
}

cgroup_hook!(CgroupSock, CgroupSockAddr, SockOps);

/// The kernel verifier's budget of instructions walked per program.
const VERIFIER_BUDGET: u32 = 1_000_000;

/// Says how much of the kernel verifier's budget program `name` took on
/// this kernel (`verified_insns`, Linux 5.16+) and how long: the settings
/// decide how much of each hook is walked, and a kernel whose verifier
/// walks more is the one to know about before it refuses a hook. At info
/// for a program past a tenth of the budget, at debug for the others.
fn note_verifier_walk(name: &str, walked: Option<u32>, load_ms: u64) {
    let Some(walked) = walked else {
        return;
    };
    if walked > VERIFIER_BUDGET / 10 {
        info!(
            "{name}: the kernel's verifier walked {walked} of its {VERIFIER_BUDGET} \
             instructions in {load_ms} ms"
        );
    } else {
        debug!("{name}: the kernel's verifier walked {walked} instructions in {load_ms} ms");
    }
}

/// Program `name` of `ebpf` as a `P`, linked to `cgroup`.
fn link_to_cgroup<P>(
    ebpf: &mut Ebpf,
    name: &'static str,
    cgroup: BorrowedFd<'_>,
) -> Result<FdLink, SenderError>
where
    P: CgroupHook,
    for<'p> &'p mut P: TryFrom<&'p mut Program, Error = ProgramError>,
{
    let program = ebpf.program_mut(name).ok_or(SenderError::Missing(name))?;
    let program: &mut P = program.try_into().map_err(|source| SenderError::Program {
        program: name,
        source,
    })?;
    program.link_to(name, cgroup)
}

fn attach_one(
    ebpf: &mut Ebpf,
    layout: &PinLayout,
    name: &'static str,
    cgroup: &Path,
) -> Result<(), SenderError> {
    let cgroup_fd = fs::File::open(cgroup).map_err(|source| SenderError::Io {
        what: format!("opening cgroup {}", cgroup.display()),
        source,
    })?;
    let link = match name {
        RELEASE_PROGRAM => link_to_cgroup::<CgroupSock>(ebpf, name, cgroup_fd.as_fd())?,
        CLOSE_PROGRAM => link_to_cgroup::<SockOps>(ebpf, name, cgroup_fd.as_fd())?,
        _ => link_to_cgroup::<CgroupSockAddr>(ebpf, name, cgroup_fd.as_fd())?,
    };
    let pin_error = |source| SenderError::Pin {
        path: layout.link(name),
        source,
    };
    // Pin the link first: from here on it outlives this process.
    drop(link.pin(layout.link(name)).map_err(pin_error)?);
    let program = ebpf.program_mut(name).ok_or(SenderError::Missing(name))?;
    pin_program(program, layout, name)?;
    info!(program = name, cgroup = %cgroup.display(), "attached and pinned");
    Ok(())
}

/// Pins `program` at its pin, in place of whatever program was there.
fn pin_program(
    program: &mut Program,
    layout: &PinLayout,
    name: &'static str,
) -> Result<(), SenderError> {
    let program_pin = layout.program(name);
    remove_if_present(&program_pin)?;
    program
        .pin(&program_pin)
        .map_err(|source| SenderError::Pin {
            path: program_pin.clone(),
            source,
        })
}

/// Puts program `name` (loaded) behind its pinned link in place of the
/// program a previous agent left there, and pins it where that one was.
fn replace_one(ebpf: &mut Ebpf, layout: &PinLayout, name: &'static str) -> Result<(), SenderError> {
    let link_pin = layout.link(name);
    let io_error = |what: String| move |source| SenderError::Io { what, source };
    let link = srap_host::bpf_sys::obj_get(&link_pin).map_err(io_error(format!(
        "opening the link pinned at {}",
        link_pin.display()
    )))?;
    let program = ebpf.program_mut(name).ok_or(SenderError::Missing(name))?;
    let fd = program.fd().map_err(|source| SenderError::Program {
        program: name,
        source,
    })?;
    srap_host::bpf_sys::link_update(link.as_fd(), fd.as_fd()).map_err(io_error(format!(
        "putting {name} behind its link {} (BPF_LINK_UPDATE, Linux 5.7+)",
        link_pin.display()
    )))?;
    pin_program(program, layout, name)
}

/// Removes every pin the binder made (links first: that detaches), then the
/// pin directory if nothing else is in it. Returns the pins removed.
pub fn remove_pins(layout: &PinLayout) -> Result<usize, SenderError> {
    let mut removed = 0;
    for pin in layout.all_pins() {
        if remove_if_present(&pin)? {
            removed += 1;
        }
    }
    match fs::remove_dir(layout.dir()) {
        Ok(()) => {}
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => warn!(
            "left {} in place: {err} (it holds pins SRAP did not make)",
            layout.dir().display()
        ),
    }
    Ok(removed)
}

/// The binder's programs of a loaded object, attached to one cgroup and
/// pinned under one layout.
pub(crate) struct CgroupAttacher<'a> {
    pub ebpf: &'a mut Ebpf,
    pub layout: &'a PinLayout,
    pub cgroup: PathBuf,
}

impl Attacher for CgroupAttacher<'_> {
    fn attach_and_pin(&mut self, name: &'static str) -> Result<(), SenderError> {
        attach_one(self.ebpf, self.layout, name, &self.cgroup)
    }

    fn replace(&mut self, name: &'static str) -> Result<(), SenderError> {
        replace_one(self.ebpf, self.layout, name)
    }
}
