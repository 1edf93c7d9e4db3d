//! TCP relays between hookd and a test database: what they share, and one that
//! holds cancel requests until the test lets them go.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

/// A byte stream to the database, over TCP or its socket.
pub trait Link: AsyncRead + AsyncWrite + Send + Unpin {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin> Link for T {}

/// A new connection to `upstream`'s server (its first host and port).
pub async fn connect(upstream: &tokio_postgres::Config) -> Box<dyn Link> {
    let port = upstream.get_ports()[0];
    match &upstream.get_hosts()[0] {
        tokio_postgres::config::Host::Unix(dir) => {
            let socket = dir.join(format!(".s.PGSQL.{port}"));
            Box::new(
                tokio::net::UnixStream::connect(socket)
                    .await
                    .expect("the database"),
            )
        }
        tokio_postgres::config::Host::Tcp(host) => Box::new(
            tokio::net::TcpStream::connect((host.as_str(), port))
                .await
                .expect("the database"),
        ),
    }
}

/// `upstream`'s user and database, reached through a relay on 127.0.0.1:`port`.
pub fn through(port: u16, upstream: &tokio_postgres::Config) -> tokio_postgres::Config {
    let mut config = tokio_postgres::Config::new();
    config
        .host("127.0.0.1")
        .port(port)
        .user(upstream.get_user().expect("user"))
        .dbname(upstream.get_dbname().expect("dbname"));
    config
}

/// The protocol's cancel request code (its first eight bytes are the length,
/// 16, and this).
const CANCEL_REQUEST: u32 = 80_877_102;

/// Relays connections to a test database as they are, but keeps every cancel
/// request (a connection of its own, sent by a client whose statement ran too
/// long) until `release`: a cancel that reaches the server late, as one may
/// over a slow link, made to happen at the moment the test chooses.
pub struct CancelRelay {
    port: u16,
    upstream: tokio_postgres::Config,
    held: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl CancelRelay {
    pub async fn to(upstream: tokio_postgres::Config) -> CancelRelay {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let held = Arc::new(Mutex::new(Vec::new()));
        let (config, kept) = (upstream.clone(), held.clone());
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let (config, kept) = (config.clone(), kept.clone());
                tokio::spawn(async move {
                    let mut head = [0u8; 8];
                    if client.read_exact(&mut head).await.is_err() {
                        return;
                    }
                    let length = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
                    let code = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
                    if length == 16 && code == CANCEL_REQUEST {
                        let mut key = [0u8; 8];
                        if client.read_exact(&mut key).await.is_ok() {
                            let request = [head, key].concat();
                            kept.lock().expect("held").push(request);
                        }
                        return;
                    }
                    let mut server = connect(&config).await;
                    if server.write_all(&head).await.is_ok() {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        CancelRelay {
            port,
            upstream,
            held,
        }
    }

    /// The upstream database's settings, through the relay.
    pub fn config(&self) -> tokio_postgres::Config {
        through(self.port, &self.upstream)
    }

    /// How many cancel requests it holds.
    pub fn held(&self) -> usize {
        self.held.lock().expect("held").len()
    }

    /// Sends every cancel request held to the server, each once the server has
    /// acted on it (it closes the connection after signalling the session).
    pub async fn release(&self) {
        let requests = std::mem::take(&mut *self.held.lock().expect("held"));
        for request in requests {
            let mut server = connect(&self.upstream).await;
            server.write_all(&request).await.expect("cancel request");
            let mut rest = Vec::new();
            let _ = server.read_to_end(&mut rest).await;
        }
    }
}

/// Relays connections to a test database until `stall`, then holds every byte
/// either way (the connections stay open): a server host lost without a reset,
/// or a link that stopped carrying anything. `stall_answers` holds only the
/// server's bytes: what the client sends is done, and it hears of it late.
/// `resume` lets them flow again.
pub struct StallRelay {
    port: u16,
    upstream: tokio_postgres::Config,
    /// Holds what the client sends.
    asks_held: Arc<AtomicBool>,
    /// Holds what the server sends.
    answers_held: Arc<AtomicBool>,
}

impl StallRelay {
    pub async fn to(upstream: tokio_postgres::Config) -> StallRelay {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let (asks_held, answers_held): (Arc<AtomicBool>, Arc<AtomicBool>) = Default::default();
        let (config, asks, answers) = (
            upstream.clone(),
            Arc::clone(&asks_held),
            Arc::clone(&answers_held),
        );
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (config, asks, answers) = (config.clone(), asks.clone(), answers.clone());
                tokio::spawn(async move {
                    let server = connect(&config).await;
                    let (client_in, client_out) = client.into_split();
                    let (server_in, server_out) = tokio::io::split(server);
                    tokio::join!(
                        pump(client_in, server_out, asks),
                        pump(server_in, client_out, answers)
                    );
                });
            }
        });
        StallRelay {
            port,
            upstream,
            asks_held,
            answers_held,
        }
    }

    /// The upstream database's settings, through the relay.
    pub fn config(&self) -> tokio_postgres::Config {
        through(self.port, &self.upstream)
    }

    /// A `DATABASE_URL` reaching the upstream database through the relay.
    pub fn database_url(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user={} dbname={}",
            self.port,
            self.upstream.get_user().expect("user"),
            self.upstream.get_dbname().expect("dbname")
        )
    }

    pub fn stall(&self) {
        self.asks_held.store(true, Ordering::SeqCst);
        self.answers_held.store(true, Ordering::SeqCst);
    }

    /// Holds what the server sends, and only that.
    pub fn stall_answers(&self) {
        self.answers_held.store(true, Ordering::SeqCst);
    }

    pub fn resume(&self) {
        self.asks_held.store(false, Ordering::SeqCst);
        self.answers_held.store(false, Ordering::SeqCst);
    }
}

/// Copies `from` to `to`, holding what it read while `held`.
async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    held: Arc<AtomicBool>,
) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => read,
        };
        while held.load(Ordering::SeqCst) {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}
