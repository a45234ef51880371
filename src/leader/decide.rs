//! The leader-election decision: from what this replica last saw of the
//! Lease, its own identity and the time, what to do next. Pure: no clock,
//! no API calls here (those are in `elector.rs`).
//!
//! The rules are client-go's `leaderelection`:
//! - Expiry is judged on the local monotonic clock from when this replica
//!   last saw the Lease's record change (`observed_at`), never from the
//!   holder's `renewTime`, so clock skew between replicas does not matter.
//! - A leader renews every tick and gives up (`Lost`) once `renew_deadline`
//!   has passed since its last successful renew. `renew_deadline` is shorter
//!   than `lease_duration`, so a leader stops acting before any standby may
//!   take the Lease over.

use std::time::{Duration, Instant};

/// Durations of the election, as client-go names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// How long a Lease holds after its last renew (`leaseDurationSeconds`).
    pub lease_duration: Duration,
    /// How long a leader keeps acting without a successful renew.
    pub renew_deadline: Duration,
    /// How often each replica reads (and the leader renews) the Lease.
    pub retry_period: Duration,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TimingError {
    #[error(
        "the renew deadline ({renew_deadline:?}) must be shorter than the lease duration ({lease_duration:?}), or a leader could act after its Lease expired"
    )]
    DeadlineNotShorter {
        renew_deadline: Duration,
        lease_duration: Duration,
    },
    #[error(
        "the retry period ({retry_period:?}) must be shorter than the renew deadline ({renew_deadline:?})"
    )]
    RetryNotShorter {
        retry_period: Duration,
        renew_deadline: Duration,
    },
}

impl Timing {
    pub fn new(
        lease_duration: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
    ) -> Result<Timing, TimingError> {
        if renew_deadline >= lease_duration {
            return Err(TimingError::DeadlineNotShorter {
                renew_deadline,
                lease_duration,
            });
        }
        if retry_period >= renew_deadline || retry_period.is_zero() {
            return Err(TimingError::RetryNotShorter {
                retry_period,
                renew_deadline,
            });
        }
        Ok(Timing {
            lease_duration,
            renew_deadline,
            retry_period,
        })
    }
}

impl Default for Timing {
    /// client-go's defaults: 15 s, 10 s, 2 s.
    fn default() -> Self {
        Timing {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// What this replica knows of the Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// `spec.holderIdentity`; `None` or empty: released.
    pub holder: Option<String>,
    /// `spec.leaseDurationSeconds` as the holder wrote it.
    pub lease_duration: Duration,
    /// When this replica saw the holder or renewTime last change.
    pub observed_at: Instant,
}

/// What to do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Write ourselves in as holder (create the Lease, or take over a
    /// released or expired one).
    Acquire,
    /// We lead: write a new renewTime.
    Renew,
    /// Someone else holds a live Lease: do nothing, look again later.
    StandBy { holder: String },
    /// We led and may no longer: stop acting now.
    Lost(LostBecause),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LostBecause {
    /// No renew succeeded within the renew deadline.
    DeadlinePassed,
    /// The Lease names another holder.
    OtherHolder(String),
}

/// Decide. `lease` is `None` when there is no Lease; `last_renew` is when
/// our last successful acquire or renew was, `None` when we do not lead.
pub fn decide(
    lease: Option<&Observed>,
    me: &str,
    last_renew: Option<Instant>,
    timing: &Timing,
    now: Instant,
) -> Decision {
    let holder = lease
        .and_then(|l| l.holder.as_deref())
        .filter(|h| !h.is_empty());
    if let Some(renewed) = last_renew {
        if now.saturating_duration_since(renewed) >= timing.renew_deadline {
            return Decision::Lost(LostBecause::DeadlinePassed);
        }
        return match holder {
            Some(h) if h != me => Decision::Lost(LostBecause::OtherHolder(h.to_string())),
            _ => Decision::Renew,
        };
    }
    match (lease, holder) {
        (None, _) | (Some(_), None) => Decision::Acquire,
        // Ours from before (same identity): take it back.
        (Some(_), Some(h)) if h == me => Decision::Acquire,
        (Some(l), Some(h)) => {
            if now.saturating_duration_since(l.observed_at) >= l.lease_duration {
                Decision::Acquire
            } else {
                Decision::StandBy {
                    holder: h.to_string(),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn held_by(holder: &str, t0: Instant) -> Observed {
        Observed {
            holder: Some(holder.into()),
            lease_duration: s(15),
            observed_at: t0,
        }
    }

    #[test]
    fn the_table() {
        let t0 = Instant::now();
        let timing = Timing::default();
        let other = held_by("b", t0);
        let mine = held_by("a", t0);
        let released = Observed {
            holder: Some(String::new()),
            ..other.clone()
        };
        // (what, the Lease, our last renew, now, the decision)
        type Case<'a> = (
            &'a str,
            Option<&'a Observed>,
            Option<Instant>,
            Instant,
            Decision,
        );
        #[rustfmt::skip]
        let cases: Vec<Case> = vec![
            ("no Lease: create it", None, None, t0, Decision::Acquire),
            ("a released Lease is taken", Some(&released), None, t0, Decision::Acquire),
            ("a held Lease is respected", Some(&other), None, t0 + s(14), Decision::StandBy { holder: "b".into() }),
            ("an expired Lease is taken over", Some(&other), None, t0 + s(15), Decision::Acquire),
            ("our own Lease from before is taken back", Some(&mine), None, t0, Decision::Acquire),
            ("a leader renews", Some(&mine), Some(t0), t0 + s(2), Decision::Renew),
            ("a leader renews right before the deadline", Some(&mine), Some(t0), t0 + s(10) - Duration::from_millis(1), Decision::Renew),
            ("no renew within the deadline: lost", Some(&mine), Some(t0), t0 + s(10), Decision::Lost(LostBecause::DeadlinePassed)),
            ("lost even if the Lease could not be read", None, Some(t0), t0 + s(11), Decision::Lost(LostBecause::DeadlinePassed)),
            ("another holder appeared: lost", Some(&other), Some(t0), t0 + s(1), Decision::Lost(LostBecause::OtherHolder("b".into()))),
        ];
        for (name, lease, last_renew, now, want) in cases {
            assert_eq!(decide(lease, "a", last_renew, &timing, now), want, "{name}");
        }
    }

    #[test]
    fn a_leader_stops_before_a_standby_may_take_over() {
        // The leader's last renew and the standby's observation of it are
        // the same moment at best; the deadline comes first.
        let t0 = Instant::now();
        let timing = Timing::default();
        let lease = held_by("a", t0);
        let mut t = t0;
        while decide(Some(&lease), "b", None, &timing, t) != Decision::Acquire {
            t += Duration::from_millis(100);
        }
        assert!(matches!(
            decide(Some(&lease), "a", Some(t0), &timing, t),
            Decision::Lost(_)
        ));
    }

    #[test]
    fn timings_that_could_overlap_are_refused() {
        assert!(matches!(
            Timing::new(s(10), s(10), s(2)),
            Err(TimingError::DeadlineNotShorter { .. })
        ));
        assert!(matches!(
            Timing::new(s(15), s(10), s(10)),
            Err(TimingError::RetryNotShorter { .. })
        ));
        assert!(Timing::new(s(4), s(3), Duration::from_millis(500)).is_ok());
    }
}
