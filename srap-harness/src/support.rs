//! The small things every test, bench and lab run needs and once wrote for
//! itself: waiting for a condition with a bound ([`poll_until`]), a
//! scratch directory that goes when it drops ([`TempDir`]), and removing a
//! cgroup a process may still linger in ([`remove_cgroup`]).

use std::{
    fs, io,
    ops::ControlFlow,
    path::{Path, PathBuf},
    thread,
    time::{Duration, Instant},
};

use crate::names::unique_name;

/// Tries `probe` every `every` until it breaks (`ControlFlow::Break`
/// with the value waited for), for at most `within`: `Ok` with that value,
/// or `Err` with what the last try said was still missing
/// (`ControlFlow::Continue`, for the caller's message) once the time is up. The probe runs at least once, and once
/// more at or after the deadline, so a slow machine fails only on a state
/// seen after the whole wait.
pub fn poll_until<T, E>(
    within: Duration,
    every: Duration,
    mut probe: impl FnMut() -> ControlFlow<T, E>,
) -> Result<T, E> {
    let deadline = Instant::now() + within;
    loop {
        match probe() {
            ControlFlow::Break(value) => return Ok(value),
            ControlFlow::Continue(missing) if Instant::now() >= deadline => return Err(missing),
            ControlFlow::Continue(_) => thread::sleep(every),
        }
    }
}

/// A directory of this process's own under the temp directory
/// (`srap-<what>-s<pid>x<n>`), removed with what it holds on drop, so a
/// test that fails leaves no files behind.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates `<temp>/srap-<what>-s<pid>x<n>`.
    pub fn new(what: &str) -> io::Result<Self> {
        let path = std::env::temp_dir().join(format!("srap-{what}-{}", unique_name("")));
        fs::create_dir_all(&path)?;
        Ok(Self { path })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `name` inside it.
    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.path.join(name)
    }

    /// Writes `contents` to `name` inside it; returns that file's path.
    pub fn write(&self, name: &str, contents: impl AsRef<[u8]>) -> io::Result<PathBuf> {
        let path = self.join(name);
        fs::write(&path, contents)?;
        Ok(path)
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// Removes `cgroup` if it is still there, for up to 5 s: a process that
/// just exited may linger in its `cgroup.procs` for a moment, and the
/// directory cannot go before it does. A cgroup still busy after that is
/// said on stderr (cleanup must not fail a test that passed).
pub fn remove_cgroup(cgroup: &Path) {
    let removed =
        poll_until(
            Duration::from_secs(5),
            Duration::from_millis(50),
            || match fs::remove_dir(cgroup) {
                Ok(()) => ControlFlow::Break(()),
                Err(err) if err.kind() == io::ErrorKind::NotFound => ControlFlow::Break(()),
                Err(err) => ControlFlow::Continue(err),
            },
        );
    if let Err(err) = removed {
        eprintln!("cleanup: removing cgroup {}: {err}", cgroup.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_until_returns_the_first_success() {
        let mut tries = 0;
        let got: Result<u32, u32> = poll_until(Duration::from_secs(5), Duration::ZERO, || {
            tries += 1;
            if tries == 3 {
                ControlFlow::Break(tries)
            } else {
                ControlFlow::Continue(tries)
            }
        });
        assert_eq!(got, Ok(3));
    }

    #[test]
    fn poll_until_gives_the_last_miss_after_the_deadline() {
        let start = Instant::now();
        let mut tries = 0;
        let got: Result<(), u32> = poll_until(
            Duration::from_millis(100),
            Duration::from_millis(10),
            || {
                tries += 1;
                ControlFlow::Continue(tries)
            },
        );
        assert!(start.elapsed() >= Duration::from_millis(100));
        assert_eq!(got, Err(tries));
        assert!(tries >= 2, "tried {tries} times");
    }

    #[test]
    fn a_temp_dir_goes_with_what_it_holds() {
        let dir = TempDir::new("support-test").expect("temp dir");
        let file = dir.write("a.txt", "x").expect("write");
        assert!(file.exists());
        let path = dir.path().to_owned();
        drop(dir);
        assert!(!path.exists());
    }

    #[test]
    fn removing_a_missing_cgroup_is_done_at_once() {
        let start = Instant::now();
        remove_cgroup(Path::new("/nonexistent/srap-test-cgroup"));
        assert!(start.elapsed() < Duration::from_secs(1));
    }
}
