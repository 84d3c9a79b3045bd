//! Who uses a subnet of `10.199.0.0/16` now: the one allocator of test and
//! lab subnets.
//!
//! Namespaces keep addresses apart, but a cgroup hook does not: the socket
//! observer and the binder see the sockets of every namespace, so two tests
//! (or a test and a lab) on the same subnet at once read each other's
//! flows, and a test would judge another's flow as its own. So no test
//! picks one: [`Subnet::lease`] hands out a free subnet of the pool
//! (`10.199.100.0/24` to `10.199.249.0/24`, with `fd00:5a:0:<n>::/64` for
//! IPv6: private ranges that are never routed outside). A subnet is held by
//! a file lock under `/run` that the kernel releases with the process, so
//! two holders cannot exist at once, whether threads of one test binary or
//! binaries running side by side. Only what needs a known address (the
//! lab's documented `10.199.250.0/24`) takes a fixed subnet below or above
//! the pool ([`Subnet::take`]), waiting for a previous user of it.

use std::{
    fs::{self, File, OpenOptions},
    io::{Read as _, Seek as _, SeekFrom, Write as _},
    net::{Ipv4Addr, Ipv6Addr},
    ops::RangeInclusive,
    sync::atomic::{AtomicU32, Ordering},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use rustix::{fs::FlockOperation, io::Errno};

/// Where the locks live (one file per subnet).
const LOCK_DIR: &str = "/run/srap-subnets";
/// The subnets [`Subnet::lease`] hands out (third octet of `10.199.0.0/16`).
pub const POOL: RangeInclusive<u8> = 100..=249;
/// How long a second user waits (a guest test holds its subnet ~2 min).
const WAIT: Duration = Duration::from_secs(300);
/// How often it tries again.
const POLL: Duration = Duration::from_millis(50);

/// One subnet, `10.199.<n>.0/24` and `fd00:5a:0:<n>::/64`, held until
/// drop.
#[derive(Debug)]
pub struct Subnet {
    number: u8,
    _file: File,
}

impl Subnet {
    /// A subnet of [`POOL`] no other test or lab of this host holds.
    /// Each call starts its search at another place of the pool (by PID
    /// and a counter), so concurrent callers rarely even try the same one;
    /// waits only when the whole pool is taken, up to 5 minutes.
    pub fn lease() -> anyhow::Result<Self> {
        static CALLS: AtomicU32 = AtomicU32::new(0);
        let (first, len) = (u32::from(*POOL.start()), POOL.len() as u32);
        let start = std::process::id()
            .wrapping_mul(31)
            .wrapping_add(CALLS.fetch_add(1, Ordering::Relaxed));
        let deadline = Instant::now() + WAIT;
        loop {
            for i in 0..len {
                let number = u8::try_from(first + (start.wrapping_add(i)) % len)
                    .context("the pool is within 10.199.0.0/16")?;
                if let Some(subnet) = Self::try_take(number)? {
                    return Ok(subnet);
                }
            }
            if Instant::now() >= deadline {
                bail!("all {len} test subnets stayed in use for {WAIT:?} ({LOCK_DIR})");
            }
            thread::sleep(POLL);
        }
    }

    /// Takes `10.199.<subnet>.0/24` itself, for what needs that address,
    /// waiting up to 5 minutes for another test or lab of this host to let
    /// it go.
    pub fn take(subnet: u8) -> anyhow::Result<Self> {
        let deadline = Instant::now() + WAIT;
        let mut said = false;
        loop {
            if let Some(taken) = Self::try_take(subnet)? {
                return Ok(taken);
            }
            let path = lock_path(subnet);
            let holder = holder(&path);
            if Instant::now() >= deadline {
                bail!(
                    "subnet 10.199.{subnet}.0/24 stayed in use for {WAIT:?} ({holder} has it, \
                     {path}): give this user a leased subnet (`Subnet::lease`)"
                );
            }
            if !said {
                eprintln!("waiting for subnet 10.199.{subnet}.0/24: {holder} has it ({path})");
                said = true;
            }
            thread::sleep(POLL);
        }
    }

    /// `subnet`, if no one holds it now.
    fn try_take(subnet: u8) -> anyhow::Result<Option<Self>> {
        fs::create_dir_all(LOCK_DIR).with_context(|| format!("creating {LOCK_DIR}"))?;
        let path = lock_path(subnet);
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .with_context(|| format!("opening {path}"))?;
        match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(Errno::WOULDBLOCK) => return Ok(None),
            Err(err) => return Err(err).with_context(|| format!("locking {path}")),
        }
        // For the message of whoever waits next; the lock is what counts.
        let _ = file
            .set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)))
            .and_then(|_| write!(file, "PID {}", std::process::id()));
        Ok(Some(Self {
            number: subnet,
            _file: file,
        }))
    }

    /// The third octet of `10.199.<n>.0/24` (and last group of
    /// `fd00:5a:0:<n>::/64`).
    pub fn number(&self) -> u8 {
        self.number
    }

    /// Host `host` of the IPv4 subnet.
    pub fn ipv4(&self, host: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 199, self.number, host)
    }

    /// Host `host` of the IPv6 subnet.
    pub fn ipv6(&self, host: u8) -> Ipv6Addr {
        Ipv6Addr::new(0xfd00, 0x5a, 0, self.number.into(), 0, 0, 0, host.into())
    }
}

fn lock_path(subnet: u8) -> String {
    format!("{LOCK_DIR}/{subnet}.lock")
}

/// Who holds a subnet's lock, as its holder wrote it.
fn holder(path: &str) -> String {
    let mut text = String::new();
    match File::open(path).and_then(|mut f| f.read_to_string(&mut text)) {
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
        crate::privilege::require_privileged("a_second_user_of_a_subnet_waits_for_the_first");
        let first = Subnet::take(253).expect("first");
        let released = Instant::now() + Duration::from_millis(300);
        let waiter = thread::spawn(move || {
            Subnet::take(253).expect("second");
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

    #[test]
    #[ignore = "kernel: /run/srap-subnets needs root; run as root by `cargo xtask test`"]
    fn leases_held_at_once_are_distinct_and_in_the_pool() {
        crate::privilege::require_privileged("leases_held_at_once_are_distinct_and_in_the_pool");
        let leases: Vec<Subnet> = (0..20).map(|_| Subnet::lease().expect("lease")).collect();
        let mut numbers: Vec<u8> = leases.iter().map(Subnet::number).collect();
        assert!(numbers.iter().all(|n| POOL.contains(n)), "{numbers:?}");
        numbers.sort_unstable();
        numbers.dedup();
        assert_eq!(numbers.len(), leases.len(), "a subnet leased twice");
        // A leased subnet is not free for a fixed user either.
        let held = leases[0].number();
        assert!(Subnet::try_take(held).expect("try").is_none());
    }
}
