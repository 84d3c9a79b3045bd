//! Following the links of the NICs the hook chooses among (`--local-nics
//! numa|balance`): the kernel's own notices, a fence written from them at
//! once, and a poll behind them.
//!
//! Why not the poll alone: the hook binds a NIC's address before the
//! connect's SYN leaves, so a NIC that went down must be out of its choice
//! before the next connect, not at the next poll: with the 100 ms poll
//! alone, connects made at once after `ip link set down` take the NIC and
//! fail. Read in the agent's loop, a notice waits behind the loop's other
//! work and the machine's load: on a busy host, long enough for the same
//! failures.
//!
//! So a thread of its own hears the notices, blocked on the socket, and
//! fences a NIC off (`SRAP_NICS_DOWN`, one map write, read by the hook)
//! as soon as the kernel says its link is down; it asks the kernel for
//! real-time priority (`SCHED_FIFO` 1: it sleeps but for microseconds per
//! notice) so a loaded machine's other work does not stand between the
//! notice and the fence. It then wakes the agent's loop, which re-plans the
//! rows. The loop's poll ([`LINKS_EVERY`]) stays for notices lost to an
//! overrun and for a thread that could not start.

use std::{
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use aya::maps::{Array, Map, MapData, MapError};
use srap_host::link::Link;
use srap_host::link_events::{Drained, LinkEvents};
use srap_host::netlink::NetlinkError;
use thiserror::Error;
use tokio::{
    sync::mpsc,
    time::{Interval, MissedTickBehavior},
};
use tracing::{debug, info, warn};

use super::nics::LINKS_EVERY;
use crate::sender::ends::LocalNicsPolicy;

/// How often the fence's thread looks whether it is to stop.
const STOP_EVERY: Duration = Duration::from_millis(200);

/// Why [`LinkWatch::next`] woke: what the kernel's notices said, or the
/// poll (empty).
#[derive(Debug, Default)]
pub struct LinkWake {
    /// Addresses of a chosen NIC came or went, or notices were lost: the
    /// NICs' whole list is to be read again.
    pub addresses: bool,
}

/// The fence's notices and the poll, as one source for the agent's loop.
pub struct LinkWatch {
    woke: Option<mpsc::UnboundedReceiver<LinkWake>>,
    poll: Interval,
    fence: Option<(Arc<AtomicBool>, JoinHandle<()>)>,
}

impl LinkWatch {
    /// Under `numa` or `balance`, starts the fence's thread over the
    /// chosen NICs (`names`, in the hook's index order), writing the map
    /// pinned at `nics_down`; under `route` (no NIC is chosen), or if it
    /// cannot start (said why), the poll alone.
    pub fn new(policy: LocalNicsPolicy, names: Vec<String>, nics_down: &Path) -> Self {
        let mut poll = tokio::time::interval(LINKS_EVERY);
        poll.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut watch = Self {
            woke: None,
            poll,
            fence: None,
        };
        if policy == LocalNicsPolicy::Route {
            return watch;
        }
        match Fence::open(names, nics_down) {
            Ok(fence) => {
                let (tx, rx) = mpsc::unbounded_channel();
                let stop = Arc::new(AtomicBool::new(false));
                let stopped = Arc::clone(&stop);
                let spawned = std::thread::Builder::new()
                    .name("srap-link-fence".into())
                    .spawn(move || fence.run(&tx, &stopped));
                match spawned {
                    Ok(thread) => {
                        watch.woke = Some(rx);
                        watch.fence = Some((stop, thread));
                    }
                    Err(err) => warn!("{}", fallback(&err.to_string())),
                }
            }
            Err(err) => warn!("{}", fallback(&err.to_string())),
        }
        watch
    }

    /// The fence's next wake, or the next poll (an empty wake).
    /// Cancel-safe.
    pub async fn next(&mut self) -> LinkWake {
        let Some(woke) = &mut self.woke else {
            self.poll.tick().await;
            return LinkWake::default();
        };
        tokio::select! {
            wake = woke.recv() => match wake {
                Some(wake) => wake,
                None => {
                    self.woke = None;
                    LinkWake::default()
                }
            },
            _ = self.poll.tick() => LinkWake::default(),
        }
    }
}

impl Drop for LinkWatch {
    fn drop(&mut self) {
        if let Some((stop, thread)) = self.fence.take() {
            stop.store(true, Ordering::Relaxed);
            let _ = thread.join();
        }
    }
}

/// What is said when the fence cannot run.
fn fallback(why: &str) -> String {
    format!(
        "cannot follow the kernel's link notices ({why}): a NIC going down is \
         avoided from the next poll, within {LINKS_EVERY:?}"
    )
}

/// The chosen NICs in index order and their links as last heard.
#[derive(Debug, PartialEq)]
struct Links {
    names: Vec<String>,
    running: Vec<bool>,
    /// Each chosen NIC's interface index (0: not known), for address
    /// notices, which name none.
    indexes: Vec<u32>,
}

impl Links {
    fn new(names: Vec<String>) -> Self {
        let count = names.len();
        Self {
            names,
            running: vec![true; count],
            indexes: vec![0; count],
        }
    }

    /// Takes in what the notices say of the chosen NICs; whether a link of
    /// theirs moved, and whether their addresses did (or notices were
    /// lost: then the caller reads every link again).
    fn hear(&mut self, drained: &Drained) -> (bool, bool) {
        let mut ours = false;
        for notice in &drained.links {
            if let Some(at) = self.names.iter().position(|n| *n == notice.name) {
                ours |= self.running[at] != notice.running;
                self.running[at] = notice.running;
                self.indexes[at] = notice.index;
            }
        }
        if drained.overran {
            return (true, true);
        }
        let addresses = drained
            .addresses
            .iter()
            .any(|index| *index != 0 && self.indexes.contains(index));
        (ours, addresses)
    }

    /// Asks the kernel for every chosen NIC's link (one missing: down).
    fn read_all(&mut self) {
        for (at, name) in self.names.iter().enumerate() {
            let link = Link::by_name(name).ok().flatten();
            self.running[at] = link.as_ref().is_some_and(|l| l.running);
            self.indexes[at] = link.map_or(0, |l| l.index);
        }
    }
}

/// Why the fence's thread cannot start.
#[derive(Debug, Error)]
enum FenceError {
    #[error("{}: {source}", .pin.display())]
    Pin {
        pin: PathBuf,
        #[source]
        source: MapError,
    },
    #[error("{0}")]
    Map(#[source] MapError),
    #[error("{0}")]
    Events(#[source] NetlinkError),
}

/// The fence's thread: the links it follows and the map it alone writes.
struct Fence {
    links: Links,
    map: Array<MapData, u32>,
    events: LinkEvents,
}

impl Fence {
    fn open(names: Vec<String>, pin: &Path) -> Result<Self, FenceError> {
        let data = MapData::from_pin(pin).map_err(|source| FenceError::Pin {
            pin: pin.to_owned(),
            source,
        })?;
        let map = Array::try_from(Map::Array(data)).map_err(FenceError::Map)?;
        let events = LinkEvents::open().map_err(FenceError::Events)?;
        Ok(Self {
            links: Links::new(names),
            map,
            events,
        })
    }

    fn run(mut self, woke: &mpsc::UnboundedSender<LinkWake>, stop: &AtomicBool) {
        raise_priority();
        self.links.read_all();
        self.write();
        while !stop.load(Ordering::Relaxed) {
            let drained = match self.events.wait(STOP_EVERY) {
                Ok(false) => continue,
                Ok(true) => self.events.drain(),
                Err(err) => Err(err),
            };
            let drained = match drained {
                Ok(drained) => drained,
                Err(err) => {
                    warn!("{}", fallback(&err.to_string()));
                    return;
                }
            };
            let (moved, addresses) = self.links.hear(&drained);
            if drained.overran {
                self.links.read_all();
            }
            if moved || addresses {
                self.write();
                if woke.send(LinkWake { addresses }).is_err() {
                    return;
                }
            }
        }
    }

    fn write(&mut self) {
        let down = down_mask(&self.links.running);
        match self.map.set(0, down, 0) {
            Ok(()) => debug!("NICs down (bits of the chosen NICs): {down:#b}"),
            Err(err) => warn!("cannot fence off the NICs down ({err}); the re-plan will"),
        }
    }
}

/// Bit `n` set for each chosen NIC `n` that is not running.
fn down_mask(running: &[bool]) -> u32 {
    running
        .iter()
        .enumerate()
        .filter(|(at, up)| !**up && *at < 32)
        .fold(0, |mask, (at, _)| mask | 1 << at)
}

/// Asks for `SCHED_FIFO` priority 1 for this thread: it sleeps on the
/// socket but for microseconds per notice, and must not wait behind the
/// machine's other work between a notice and its fence. Without the
/// privilege (`CAP_SYS_NICE`), it runs at its normal priority (said).
fn raise_priority() {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: `param` is a valid `sched_param` that outlives the call; pid
    // 0 is the calling thread.
    let refused = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &raw const param) } != 0;
    if refused {
        info!(
            "the link fence runs at normal priority ({}): under load a NIC going down may be \
             fenced off some milliseconds late",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use srap_host::link_events::LinkNotice;

    fn notice(index: u32, name: &str, running: bool) -> LinkNotice {
        LinkNotice {
            index,
            name: name.into(),
            running,
        }
    }

    /// A chosen NIC's notice moves its link (the newest notice wins); other
    /// NICs' notices and addresses move nothing; a chosen NIC's address
    /// does, once its index is known; lost notices move everything.
    #[test]
    fn notices_move_only_the_chosen_nics() {
        let mut links = Links::new(vec!["eth0".into(), "eth1".into()]);
        let heard = Drained {
            links: vec![
                notice(3, "eth1", false),
                notice(9, "docker0", false),
                notice(3, "eth1", true),
                notice(3, "eth1", false),
            ],
            addresses: vec![9],
            overran: false,
        };
        assert_eq!(links.hear(&heard), (true, false));
        assert_eq!(links.running, [true, false]);
        assert_eq!(down_mask(&links.running), 0b10);
        let same = Drained {
            links: vec![notice(3, "eth1", false)],
            ..Drained::default()
        };
        assert_eq!(links.hear(&same), (false, false), "no change");
        let address = Drained {
            addresses: vec![3],
            ..Drained::default()
        };
        assert_eq!(links.hear(&address), (false, true));
        let lost = Drained {
            overran: true,
            ..Drained::default()
        };
        assert_eq!(links.hear(&lost), (true, true));
    }

    #[test]
    fn each_nic_not_running_has_its_bit() {
        assert_eq!(down_mask(&[true, false, true, false]), 0b1010);
        assert_eq!(down_mask(&[]), 0);
    }
}
