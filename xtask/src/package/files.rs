//! Files read, written and listed with their path in any error: the
//! helpers that staging, writing and checking the packages share. It must
//! not know what a package holds (`contents` does).

use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};

/// Every regular file below `dir`, in a stable order.
pub fn walk(dir: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("listing {}", dir.display()))?;
    entries.sort_by_key(fs::DirEntry::path);
    for entry in entries {
        let path = entry.path();
        if path.is_dir() {
            walk(&path, files)?;
        } else {
            files.push(path);
        }
    }
    Ok(())
}

/// The text of `path`, naming it when it cannot be read.
pub fn read(path: &Path) -> Result<String> {
    fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// Writes `text` to `path`, naming it when it cannot be written.
pub fn write(path: &Path, text: &str) -> Result<()> {
    fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}
