//! An open loop's worst moment at a fine grain: around its slowest delivery
//! (or transaction), slot by slot, how many were due, answered and still in
//! flight, and what the database's backends did meanwhile (client sessions
//! busy, the one in its statement the longest and its wait, background
//! processes at work). It tells a stall of the database — a statement held in
//! a wait while the deliveries pile up — from one of its client: sessions idle
//! while deliveries wait.

use std::time::Duration;

use crate::waits::{Background, Look};

/// The finest slot; wider when the moment is long, so the trace stays short.
const SLOT: Duration = Duration::from_millis(10);
/// Slots at most.
const SLOTS: u32 = 60;
/// How much of the time before the slowest delivery was due is shown, and
/// after the last slow answer.
const BEFORE: Duration = Duration::from_millis(50);
/// The backlog has drained once this long passes without a slow delivery due
/// (one taking a quarter of the slowest's time or more).
const DRAINED: Duration = Duration::from_millis(100);

/// The trace's lines, or none without a delivery: from just before the
/// slowest delivery was due until the backlog behind it has drained. `points`
/// are `(due, latency)` and `looks` are stamped from one origin (the
/// sampler's start).
pub fn trace(points: &[(Duration, Duration)], looks: &[Look]) -> Vec<String> {
    let Some(&(due, latency)) = points.iter().max_by_key(|&&(_, latency)| latency) else {
        return Vec::new();
    };
    let mut after: Vec<(Duration, Duration)> =
        points.iter().copied().filter(|&(d, _)| d > due).collect();
    after.sort_unstable();
    let (mut last_slow, mut drained) = (due, due + latency);
    for (d, l) in after {
        if d > last_slow + DRAINED {
            break;
        }
        if l >= latency / 4 {
            last_slow = d;
            drained = drained.max(d + l);
        }
    }
    let from = due.saturating_sub(BEFORE);
    let to = drained + BEFORE;
    // Whole milliseconds, so the header says the slot's width exactly.
    let slot = SLOT.max(Duration::from_millis(
        u64::try_from((to - from).as_millis().div_ceil(u128::from(SLOTS))).unwrap_or(u64::MAX),
    ));
    let mut lines = vec![format!(
        "the slowest: due at {:.3} s, answered after {:.1} ms; per {} ms from {:.3} s:",
        due.as_secs_f64(),
        latency.as_secs_f64() * 1e3,
        slot.as_millis(),
        from.as_secs_f64()
    )];
    let mut start = from;
    while start < to {
        let end = start + slot;
        lines.push(line(points, looks, start, end, from));
        start = end;
    }
    lines
}

/// Each background process seen at work in `looks`, with the seconds (from
/// the sampler's start) it was seen in: `autovacuum worker (autovacuum:
/// VACUUM ANALYZE public.webhook_events) s 26–29`. Whether a window met the
/// same background work as the one it is compared with.
pub fn background(looks: &[Look]) -> Vec<String> {
    let mut seen: std::collections::BTreeMap<&str, Vec<u64>> = Default::default();
    for look in looks {
        for at_work in &look.background {
            // One process's many waits are one entry: its kind and its work.
            let seconds = seen.entry(at_work.process.as_str()).or_default();
            let second = look.at.as_secs();
            if seconds.last() != Some(&second) {
                seconds.push(second);
            }
        }
    }
    seen.into_iter()
        .map(|(what, seconds)| format!("{what} s {}", ranges(&seconds)))
        .collect()
}

/// `1 2 3 7 9 10` as `1–3, 7, 9–10`.
fn ranges(seconds: &[u64]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut at = 0;
    while at < seconds.len() {
        let first = seconds[at];
        let mut last = first;
        while at + 1 < seconds.len() && seconds[at + 1] == last + 1 {
            at += 1;
            last = seconds[at];
        }
        parts.push(if first == last {
            first.to_string()
        } else {
            format!("{first}–{last}")
        });
        at += 1;
    }
    parts.join(", ")
}

