//! Series without a global lock: a family holds one counter or histogram of
//! atomics per label set. The label values known when the process starts (the
//! configuration's sources, kinds, handlers and forwards, every value of a closed
//! set) are indexed with neither a lock nor an allocation; a value first seen
//! later (a kind an older configuration stored, an error's code) is added once
//! under a write lock and found under a shared one after.

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

/// Latency buckets of handlers and deliveries, in seconds: 1 ms to 10 s.
const BUCKETS: [f64; 13] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The values one label takes, each with its index.
#[derive(Debug, Default)]
pub struct Values {
    known: HashMap<Box<str>, usize>,
    names: Vec<Box<str>>,
    /// Values first seen at runtime, indexed after the known ones.
    later: RwLock<HashMap<Box<str>, usize>>,
}

impl Values {
    pub fn new<S: AsRef<str>>(values: impl IntoIterator<Item = S>) -> Self {
        let mut out = Values::default();
        for value in values {
            let value = value.as_ref();
            if !out.known.contains_key(value) {
                out.known.insert(value.into(), out.names.len());
                out.names.push(value.into());
            }
        }
        out
    }

    fn index(&self, value: &str) -> usize {
        if let Some(&at) = self.known.get(value) {
            return at;
        }
        if let Some(&at) = read(&self.later).get(value) {
            return at;
        }
        let mut later = write(&self.later);
        let next = self.names.len() + later.len();
        *later.entry(value.into()).or_insert(next)
    }

    /// Every value, by index.
    fn all(&self) -> Vec<Box<str>> {
        let later = read(&self.later);
        let mut all = self.names.clone();
        all.resize(self.names.len() + later.len(), Box::default());
        for (value, &at) in later.iter() {
            all[at] = value.clone();
        }
        all
    }
}

/// A counter or a histogram: what a family holds per label set.
pub trait Series: Default {
    /// Appends its sample lines, or nothing while it was never counted.
    fn write(&self, name: &str, labels: &[(&str, &str)], out: &mut String);
}

