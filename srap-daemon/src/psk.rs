//! Reading a pre-shared key file (`--psk-file`), shared by both agent modes.

use std::{os::unix::fs::PermissionsExt as _, path::Path};

use srap_common::wire::{MAX_PSK_LEN, Psk, PskError};
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
    let name = path.display().to_string();
    let read_err = |source| PskFileError::Read {
        path: name.clone(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(read_err)?;
    if meta.permissions().mode() & 0o077 != 0 {
        warn!("{name} is readable by others than its owner; `chmod 600 {name}`");
    }
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
