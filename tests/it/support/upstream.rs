//! A payment endpoint behind the gateway, spoken to over plain HTTP/1.1 on a
//! socket of its own: it counts and keeps every request it gets, and answers
//! each as its script says — at once, late, never, or by cutting the
//! connection once it has read the request (the work done, the answer lost).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How the upstream answers one request.
#[derive(Debug, Clone)]
pub enum Reply {
    Answer {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
        /// Waited before answering.
        delay: Duration,
    },
    /// Reads the request, then closes the connection without a word.
    Cut,
}

impl Reply {
    /// `status` with a JSON body, at once.
    pub fn json(status: u16, body: &str) -> Reply {
        Reply::Answer {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: body.as_bytes().to_vec(),
            delay: Duration::ZERO,
        }
    }

    pub fn with_header(mut self, name: &str, value: &str) -> Reply {
        if let Reply::Answer { headers, .. } = &mut self {
            headers.push((name.into(), value.into()));
        }
        self
    }

    pub fn after(mut self, wait: Duration) -> Reply {
        if let Reply::Answer { delay, .. } = &mut self {
            *delay = wait;
        }
        self
    }
}

/// One request the upstream got.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

pub struct Upstream {
    pub url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// While `true`, answers wait (each request is read and kept first).
    held: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Script = Arc<Mutex<(VecDeque<Reply>, Reply)>>;

impl Upstream {
    /// Answers each request with the next of `script`, then with `then`.
    pub async fn start(script: Vec<Reply>, then: Reply) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let script: Script = Arc::new(Mutex::new((script.into(), then)));
        let kept = seen.clone();
        let (held, holding) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serve(socket, kept.clone(), script.clone(), holding.clone()));
            }
        });
        Upstream {
            url,
            seen,
            held,
            task,
        }
    }

    /// Answers wait until `let_go`: a request stays in flight as long as the
    /// test needs, however slow the machine.
    pub fn hold(&self) {
        self.held.send_replace(true);
    }

    pub fn let_go(&self) {
        self.held.send_replace(false);
    }

    /// Answers every request `201 {"id":"pay_1"}`.
    pub async fn created() -> Upstream {
        Upstream::start(vec![], Reply::json(201, r#"{"id":"pay_1"}"#)).await
    }

    /// Requests so far.
    pub fn calls(&self) -> usize {
        self.seen.lock().expect("seen").len()
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("seen").clone()
    }

    /// Waits until `n` requests arrived (10 s at most).
    pub async fn wait_for_calls(&self, n: usize) {
        crate::support::wait_for("upstream calls", Duration::from_secs(10), || {
            std::future::ready((self.calls() >= n).then_some(()))
        })
        .await;
    }
}

/// A URL where nothing listens: connecting is refused. (A port from below
/// the ephemeral range, which no other test's `bind(0)` can be given.)
pub fn refusing_url() -> String {
    format!("http://127.0.0.1:{}", hookd_kit::pooler::free_port())
}

async fn serve(
    mut socket: TcpStream,
    seen: Arc<Mutex<Vec<Seen>>>,
    script: Script,
    mut holding: tokio::sync::watch::Receiver<bool>,
) {
    let mut buffer = Vec::new();
    loop {
        let Some(request) = read_request(&mut socket, &mut buffer).await else {
            return;
        };
        seen.lock().expect("seen").push(request);
        let reply = {
            let mut script = script.lock().expect("script");
            let next = script.0.pop_front();
            next.unwrap_or_else(|| script.1.clone())
        };
        match reply {
            Reply::Cut => return,
            Reply::Answer {
                status,
                headers,
                body,
                delay,
            } => {
                tokio::time::sleep(delay).await;
                if holding.wait_for(|held| !held).await.is_err() {
                    return;
                }
                let mut head = format!(
                    "HTTP/1.1 {status} Whatever\r\ncontent-length: {}\r\n",
                    body.len()
                );
                for (name, value) in headers {
                    head.push_str(&format!("{name}: {value}\r\n"));
                }
                head.push_str("\r\n");
                if socket.write_all(head.as_bytes()).await.is_err()
                    || socket.write_all(&body).await.is_err()
                {
                    return;
                }
            }
        }
    }
}

/// One request off the connection (head, then a `Content-Length` body); `None`
/// when the connection ends first.
pub async fn read_request<S: AsyncRead + Unpin>(
    socket: &mut S,
    buffer: &mut Vec<u8>,
) -> Option<Seen> {
    let end = loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        let mut chunk = [0u8; 8192];
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
    buffer.drain(..end + 4);
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, target) = (first.next()?.to_string(), first.next()?.to_string());
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    while buffer.len() < length {
        let mut chunk = [0u8; 8192];
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
    let body = buffer.drain(..length).collect();
    Some(Seen {
        method,
        target,
        headers,
        body,
    })
}
