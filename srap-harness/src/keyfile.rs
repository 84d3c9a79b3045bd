//! Pre-shared key files of the lab's and the tests' own: their receiver
//! agents listen on namespace addresses, beyond loopback, where an agent
//! serves only senders that prove a key (`--psk-file`).

use std::{
    fs,
    io::{self, Write as _},
    os::unix::fs::OpenOptionsExt as _,
    path::{Path, PathBuf},
};

/// A key file holding 32 random bytes as hex (mode 0600), removed on drop.
#[derive(Debug)]
pub struct KeyFile {
    path: PathBuf,
}

impl KeyFile {
    /// A new random key at `path`.
    pub fn create(path: PathBuf) -> io::Result<Self> {
        let file = Self { path };
        file.rotate()?;
        Ok(file)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces the key with a new random one, atomically (written beside
    /// it, then renamed), so an agent reading it never sees half a key.
    pub fn rotate(&self) -> io::Result<()> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|err| io::Error::other(err.to_string()))?;
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        self.write(&hex)
    }

    /// Writes `key` (a line) in place of the file's key, atomically.
    pub fn write(&self, key: &str) -> io::Result<()> {
        let mut next = self.path.clone().into_os_string();
        next.push(".next");
        let next = PathBuf::from(next);
        let mut out = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&next)?;
        writeln!(out, "{key}")?;
        out.sync_all()?;
        fs::rename(&next, &self.path)
    }

    /// The key as written (without its newline).
    pub fn key(&self) -> io::Result<String> {
        Ok(fs::read_to_string(&self.path)?.trim().to_owned())
    }
}

impl Drop for KeyFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    #[test]
    fn a_key_file_is_private_random_and_removed() {
        let path = std::env::temp_dir().join(format!("srap-keyfile-{}", std::process::id()));
        let file = KeyFile::create(path.clone()).expect("create");
        let first = file.key().expect("read");
        assert_eq!(first.len(), 64);
        let mode = fs::metadata(&path).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        file.rotate().expect("rotate");
        assert_ne!(file.key().expect("read"), first);
        drop(file);
        assert!(!path.exists());
    }
}
