//! How likely random source ports are to collide on the receiver, by formula
//! and by simulation with real Toeplitz hashing.

use std::collections::{BTreeMap, HashSet};

use thiserror::Error;

use crate::rss::{FlowTuple, RssModel};

/// Past this the exact busiest-CPU computation would take too long.
pub const MAX_BALLS_OR_BINS: u32 = 4096;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum OddsError {
    #[error("the receiver must have at least 1 CPU")]
    NoCpus,
    #[error("there must be at least 1 flow")]
    NoFlows,
    #[error("{what} = {value} is more than this calculation handles ({MAX_BALLS_OR_BINS})")]
    TooLarge { what: &'static str, value: u32 },
}

fn check(flows: u32, cpus: u32) -> Result<(), OddsError> {
    match (flows, cpus) {
        (0, _) => Err(OddsError::NoFlows),
        (_, 0) => Err(OddsError::NoCpus),
        (f, _) if f > MAX_BALLS_OR_BINS => Err(OddsError::TooLarge {
            what: "flows",
            value: f,
        }),
        (_, c) if c > MAX_BALLS_OR_BINS => Err(OddsError::TooLarge {
            what: "cpus",
            value: c,
        }),
        _ => Ok(()),
    }
}

/// P(no two of `flows` uniformly random flows share one of `cpus` CPUs):
/// ∏_{i<flows} (cpus − i) / cpus.
pub fn collision_free(flows: u32, cpus: u32) -> Result<f64, OddsError> {
    check(flows, cpus)?;
    Ok((0..flows)
        .map(|i| (f64::from(cpus) - f64::from(i)).max(0.0) / f64::from(cpus))
        .product())
}

/// E[flows on the busiest CPU] for uniformly random flows, exactly:
/// Σ_m P(max > m), with P(max ≤ m) from a dynamic program over CPUs in which
/// each CPU takes a binomial share of the flows still unplaced.
pub fn expected_busiest(flows: u32, cpus: u32) -> Result<f64, OddsError> {
    check(flows, cpus)?;
    let n = flows as usize;
    let ln_fact: Vec<f64> = std::iter::once(0.0)
        .chain((1..=n).scan(0.0, |acc, i| {
            *acc += (i as f64).ln();
            Some(*acc)
        }))
        .collect();
    let ln_binom_pmf = |r: usize, j: usize, p: f64| -> f64 {
        let mut ln = ln_fact[r] - ln_fact[j] - ln_fact[r - j];
        if j > 0 {
            ln += j as f64 * p.ln();
        }
        if r > j {
            ln += (r - j) as f64 * (1.0 - p).ln();
        }
        ln
    };
    let mut expected = 0.0;
    for cap in 0..n {
        // remaining[r]: probability that r flows are still unplaced and every
        // CPU so far took at most `cap`.
        let mut remaining = vec![0.0; n + 1];
        remaining[n] = 1.0;
        for cpu in 0..cpus {
            let bins_left = f64::from(cpus - cpu);
            let p = 1.0 / bins_left;
            let mut next = vec![0.0; n + 1];
            for (r, weight) in remaining.iter().enumerate().filter(|(_, w)| **w > 0.0) {
                if cpu + 1 == cpus {
                    if r <= cap {
                        next[0] += weight;
                    }
                    continue;
                }
                for j in 0..=r.min(cap) {
                    next[r - j] += weight * ln_binom_pmf(r, j, p).exp();
                }
            }
            remaining = next;
        }
        let within_cap = remaining[0];
        expected += 1.0 - within_cap;
        if 1.0 - within_cap < 1e-12 {
            break;
        }
    }
    Ok(expected)
}

/// Outcome of trials of `flows` concurrent flows each.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TrialStats {
    pub trials: usize,
    pub collision_free: usize,
    pub busiest_total: usize,
}

impl TrialStats {
    pub fn record(&mut self, cpu_of_each_flow: impl IntoIterator<Item = u32>) {
        let mut loads: BTreeMap<u32, usize> = BTreeMap::new();
        for cpu in cpu_of_each_flow {
            *loads.entry(cpu).or_insert(0) += 1;
        }
        let busiest = loads.values().copied().max().unwrap_or(0);
        self.trials += 1;
        self.busiest_total += busiest;
        if busiest <= 1 {
            self.collision_free += 1;
        }
    }

    pub fn collision_free_rate(&self) -> f64 {
        self.collision_free as f64 / self.trials.max(1) as f64
    }

    pub fn mean_busiest(&self) -> f64 {
        self.busiest_total as f64 / self.trials.max(1) as f64
    }
}

/// Monte-Carlo: `trials` times, `flows` flows shaped like `template` get
/// distinct source ports from `random_port` (as the kernel would hand out),
/// hashed with the receiver's real Toeplitz key and table.
pub fn simulate(
    model: &RssModel,
    template: &FlowTuple,
    flows: usize,
    trials: usize,
    mut random_port: impl FnMut() -> u16,
) -> TrialStats {
    let mut stats = TrialStats::default();
    for _ in 0..trials {
        let mut ports = HashSet::with_capacity(flows);
        // Bounded: a port source that repeats itself forever ends the trial short.
        for _ in 0..flows.saturating_mul(64) {
            if ports.len() == flows {
                break;
            }
            ports.insert(random_port());
        }
        stats.record(
            ports
                .iter()
                .map(|port| model.landing(&template.with_sport(*port)).cpu),
        );
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sixteen_flows_on_thirty_two_cpus_are_collision_free_one_percent_of_the_time() {
        let p = collision_free(16, 32).unwrap();
        assert!((p - 0.010_410).abs() < 1e-5, "{p}");
        assert_eq!(collision_free(33, 32).unwrap(), 0.0);
        assert_eq!(collision_free(1, 1).unwrap(), 1.0);
    }

    #[test]
    fn busiest_cpu_matches_small_cases_worked_by_hand() {
        // Two flows on two CPUs: max is 1 or 2 with probability 1/2 each.
        assert!((expected_busiest(2, 2).unwrap() - 1.5).abs() < 1e-12);
        // Three flows on two CPUs: max is 2 w.p. 6/8, 3 w.p. 2/8.
        assert!((expected_busiest(3, 2).unwrap() - 2.25).abs() < 1e-12);
        assert!((expected_busiest(5, 1).unwrap() - 5.0).abs() < 1e-12);
        let e = expected_busiest(16, 32).unwrap();
        assert!(e > 2.0 && e < 2.6, "{e}");
    }

    #[test]
    fn bad_sizes_are_refused() {
        assert_eq!(collision_free(0, 4), Err(OddsError::NoFlows));
        assert_eq!(expected_busiest(4, 0), Err(OddsError::NoCpus));
        assert!(expected_busiest(5000, 4).is_err());
    }
}
