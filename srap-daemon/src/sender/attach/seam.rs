//! The seam between the attach path's decisions and bpffs and the kernel:
//! what is pinned, what a pinned map is shaped like, removing a pin
//! ([`Pins`]), and attaching one program ([`Attacher`]). [`Bpffs`] and
//! [`CgroupAttacher`] are the real ones (a file system call or an aya call
//! each); unit tests put in-memory ones in their place, with no root.

use std::{fs, io, path::Path};

use aya::{
    maps::{Array, Map, MapData, MapInfo},
    programs::links::{LinkError, PinnedLink},
};
use srap_common::binder::{BinderConfig, BinderSizes, CONFIG_MAP};

use crate::sender::{error::SenderError, layout::PinLayout};

/// What a pinned map was created with, as far as reusing it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MapShape {
    pub key_size: usize,
    pub value_size: usize,
    pub max_entries: u32,
}

/// The pins under a pin directory, and what they hold.
pub(crate) trait Pins {
    /// Whether something is pinned (or a stray file lies) at `path`.
    fn exists(&self, path: &Path) -> bool;

    /// Opens the link pinned at `path`, which proves it is a live link;
    /// the error says why not.
    fn open_link(&self, path: &Path) -> Result<(), LinkError>;

    /// The shape of map `name` pinned at `path`.
    fn map_shape(&self, name: &'static str, path: &Path) -> Result<MapShape, SenderError>;

    /// Removes the pin at `path`; false if there was none.
    fn remove(&mut self, path: &Path) -> Result<bool, SenderError>;

    /// The settings the pinned config was written with, if it reads as
    /// valid settings.
    fn pinned_sizes(&self, layout: &PinLayout) -> Option<BinderSizes>;
}

/// Attaches one of the binder's programs and pins it.
pub(crate) trait Attacher {
    /// Attaches program `name` (loaded) to the cgroup, pins its link
    /// (from then on it outlives this process), then pins the program.
    fn attach_and_pin(&mut self, name: &'static str) -> Result<(), SenderError>;

    /// Puts program `name` (loaded) behind the link pinned for it, in
    /// place of the program it runs, and pins the program.
    fn replace(&mut self, name: &'static str) -> Result<(), SenderError>;
}

/// The real pins, on bpffs.
pub(crate) struct Bpffs;

impl Pins for Bpffs {
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn open_link(&self, path: &Path) -> Result<(), LinkError> {
        PinnedLink::from_pin(path).map(drop)
    }

    fn map_shape(&self, name: &'static str, path: &Path) -> Result<MapShape, SenderError> {
        let info =
            MapInfo::from_pin(path).map_err(|source| SenderError::Map { map: name, source })?;
        Ok(MapShape {
            key_size: info.key_size() as usize,
            value_size: info.value_size() as usize,
            max_entries: info.max_entries(),
        })
    }

    fn remove(&mut self, path: &Path) -> Result<bool, SenderError> {
        remove_if_present(path)
    }

    fn pinned_sizes(&self, layout: &PinLayout) -> Option<BinderSizes> {
        let data = MapData::from_pin(layout.map(CONFIG_MAP)).ok()?;
        let config: Array<_, BinderConfig> =
            Array::try_from(Map::from_map_data(data).ok()?).ok()?;
        let sizes = config.get(&0, 0).ok()?.sizes;
        (sizes.out_of_range().is_none()).then_some(sizes)
    }
}

/// Removes the file at `path`; false if there was none.
pub(crate) fn remove_if_present(path: &Path) -> Result<bool, SenderError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(SenderError::Io {
            what: format!("removing {}", path.display()),
            source,
        }),
    }
}
