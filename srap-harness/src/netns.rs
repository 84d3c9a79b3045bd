//! Network namespaces made with `ip netns`, removed when the last handle
//! drops.

use std::{
    ffi::OsStr,
    fs::File,
    marker::PhantomData,
    os::fd::AsFd as _,
    process::{Command, Output},
    sync::Arc,
};

use anyhow::Context as _;

use crate::{command::run, names::unique_name, orphans};

/// A named network namespace (`/run/netns/<name>`), deleted when the last
/// handle to it drops.
///
/// Handles are cheap clones: an agent started in the namespace keeps one,
/// so the namespace outlives everything running in it whatever order the
/// owners drop in. Deleting the namespace also destroys every interface
/// inside it, so a veth end moved here needs no cleanup of its own.
#[derive(Clone, Debug)]
pub struct NetNs {
    owned: Arc<Owned>,
}

/// The namespace itself: deleted on drop.
#[derive(Debug)]
struct Owned {
    name: String,
}

impl NetNs {
    /// Creates a fresh namespace with a unique name and `lo` up.
    pub fn new() -> anyhow::Result<Self> {
        orphans::sweep_once();
        let name = unique_name("n");
        run(Command::new("ip").args(["netns", "add", &name]))?;
        // From here on the guard owns it: an error below still deletes it.
        let ns = Self {
            owned: Arc::new(Owned { name }),
        };
        ns.ip(["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name, as `ip netns` knows it.
    pub fn name(&self) -> &str {
        &self.owned.name
    }

    /// Its file under `/run/netns`, for `nsenter --net=` and `setns`.
    pub fn path(&self) -> String {
        format!("/run/netns/{}", self.name())
    }

    /// Runs `ip -n <ns> ARGS`, failing with its stderr if it fails.
    pub fn ip<I, S>(&self, args: I) -> anyhow::Result<Output>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        run(Command::new("ip").args(["-n", self.name()]).args(args))
    }

    /// Runs `PROGRAM ARGS` inside the namespace (`ip netns exec`), failing
    /// with its stderr if it exits non-zero.
    pub fn exec<I, S>(&self, program: &str, args: I) -> anyhow::Result<Output>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        run(Command::new("ip")
            .args(["netns", "exec", self.name(), program])
            .args(args))
    }

    /// A counter of `iface` (`rx_bytes`, `tx_bytes`, …) as the namespace's
    /// kernel keeps it: `ip netns exec` mounts the namespace's own sysfs.
    pub fn iface_counter(&self, iface: &str, counter: &str) -> anyhow::Result<u64> {
        let path = format!("/sys/class/net/{iface}/statistics/{counter}");
        let out = self.exec("cat", [&path])?;
        let text = String::from_utf8_lossy(&out.stdout);
        text.trim()
            .parse()
            .with_context(|| format!("{path} in {} says {text:?}", self.name()))
    }

    /// Moves the *calling thread* into the namespace until the guard drops.
    ///
    /// Sockets created meanwhile belong to the namespace for their whole life,
    /// and so do interface lookups and netlink requests (e.g. BPF attaches).
    pub fn enter(&self) -> anyhow::Result<NsGuard> {
        let original = File::open("/proc/thread-self/ns/net")
            .context("opening this thread's network namespace")?;
        let target = File::open(self.path())
            .with_context(|| format!("opening namespace {}", self.name()))?;
        setns(&target).with_context(|| format!("entering namespace {}", self.name()))?;
        Ok(NsGuard {
            original,
            _not_send: PhantomData,
        })
    }

    /// Runs `f` on a new thread inside the namespace and returns its result.
    ///
    /// A panic in `f` is resumed on the caller, so test assertions work.
    pub fn run<T, F>(&self, f: F) -> anyhow::Result<T>
    where
        T: Send,
        F: FnOnce() -> T + Send,
    {
        std::thread::scope(|scope| {
            let handle = scope.spawn(|| -> anyhow::Result<T> {
                let _inside = self.enter()?;
                Ok(f())
            });
            handle
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        if let Err(err) = run(Command::new("ip").args(["netns", "del", &self.name])) {
            eprintln!("cleanup: deleting namespace {}: {err:#}", self.name);
        }
    }
}

/// Puts the calling thread back into its original namespace on drop.
///
/// Not `Send`: namespace membership belongs to the thread that entered.
#[derive(Debug)]
pub struct NsGuard {
    original: File,
    _not_send: PhantomData<*const ()>,
}

impl Drop for NsGuard {
    fn drop(&mut self) {
        if let Err(err) = setns(&self.original) {
            // Carrying on in the wrong namespace would break every later test
            // on this thread in confusing ways: stop here.
            panic!("returning to the original network namespace: {err:#}");
        }
    }
}

fn setns(ns: &File) -> anyhow::Result<()> {
    rustix::thread::move_into_link_name_space(
        ns.as_fd(),
        Some(rustix::thread::LinkNameSpaceType::Network),
    )
    .map_err(std::io::Error::from)
    .context("setns(CLONE_NEWNET)")
}
