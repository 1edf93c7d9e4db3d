//! The exporter: finished spans wait in a bounded queue (a full queue drops
//! the span and counts it: a delivery never waits for a collector), and a
//! thread of its own sends them in batches, each POST under a timeout. A
//! collector that is down costs the spans of that time, and one log line when it
//! goes away and one when it is back.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::layer::SpanLayer;
use super::otlp::{self, Resource, SpanRecord};
use super::{Protocol, Settings, TracesError};

/// Finished spans waiting to be sent, at most.
pub const QUEUE: usize = 2048;
/// Spans in one request, at most.
const BATCH: usize = 512;
/// How long a span waits for company before its batch is sent.
const DELAY: Duration = Duration::from_secs(1);
/// One POST's limit, unless `OTEL_EXPORTER_OTLP_TIMEOUT` says otherwise.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// How long the end of `main` waits for the last spans to go.
const FLUSH_WITHIN: Duration = Duration::from_secs(5);

pub struct Exporter {
    closing: Arc<AtomicBool>,
    /// Told when the thread has sent what was queued and stopped.
    done: Mutex<Receiver<()>>,
}

impl Exporter {
    /// Starts the thread; returns it and the layer feeding it.
    pub fn start(settings: Settings) -> Result<(Exporter, SpanLayer), TracesError> {
        let http = crate::outbound::client(settings.timeout)
            .map_err(|e| TracesError::Client(e.to_string()))?;
        let (queue, spans) = mpsc::sync_channel(QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        let closing = Arc::new(AtomicBool::new(false));
        let (finished, done) = mpsc::channel();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| TracesError::Start(e.to_string()))?;
        let mut sender = Sender {
            settings,
            http,
            runtime,
            failing: false,
            dropped: dropped.clone(),
        };
        let stop = closing.clone();
        std::thread::Builder::new()
            .name("hookd-traces".into())
            .spawn(move || {
                sender.run(&spans, &stop);
                let _ = finished.send(());
            })
            .map_err(|e| TracesError::Start(e.to_string()))?;
        let layer = SpanLayer { queue, dropped };
        let exporter = Exporter {
            closing,
            done: Mutex::new(done),
        };
        Ok((exporter, layer))
    }

    /// Sends what is queued and stops the thread, waiting `FLUSH_WITHIN` at most.
    pub fn flush(&self) {
        self.closing.store(true, Ordering::Release);
        if let Ok(done) = self.done.lock()
            && done.recv_timeout(FLUSH_WITHIN).is_err()
        {
            log::warn!("traces: the collector took too long; the last spans are lost");
        }
    }
}

struct Sender {
    settings: Settings,
    http: reqwest::Client,
    runtime: tokio::runtime::Runtime,
    /// Whether the last POST failed (logged once, until one succeeds).
    failing: bool,
    dropped: Arc<AtomicU64>,
}

impl Sender {
    /// The collector's URL for a log line: never its credentials or query.
    fn collector(&self) -> String {
        reqwest::Url::parse(&self.settings.url).map_or_else(
            |_| "the collector".into(),
            |url| crate::config::shown_url(&url),
        )
    }

    fn run(&mut self, spans: &Receiver<SpanRecord>, closing: &AtomicBool) {
        let mut batch = Vec::with_capacity(BATCH);
        let mut first_at = None;
        loop {
            let closing_now = closing.load(Ordering::Acquire);
            let wait = match first_at {
                _ if closing_now => Duration::ZERO,
                Some(at) => DELAY.saturating_sub(Instant::elapsed(&at)),
                // Idle: look at the closing flag now and then.
                None => Duration::from_millis(100),
            };
            let next = if wait.is_zero() {
                spans.try_recv().map_err(|_| RecvTimeoutError::Timeout)
            } else {
                spans.recv_timeout(wait)
            };
            match next {
                Ok(span) => {
                    first_at.get_or_insert_with(Instant::now);
                    batch.push(span);
                    if batch.len() < BATCH {
                        continue;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.send(&mut batch);
                    return;
                }
                Err(RecvTimeoutError::Timeout) => {
                    let due = first_at.is_some_and(|at| at.elapsed() >= DELAY);
                    if !(due || closing_now) {
                        continue;
                    }
                }
            }
            self.send(&mut batch);
            first_at = None;
            if closing_now && spans.try_recv().map(|s| batch.push(s)).is_err() {
                return;
            }
        }
    }

    fn send(&mut self, batch: &mut Vec<SpanRecord>) {
        let dropped = self.dropped.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            log::warn!("traces: {dropped} spans dropped, the queue of {QUEUE} being full");
        }
        if batch.is_empty() {
            return;
        }
        let resource = Resource {
            service_name: &self.settings.service_name,
        };
        let (body, content_type) = match self.settings.protocol {
            Protocol::Protobuf => (otlp::protobuf(&resource, batch), "application/x-protobuf"),
            Protocol::Json => (otlp::json(&resource, batch), "application/json"),
        };
        let count = batch.len();
        batch.clear();
        let mut request = self
            .http
            .post(&self.settings.url)
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .body(body);
        for (name, value) in &self.settings.headers {
            request = request.header(name, value);
        }
        let answer = self.runtime.block_on(async {
            let response = request
                .send()
                .await
                .map_err(|e| e.without_url().to_string())?;
            match response.status() {
                status if status.is_success() => Ok(()),
                status => Err(format!("answered {status}")),
            }
        });
        match answer {
            Ok(()) if self.failing => {
                self.failing = false;
                log::info!("traces: {} accepts spans again", self.collector());
            }
            Ok(()) => {}
            Err(why) if !self.failing => {
                self.failing = true;
                log::warn!(
                    "traces: cannot send {count} spans to {}: {why}; spans are dropped until it answers",
                    self.collector()
                );
            }
            Err(_) => {}
        }
    }
}