/// One metric's series, by the values of its `N` labels.
#[derive(Debug)]
pub struct Family<S, const N: usize> {
    labels: [&'static str; N],
    values: [Values; N],
    /// A series per combination of known values (the first label varies slowest).
    known: Box<[S]>,
    later: RwLock<HashMap<[usize; N], S>>,
}

impl<S: Series, const N: usize> Family<S, N> {
    pub fn new(labels: [&'static str; N], values: [Values; N]) -> Self {
        let len = values.iter().map(|v| v.names.len()).product();
        Family {
            labels,
            values,
            known: (0..len).map(|_| S::default()).collect(),
            later: RwLock::default(),
        }
    }

    /// Calls `f` with the series of these label values.
    pub fn with(&self, values: [&str; N], f: impl FnOnce(&S)) {
        let at: [usize; N] = std::array::from_fn(|i| self.values[i].index(values[i]));
        if let Some(series) = self.offset(&at).and_then(|i| self.known.get(i)) {
            return f(series);
        }
        if let Some(series) = read(&self.later).get(&at) {
            return f(series);
        }
        f(write(&self.later).entry(at).or_default());
    }

    /// How many series were added at runtime, for values not known at the start.
    #[cfg(test)]
    pub fn added_later(&self) -> usize {
        read(&self.later).len()
    }

    fn offset(&self, at: &[usize; N]) -> Option<usize> {
        let mut offset = 0;
        for (values, &at) in self.values.iter().zip(at) {
            let len = values.names.len();
            if at >= len {
                return None;
            }
            offset = offset * len + at;
        }
        Some(offset)
    }

    /// Appends the series counted so far, ordered by their label values.
    pub fn render(&self, name: &str, out: &mut String) {
        let mut series: Vec<([usize; N], String)> = Vec::new();
        let mut add = |at: [usize; N], s: &S, all: &[Vec<Box<str>>; N]| {
            let labels: [(&str, &str); N] =
                std::array::from_fn(|i| (self.labels[i], &*all[i][at[i]]));
            let mut text = String::new();
            s.write(name, &labels, &mut text);
            if !text.is_empty() {
                series.push((at, text));
            }
        };
        // The family's later series first: every value they use is then in `all`.
        let later = read(&self.later);
        let all: [Vec<Box<str>>; N] = std::array::from_fn(|i| self.values[i].all());
        for (offset, s) in self.known.iter().enumerate() {
            let mut at = [0; N];
            let mut rest = offset;
            for i in (0..N).rev() {
                let len = self.values[i].names.len();
                at[i] = rest % len;
                rest /= len;
            }
            add(at, s, &all);
        }
        for (at, s) in later.iter() {
            add(*at, s, &all);
        }
        drop(later);
        series.sort_by(|(a, _), (b, _)| {
            let key = |at: &[usize; N]| -> [&str; N] { std::array::from_fn(|i| &*all[i][at[i]]) };
            key(a).cmp(&key(b))
        });
        for (_, text) in series {
            out.push_str(&text);
        }
    }
}

impl<const N: usize> Family<Counter, N> {
    /// Each value of the first label with the sum of its series.
    pub fn totals_by_first(&self) -> HashMap<Box<str>, u64> {
        let mut totals: HashMap<Box<str>, u64> = HashMap::new();
        let all = self.values[0].all();
        let per_first = self.known.len() / self.values[0].names.len().max(1);
        for (offset, counter) in self.known.iter().enumerate() {
            let first = &all[offset / per_first.max(1)];
            *totals.entry(first.clone()).or_default() += counter.value.load(Relaxed);
        }
        for (at, counter) in read(&self.later).iter() {
            *totals.entry(all[at[0]].clone()).or_default() += counter.value.load(Relaxed);
        }
        totals
    }
}

#[derive(Debug, Default)]
pub struct Counter {
    value: AtomicU64,
    /// Counted at least once, if only by zero: a series an alert sees from the start.
    shown: AtomicBool,
}

impl Counter {
    pub fn add(&self, n: u64) {
        if !self.shown.load(Relaxed) {
            self.shown.store(true, Relaxed);
        }
        self.value.fetch_add(n, Relaxed);
    }
}

impl Series for Counter {
    fn write(&self, name: &str, labels: &[(&str, &str)], out: &mut String) {
        if self.shown.load(Relaxed) {
            let value = self.value.load(Relaxed);
            let _ = writeln!(out, "{name}{} {value}", render_labels(labels, None));
        }
    }
}

#[derive(Debug, Default)]
pub struct Histogram {
    /// Observations per bucket (not cumulative), the last past every bound.
    counts: [AtomicU64; BUCKETS.len() + 1],
    nanos: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, value: Duration) {
        let seconds = value.as_secs_f64();
        let bucket = BUCKETS
            .iter()
            .position(|&bound| seconds <= bound)
            .unwrap_or(BUCKETS.len());
        self.counts[bucket].fetch_add(1, Relaxed);
        let nanos = u64::try_from(value.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(nanos, Relaxed);
    }
}

impl Series for Histogram {
    fn write(&self, name: &str, labels: &[(&str, &str)], out: &mut String) {
        let counts: Vec<u64> = self.counts.iter().map(|c| c.load(Relaxed)).collect();
        // The count is the buckets' total, so a scrape during an observation
        // still reads a consistent histogram.
        let count: u64 = counts.iter().sum();
        if count == 0 {
            return;
        }
        let mut cumulative = 0;
        for (bound, n) in BUCKETS.iter().zip(&counts) {
            cumulative += n;
            let le = format!("{bound}");
            let _ = writeln!(
                out,
                "{name}_bucket{} {cumulative}",
                render_labels(labels, Some(&le))
            );
        }
        let sum = self.nanos.load(Relaxed) as f64 / 1e9;
        let plain = render_labels(labels, None);
        let _ = writeln!(
            out,
            "{name}_bucket{} {count}",
            render_labels(labels, Some("+Inf"))
        );
        let _ = writeln!(out, "{name}_sum{plain} {sum}");
        let _ = writeln!(out, "{name}_count{plain} {count}");
    }
}

pub fn render_labels(labels: &[(&str, &str)], le: Option<&str>) -> String {
    let mut parts: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    if let Some(le) = le {
        parts.push(format!("le=\"{le}\""));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(","))
    }
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

// Nothing panics while holding these locks; a poisoned one is still sound.
fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}
