//! The pace at which one sender's demand reports are applied.
//!
//! Every applied demand re-runs the allocator over all senders and may send
//! new grants to the others, so a sender that floods demands (thousands of
//! frames a second) must not make the receiver re-balance at that rate.
//! Demands are folded: the latest one read is applied at most once per
//! [`APPLY_EVERY`], at once when the sender was quiet. An honest sender
//! reports at most every 100 ms and after each grant, well under the pace.
//! A flood is counted and logged by the session, naming the sender.

use std::time::Duration;

use tokio::time::Instant;

/// Shortest time between two applied demands of one sender.
pub const APPLY_EVERY: Duration = Duration::from_millis(20);
/// Window over which arrivals are counted.
const WINDOW: Duration = Duration::from_secs(1);
/// Arrivals in a window beyond which the sender is said to flood.
const FLOOD: u64 = 100;
/// A flooding sender is logged at most this often.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// One session's demand pacing.
#[derive(Debug)]
pub struct DemandPace {
    /// A demand arrived that is not applied yet.
    pending: bool,
    /// The earliest moment the next demand may be applied.
    next: Instant,
    window_start: Instant,
    /// Arrivals counted before the window started.
    window_base: u64,
    warned: Option<Instant>,
}

/// Many demands in a short time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flood {
    pub count: u64,
    pub over: Duration,
    pub applied_every: Duration,
}

impl DemandPace {
    pub fn new(now: Instant) -> Self {
        Self {
            pending: false,
            next: now,
            window_start: now,
            window_base: 0,
            warned: None,
        }
    }

    /// A demand arrived; `total` is how many arrived since the session
    /// began. Returns a flood to log, at most every [`WARN_EVERY`].
    pub fn arrived(&mut self, now: Instant, total: u64) -> Option<Flood> {
        self.pending = true;
        let over = now.saturating_duration_since(self.window_start);
        if over < WINDOW {
            return None;
        }
        let count = total.saturating_sub(self.window_base);
        self.window_start = now;
        self.window_base = total;
        let quiet = self
            .warned
            .is_none_or(|at| now.saturating_duration_since(at) >= WARN_EVERY);
        (count > FLOOD && quiet).then(|| {
            self.warned = Some(now);
            Flood {
                count,
                over,
                applied_every: APPLY_EVERY,
            }
        })
    }

    /// Whether a demand waits to be applied.
    pub fn pending(&self) -> bool {
        self.pending
    }

    /// When the waiting demand may be applied (now, if the sender was
    /// quiet for [`APPLY_EVERY`]).
    pub fn due(&self) -> Instant {
        self.next
    }

    /// The latest demand was applied at `now`.
    pub fn applied(&mut self, now: Instant) {
        self.pending = false;
        self.next = now + APPLY_EVERY;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quiet_sender_is_applied_at_once_a_flood_at_the_pace() {
        let t0 = Instant::now();
        let mut pace = DemandPace::new(t0);
        assert!(!pace.pending());
        assert_eq!(pace.arrived(t0, 1), None);
        assert!(pace.pending() && pace.due() <= t0, "the first one at once");
        pace.applied(t0);
        // A second one right after waits for its turn.
        pace.arrived(t0 + Duration::from_millis(1), 2);
        assert_eq!(pace.due(), t0 + APPLY_EVERY);
    }

    #[test]
    fn a_flood_is_reported_once_a_minute() {
        let t0 = Instant::now();
        let mut pace = DemandPace::new(t0);
        let mut total = 0;
        let mut floods = Vec::new();
        // 3000 demands a second for 90 seconds, one every 1/3 ms.
        for tick in 1..=270_000u64 {
            total += 1;
            let now = t0 + Duration::from_micros(tick * 1000 / 3);
            floods.extend(pace.arrived(now, total));
        }
        assert_eq!(floods.len(), 2, "{floods:?}");
        assert!(floods[0].count >= 2999, "{floods:?}");
        // An honest sender: every 100 ms.
        let mut pace = DemandPace::new(t0);
        let honest =
            (1..600u64).filter_map(|n| pace.arrived(t0 + Duration::from_millis(n * 100), n));
        assert_eq!(honest.count(), 0);
    }
}
