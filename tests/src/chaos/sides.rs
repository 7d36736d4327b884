//! Which master each grant came from after a failover: a client's masters over time, and the
//! sides the fenced store favoured.

use super::{Outcome, Record};

/// A client's master over time: `(mono_ns, "host:port")` lines as the chaos worker writes them
/// (`<out>.masters`, for a Sentinel URL), in order; empty if there is no such file.
pub fn read_masters(path: &std::path::Path) -> Vec<(u64, String)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (at, addr) = l.split_once(' ')?;
            Some((at.parse().ok()?, addr.to_string()))
        })
        .collect()
}

/// The master a client used at `at`, per its log ([`read_masters`]): the last one named at or
/// before `at`. A grant is attributed to the master its client used when the acquisition
/// returned (a reply from the old master that arrives after the switch is an unknown outcome
/// the client reconciles on the new one, so it is not a grant of the old one).
pub fn master_at(log: &[(u64, String)], at: u64) -> Option<&str> {
    let i = log.partition_point(|(t, _)| *t <= at);
    i.checked_sub(1).map(|i| log[i].1.as_str())
}

/// Which side the fenced store favoured after a failover: among the sections that started
/// from the promotion of the new master until the window ended, those granted by the deposed
/// master (whose grants the new master never saw) and those granted by the new one.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Sides {
    /// Sections granted by the deposed master after the promotion.
    pub deposed: usize,
    /// Of those, writes the store accepted (grants the surviving master never knew of).
    pub deposed_accepted: usize,
    /// Of those, writes accepted while a section the new master granted on the same key, with
    /// a smaller token, overlapped them: the store favoured the wrong side (the deposed side's
    /// token was the larger, as clock-floored tokens often were).
    pub deposed_won: usize,
    /// Of those, writes accepted while only sections of the new master with larger tokens
    /// overlapped them: the store took the deposed write first, before it had seen the larger
    /// token (it cannot refuse a token lower than one it has not seen), and the legitimate
    /// holder's accesses after it (a fenced store serialises the two).
    pub deposed_first: usize,
    /// Sections granted by the new master after the promotion whose read or write the store
    /// refused (a deposed holder had shown it a larger token).
    pub legitimate_refused: usize,
}

/// [`Sides`] of one failover: `sections` are `(record, master its client used)`, `deposed` the
/// old master's address, `[promoted, to)` the window after the promotion.
pub fn sides(sections: &[(&Record, Option<&str>)], deposed: &str, promoted: u64, to: u64) -> Sides {
    let mut sides = Sides::default();
    let window: Vec<(&Record, bool)> = sections
        .iter()
        .filter(|(r, _)| (promoted..to).contains(&r.start_ns))
        .map(|&(r, master)| (r, master == Some(deposed)))
        .collect();
    for &(r, on_deposed) in &window {
        let rejected = matches!(r.outcome, Outcome::RejectedRead | Outcome::RejectedWrite);
        if on_deposed {
            sides.deposed += 1;
            if r.outcome == Outcome::Committed {
                sides.deposed_accepted += 1;
                let rivals = window.iter().filter(|&&(o, o_deposed)| {
                    !o_deposed && o.key == r.key && o.start_ns < r.end_ns && r.start_ns < o.end_ns
                });
                let (mut lower, mut higher) = (false, false);
                for &(o, _) in rivals {
                    lower |= o.token < r.token;
                    higher |= o.token > r.token;
                }
                if lower {
                    sides.deposed_won += 1;
                } else if higher {
                    sides.deposed_first += 1;
                }
            }
        } else if rejected {
            sides.legitimate_refused += 1;
        }
    }
    sides
}
