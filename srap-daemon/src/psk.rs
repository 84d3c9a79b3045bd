//! Pre-shared key files (`--psk-file`), shared by both agent modes, and
//! the set of keys a receiver accepts ([`Keys`]: two during a rollover).

use std::{
    fmt,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
};

use srap_common::wire::{KeyId, MAX_PSK_LEN, Psk, PskError};
use thiserror::Error;
use tracing::warn;

#[derive(Debug, Error)]
pub enum PskFileError {
    #[error("cannot read the pre-shared key file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Invalid { path: String, source: PskError },
}

/// The key in `path` (whitespace around it ignored). Warns when others than
/// the owner may read the file: whoever reads it can pose as either side.
pub fn read_psk_file(path: &Path) -> Result<Psk, PskFileError> {
    let psk = load_psk_file(path)?;
    if std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o077 != 0) {
        let name = path.display();
        warn!("{name} is readable by others than its owner; `chmod 600 {name}`");
    }
    Ok(psk)
}

/// [`read_psk_file`] without the warning, for re-reading a file already
/// checked at start (a sender reads its key again at every connection).
pub fn load_psk_file(path: &Path) -> Result<Psk, PskFileError> {
    let name = path.display().to_string();
    let read_err = |source| PskFileError::Read {
        path: name.clone(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(read_err)?;
    if meta.len() > (MAX_PSK_LEN as u64) * 2 {
        return Err(PskFileError::Invalid {
            path: name,
            source: PskError::TooLong {
                len: usize::try_from(meta.len()).unwrap_or(usize::MAX),
            },
        });
    }
    let contents = std::fs::read(path).map_err(read_err)?;
    Psk::from_file_contents(&contents)
        .map_err(|source| PskFileError::Invalid { path: name, source })
}

/// The pre-shared keys a receiver accepts (`--psk-file`, repeated during a
/// rollover), each known by its [`KeyId`]. Empty: no key is asked for.
#[derive(Clone, Debug, Default)]
pub struct Keys(Vec<Psk>);

impl Keys {
    /// `keys`, a key given twice kept once.
    pub fn new(keys: impl IntoIterator<Item = Psk>) -> Self {
        let mut unique: Vec<Psk> = Vec::new();
        for key in keys {
            if !unique.iter().any(|k| k.id() == key.id()) {
                unique.push(key);
            }
        }
        Self(unique)
    }

    /// Every file of `paths`, each checked as [`read_psk_file`] does.
    pub fn read(paths: &[PathBuf]) -> Result<Self, PskFileError> {
        let keys: Result<Vec<Psk>, _> = paths.iter().map(|p| read_psk_file(p)).collect();
        Ok(Self::new(keys?))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The key named `id`.
    pub fn find(&self, id: KeyId) -> Option<&Psk> {
        self.0.iter().find(|k| k.id() == id)
    }

    pub fn contains(&self, id: KeyId) -> bool {
        self.find(id).is_some()
    }

    pub fn ids(&self) -> Vec<KeyId> {
        self.0.iter().map(Psk::id).collect()
    }
}

impl From<Psk> for Keys {
    fn from(psk: Psk) -> Self {
        Self(vec![psk])
    }
}

/// `3f2a9c1b4d5e6f70, 0123456789abcdef` (or `none`), for logs.
impl fmt::Display for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("none");
        }
        let ids: Vec<String> = self.ids().iter().map(ToString::to_string).collect();
        f.write_str(&ids.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn psk(text: &str) -> Psk {
        Psk::new(text.as_bytes()).expect("psk")
    }

    #[test]
    fn keys_are_found_by_id_and_kept_once() {
        let (a, b) = (psk("first key, 16+ bytes"), psk("second key, 16+ bytes"));
        let keys = Keys::new([a.clone(), b.clone(), a.clone()]);
        assert_eq!(keys.ids(), [a.id(), b.id()]);
        assert!(keys.contains(b.id()));
        assert!(!keys.contains(psk("third key, 16+ bytes").id()));
        assert_eq!(keys.to_string(), format!("{}, {}", a.id(), b.id()));
        assert_eq!(Keys::default().to_string(), "none");
    }
}
