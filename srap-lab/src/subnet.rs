//! Who uses a subnet of `10.199.0.0/16` now.
//!
//! Namespaces keep addresses apart, but a cgroup hook does not: the socket
//! verifier and the binder see the sockets of every namespace, so two tests
//! (or a test and a lab) on the same subnet at once read each other's
//! flows — a test of the socket verifier once failed in CI on a flow of
//! another test that had picked the same subnet. Whatever builds hosts on a
//! subnet holds its lock, a file lock under `/run` that the kernel releases
//! with the process; a second user waits, saying for whom.

use std::{
    fs::{self, File, OpenOptions},
    io::{Read as _, Seek as _, SeekFrom, Write as _},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use rustix::{fs::FlockOperation, io::Errno};

/// Where the locks live (one file per subnet).
const LOCK_DIR: &str = "/run/srap-subnets";
/// How long a second user waits (a guest test holds its subnet ~2 min).
const WAIT: Duration = Duration::from_secs(300);
/// How often it tries again.
const POLL: Duration = Duration::from_millis(50);

/// The lock of one subnet, released on drop.
#[derive(Debug)]
pub struct SubnetLock {
    _file: File,
}

impl SubnetLock {
    /// Takes the lock of `10.199.<subnet>.0/24`, waiting up to 5 minutes
    /// for another test or lab of this host to let it go.
    pub fn take(subnet: u8) -> anyhow::Result<Self> {
        fs::create_dir_all(LOCK_DIR).with_context(|| format!("creating {LOCK_DIR}"))?;
        let path = format!("{LOCK_DIR}/{subnet}.lock");
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .with_context(|| format!("opening {path}"))?;
        let deadline = Instant::now() + WAIT;
        let mut said = false;
        loop {
            match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => break,
                Err(Errno::WOULDBLOCK) if Instant::now() < deadline => {
                    if !said {
                        eprintln!(
                            "waiting for subnet 10.199.{subnet}.0/24: {} has it ({path})",
                            holder(&mut file)
                        );
                        said = true;
                    }
                    thread::sleep(POLL);
                }
                Err(Errno::WOULDBLOCK) => bail!(
                    "subnet 10.199.{subnet}.0/24 stayed in use for {WAIT:?} ({} has it, {path}): \
                     give this test a subnet of its own",
                    holder(&mut file)
                ),
                Err(err) => return Err(err).with_context(|| format!("locking {path}")),
            }
        }
        // For the message of whoever waits next; the lock is what counts.
        let _ = file
            .set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)))
            .and_then(|_| write!(file, "PID {}", std::process::id()));
        Ok(Self { _file: file })
    }
}

/// Who holds the lock, as its holder wrote it.
fn holder(file: &mut File) -> String {
    let mut text = String::new();
    match file
        .seek(SeekFrom::Start(0))
        .and_then(|_| file.read_to_string(&mut text))
    {
        Ok(_) if !text.trim().is_empty() => text.trim().to_owned(),
        _ => "another test or lab".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[ignore = "kernel: /run/srap-subnets needs root; run as root by `cargo xtask test`"]
    fn a_second_user_of_a_subnet_waits_for_the_first() {
        assert!(
            rustix::process::geteuid().is_root(),
            "/run/srap-subnets needs root: run as root (`cargo xtask test`, or \
             `cargo test -- --include-ignored`)"
        );
        let first = SubnetLock::take(253).expect("first");
        let released = Instant::now() + Duration::from_millis(300);
        let waiter = thread::spawn(move || {
            SubnetLock::take(253).expect("second");
            Instant::now()
        });
        thread::sleep(Duration::from_millis(300));
        drop(first);
        let got = waiter.join().expect("waiter");
        assert!(
            got >= released,
            "the second took it only after the first let go"
        );
    }
}