/// One slot `[start, end)`.
fn line(
    points: &[(Duration, Duration)],
    looks: &[Look],
    start: Duration,
    end: Duration,
    from: Duration,
) -> String {
    let within = |at: Duration| at >= start && at < end;
    let due = points.iter().filter(|&&(due, _)| within(due)).count();
    let answered = points.iter().filter(|&&(d, l)| within(d + l)).count();
    let in_flight = points
        .iter()
        .filter(|&&(d, l)| d < end && d + l >= end)
        .count();
    let slowest_due = points
        .iter()
        .filter(|&&(due, _)| within(due))
        .map(|&(_, latency)| latency)
        .max()
        .unwrap_or_default();
    let seen: Vec<&Look> = looks.iter().filter(|look| within(look.at)).collect();
    let busy = seen
        .iter()
        .fold(0.0, |sum, look| sum + f64::from(look.busy))
        / seen.len().max(1) as f64;
    let longest = seen
        .iter()
        .filter_map(|look| look.longest.as_ref())
        .max_by_key(|(lasted, _)| *lasted)
        .map_or_else(
            || "-".to_string(),
            |(lasted, word)| format!("{:.1} ms {word}", lasted.as_secs_f64() * 1e3),
        );
    let mut background: Vec<String> = seen
        .iter()
        .flat_map(|look| look.background.iter())
        .map(|Background { process, word }| format!("{process} {word}"))
        .collect();
    background.sort_unstable();
    background.dedup();
    format!(
        "  +{:>4} ms  due {due:>3}  answered {answered:>3}  in flight {in_flight:>4}  \
         slowest due {:>6.1} ms | {} looks, {busy:.1} busy, longest {longest}{}",
        (start - from).as_millis(),
        slowest_due.as_secs_f64() * 1e3,
        seen.len(),
        if background.is_empty() {
            String::new()
        } else {
            format!(" | {}", background.join(", "))
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at_work(process: &str, word: &str) -> Background {
        Background {
            process: process.into(),
            word: word.into(),
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_stall_shows_as_deliveries_in_flight_beside_a_statement_that_lasts() {
        // Deliveries every 2 ms answered in 1 ms, but those due from 100 to
        // 200 ms wait until 200 ms: the database held one COMMIT meanwhile.
        let points: Vec<(Duration, Duration)> = (0..150)
            .map(|i| {
                let due = ms(2 * i);
                let done = if due >= ms(100) && due < ms(200) {
                    ms(200)
                } else {
                    due + ms(1)
                };
                (due, done - due)
            })
            .collect();
        let looks: Vec<Look> = (0..60)
            .map(|i| {
                let at = ms(5 * i);
                let stalled = at >= ms(100) && at < ms(200);
                Look {
                    at,
                    busy: 1,
                    longest: Some(if stalled {
                        (at - ms(100), "IO:WALSync".into())
                    } else {
                        (ms(0), "CPU".into())
                    }),
                    background: if stalled {
                        vec![at_work("checkpointer", "IO:DataFileSync")]
                    } else {
                        Vec::new()
                    },
                }
            })
            .collect();
        let lines = trace(&points, &looks);
        assert!(lines[0].starts_with("the slowest: due at 0.100 s, answered after 100.0 ms"));
        // From 50 ms before the slowest was due to 50 ms after its answer.
        assert_eq!(lines.len(), 1 + 20);
        let stalled = &lines[1 + 14]; // 190–200 ms
        assert!(stalled.contains("in flight   50"), "{stalled}");
        assert!(stalled.contains("longest 95.0 ms IO:WALSync"), "{stalled}");
        assert!(
            stalled.contains("checkpointer IO:DataFileSync"),
            "{stalled}"
        );
        // 200–210 ms: the backlog answered at once, with those due then.
        let released = &lines[1 + 15];
        assert!(released.contains("answered  55"), "{released}");
        assert!(!released.contains("checkpointer"), "{released}");
    }

    #[test]
    fn the_trace_goes_on_until_the_backlog_has_drained() {
        // One delivery held 100 ms, then 200 ms of deliveries each 40 ms late.
        let mut points = vec![(ms(100), ms(100))];
        points.extend((0..100).map(|i| (ms(200 + 2 * i), ms(40))));
        points.push((ms(600), ms(1)));
        let lines = trace(&points, &[]);
        // From 50 ms before the slowest to 50 ms after the last late answer
        // (due at 398 ms, answered at 438 ms): 440 ms in 10-ms slots.
        assert_eq!(lines.len(), 1 + 44, "{lines:#?}");
    }

    #[test]
    fn a_long_moment_is_cut_in_whole_milliseconds_into_sixty_slots_at_most() {
        // 1 s held, traced from 50 ms before to 50 ms after: 1,100 ms.
        let lines = trace(&[(ms(100), ms(1000))], &[]);
        assert!(
            lines[0].ends_with("per 19 ms from 0.050 s:"),
            "{}",
            lines[0]
        );
        assert_eq!(lines.len(), 1 + 58);
    }

    #[test]
    fn background_work_is_listed_with_the_seconds_it_was_seen_in() {
        let look = |secs: u64, background: Vec<Background>| Look {
            at: Duration::from_millis(secs * 1000 + 5),
            busy: 0,
            longest: None,
            background,
        };
        let checkpointer = || at_work("checkpointer", "IO:DataFileSync");
        let looks = [
            look(1, vec![checkpointer()]),
            look(2, vec![checkpointer(), at_work("autovacuum worker", "CPU")]),
            look(2, vec![at_work("checkpointer", "CPU")]),
            look(3, vec![checkpointer()]),
            look(7, vec![checkpointer()]),
        ];
        assert_eq!(
            background(&looks),
            ["autovacuum worker s 2", "checkpointer s 1–3, 7"]
        );
    }

    #[test]
    fn no_delivery_no_trace() {
        assert!(trace(&[], &[]).is_empty());
    }
}
