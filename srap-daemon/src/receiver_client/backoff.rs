//! Reconnection delays: doubling from `initial` up to `max`, each drawn at
//! random from its upper half so many senders that lost one receiver at once
//! do not come back in lockstep.

use std::time::Duration;

#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(5),
        }
    }
}

/// The delays of one run of failures.
#[derive(Debug, Clone)]
pub struct Delays {
    policy: Backoff,
    next: Duration,
}

impl Delays {
    pub fn new(policy: Backoff) -> Self {
        Self {
            next: policy.initial,
            policy,
        }
    }

    /// After a session that worked: start from `initial` again.
    pub fn reset(&mut self) {
        self.next = self.policy.initial;
    }

    /// The next delay, in `[d/2, d]` for the current step `d` (≤ `max`).
    pub fn next_delay(&mut self) -> Duration {
        let step = self.next.min(self.policy.max);
        self.next = (step * 2).min(self.policy.max);
        step / 2 + step.mul_f64(random_unit() / 2.0)
    }
}

/// A number in [0, 1] from the OS (jitter needs no quality, but it is at hand).
fn random_unit() -> f64 {
    let mut bytes = [0u8; 4];
    if getrandom::fill(&mut bytes).is_err() {
        return 0.5;
    }
    f64::from(u32::from_ne_bytes(bytes)) / f64::from(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_with_jitter() {
        let mut delays = Delays::new(Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_millis(800),
        });
        let steps = [100u64, 200, 400, 800, 800, 800];
        for step in steps {
            let d = delays.next_delay();
            assert!(d >= Duration::from_millis(step / 2), "{d:?} for {step}");
            assert!(d <= Duration::from_millis(step), "{d:?} for {step}");
        }
        delays.reset();
        assert!(delays.next_delay() <= Duration::from_millis(100));
    }
}
