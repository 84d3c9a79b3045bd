//! The one pseudo-random source port generator: xorshift32 (Marsaglia's
//! 13, 17, 5). Not for secrets: the sender's liveness probes want ports
//! that differ from run to run (seeded from the OS by the caller), and the
//! tests want flows from many ports that are the same at every run (a fixed
//! seed). `no_std`, so any crate of the workspace can use it.

/// xorshift32: a period of 2³² − 1 over its nonzero states.
#[derive(Clone, Debug)]
pub struct XorShift32 {
    state: u32,
}

impl XorShift32 {
    /// The generator from `seed`. Zero is xorshift's one fixed point (it
    /// would draw zeros forever), so it is taken as 1.
    pub const fn new(seed: u32) -> Self {
        Self {
            state: if seed == 0 { 1 } else { seed },
        }
    }

    /// The next 32 bits.
    pub fn next_u32(&mut self) -> u32 {
        let mut x = self.state;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.state = x;
        x
    }

    /// A port of `low..low + span` (`span` at least 1, and `low + span`
    /// at most 65536: ports beyond 65535 come out as `low`).
    pub fn port(&mut self, low: u16, span: u32) -> u16 {
        let offset = self.next_u32() % span.max(1);
        u16::try_from(offset)
            .ok()
            .and_then(|o| low.checked_add(o))
            .unwrap_or(low)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sequence_is_marsaglias_xorshift32() {
        let mut rng = XorShift32::new(1);
        // Marsaglia (2003), xorshift32 with (13, 17, 5) from state 1.
        assert_eq!(rng.next_u32(), 270_369);
        assert_eq!(rng.next_u32(), 67_634_689);
    }

    #[test]
    fn zero_is_not_a_fixed_point_here() {
        assert_ne!(XorShift32::new(0).next_u32(), 0);
    }

    #[test]
    fn ports_stay_in_their_span() {
        let mut rng = XorShift32::new(0x1234_5678);
        for _ in 0..10_000 {
            let port = rng.port(1024, 28_232);
            assert!((1024..1024 + 28_232).contains(&port), "{port}");
        }
        assert_eq!(XorShift32::new(7).port(65_535, 1), 65_535);
    }
}
