//! Wiring: the database (embedded or `DATABASE_URL`), migrations, the HTTP server and
//! the background loops, and the orderly stop of all of them.

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use actix_web::dev::ServerHandle;
use deadpool_postgres::Pool;
use tokio::task::JoinHandle;

use crate::config::Settings;
use crate::embedded_pg::{self, ClusterOptions, EmbeddedPostgres};
use crate::http::{self, AppState};
use crate::shutdown::{self, ShutdownTrigger};
use crate::store::{self, StoreError};

/// Where `hookd` keeps its embedded cluster, relative to the working directory.
pub const EMBEDDED_DIR: &str = ".hookd/pg";
/// A request's head (line and headers) must arrive within this.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// An idle keep-alive connection is closed after this.
const KEEP_ALIVE: Duration = Duration::from_secs(30);
/// After an early answer (413, 408), the rest of a body is read and dropped for at
/// most this long, so the client sees the answer rather than a reset.
const LINGER: Duration = Duration::from_secs(1);
/// Open connections per listener, all workers together; past it, new connections
/// wait in the kernel's backlog.
const MAX_CONNECTIONS: usize = 4096;
/// Added to the time a request may take, for a connection's answer deadline.
const ANSWER_SLACK: Duration = Duration::from_secs(20);

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("DATABASE_URL: {0}")]
    DatabaseUrl(String),
    #[error("embedded PostgreSQL: {0}")]
    Embedded(#[from] embedded_pg::EmbeddedError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(
        "no database: DATABASE_URL is unset and no embedded cluster is in {EMBEDDED_DIR} here \
         (hookd serve or migrate makes it there); set DATABASE_URL as the service has it, or run this \
         where serve runs"
    )]
    NoDatabase,
}

/// What a command does where `DATABASE_URL` is unset and no embedded cluster
/// is here yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unmade {
    /// Makes it, as `serve` would, and warns that it is new and empty: a
    /// look (`events`, `payments`) or a pass (`purge`) is harmless there.
    Make,
    /// Refuses in one line (exit 78): a command whose work would be lost in
    /// a new cluster — an erasure that erases nothing (`forget`), events
    /// recovered where nothing serves them (`reconcile`).
    Refuse,
}

/// The database hookd talks to, and the embedded cluster behind it, if any.
pub struct Database {
    pub pool: Pool,
    /// How the pool connects (a cancel request must connect the same way).
    pub connector: store::DbConnector,
    embedded: Option<EmbeddedPostgres>,
}

impl Database {
    /// Connects to `DATABASE_URL`, or starts the embedded cluster when it is unset.
    pub async fn open(settings: &Settings) -> Result<Self, StartError> {
        if let Some(url) = &settings.database_url {
            let (config, tls, pooler) = store::tls::connect_options(url.expose())
                .map_err(|e| StartError::DatabaseUrl(e.to_string()))?;
            if pooler == store::Pooler::Transaction {
                log::info!(
                    "DATABASE_URL has pgbouncer=true: statements are sent unnamed, and locks \
                     and limits last one transaction"
                );
            }
            return Ok(Database {
                pool: store::pool_through(config, tls.clone(), settings.pool_size, pooler),
                connector: tls,
                embedded: None,
            });
        }
        let cluster = tokio::task::spawn_blocking(|| {
            EmbeddedPostgres::start(Path::new(EMBEDDED_DIR), ClusterOptions { durable: true })
        })
        .await
        .map_err(|e| embedded_pg::EmbeddedError::Command {
            action: "starting the embedded cluster".into(),
            detail: e.to_string(),
        })??;
        store::create_database_if_missing(&cluster.pg_config("postgres"), embedded_pg::DATABASE)
            .await?;
        Ok(Database {
            pool: store::pool(
                cluster.pg_config(embedded_pg::DATABASE),
                store::DbConnector::Plain,
                settings.pool_size,
            ),
            connector: store::DbConnector::Plain,
            embedded: Some(cluster),
        })
    }

    /// `open`, for a command run beside `serve`. Without `DATABASE_URL` and
    /// with no embedded cluster here yet, it does as `unmade` says; a cluster
    /// it makes is announced as new and empty: a command run without the
    /// service's environment (an operator's shell that never read
    /// `/etc/default/hookd`) would otherwise answer from it — "no events
    /// match" — without a word.
    pub async fn open_for_command(settings: &Settings, unmade: Unmade) -> Result<Self, StartError> {
        let unmade_here =
            settings.database_url.is_none() && !embedded_pg::made_for(Path::new(EMBEDDED_DIR));
        if unmade_here && unmade == Unmade::Refuse {
            return Err(StartError::NoDatabase);
        }
        let database = Self::open(settings).await?;
        // (Made by this process: another one started beside it may have made
        // it meanwhile.)
        if database
            .embedded
            .as_ref()
            .is_some_and(EmbeddedPostgres::made_now)
        {
            log::warn!(
                "DATABASE_URL is unset and no embedded cluster was in {EMBEDDED_DIR} here: \
                 made a new, empty one; set DATABASE_URL as the service has it to reach the \
                 service's database"
            );
        }
        Ok(database)
    }

    /// Whether this is the embedded cluster.
    pub fn is_embedded(&self) -> bool {
        self.embedded.is_some()
    }

    /// Closes the pool and stops the embedded cluster if this process started it.
    pub async fn close(self) {
        self.pool.close();
        if let Some(mut cluster) = self.embedded {
            let stopped = tokio::task::spawn_blocking(move || cluster.stop()).await;
            if let Ok(Err(error)) = stopped {
                log::error!("{error}");
            }
        }
    }
}

/// Which parts of an instance run (tests drive the loops by hand).
#[derive(Debug, Clone, Copy)]
pub struct Parts {
    pub dispatcher: bool,
    pub purge: bool,
    /// The sources' activity, written every few seconds (silence alerts).
    pub activity: bool,
}

impl Parts {
    pub const ALL: Parts = Parts {
        dispatcher: true,
        purge: true,
        activity: true,
    };
}

pub use crate::instance::Instance;

impl Instance {
    /// Binds the listeners and starts the servers and the chosen loops.
    pub fn start(&self, parts: Parts) -> Result<Running, StartError> {
        raise_open_files_limit();
        let state = actix_web::web::Data::new(AppState::new(self.clone()));
        let settings = self.settings.now();
        let with_admin = settings.admin_listen.is_none();
        let workers = settings.http_workers;
        let (addr, public) = serve_http(
            settings.listen,
            state.clone(),
            move |config| http::public_routes(config, with_admin),
            workers,
            Listener::Hookd,
        )?;
        let mut servers = vec![public];
        let mut admin_addr = None;
        if let Some(listen) = settings.admin_listen {
            // Operators and staff only: one worker is plenty.
            let (bound, admin) = serve_http(
                listen,
                state.clone(),
                http::admin_listener_routes,
                1,
                Listener::Hookd,
            )?;
            admin_addr = Some(bound);
            servers.push(admin);
        }
        let mut gateway_addr = None;
        if let Some(listen) = settings.gateway.listen {
            let (bound, gateway) = serve_http(
                listen,
                state.clone(),
                crate::gateway::routes,
                workers,
                Listener::Gateway,
            )?;
            gateway_addr = Some(bound);
            servers.push(gateway);
        }

        let (trigger, stop) = shutdown::channel();
        let mut loops = Vec::new();
        if parts.dispatcher {
            for _ in 0..settings.dispatchers {
                loops.push(tokio::spawn(
                    self.dispatcher.clone().run_until_stopped(stop.clone()),
                ));
            }
            loops.push(tokio::spawn(
                self.dispatcher
                    .forwarder()
                    .clone()
                    .run_until_stopped(stop.clone()),
            ));
        }
        if parts.activity {
            loops.push(tokio::spawn(self.activity.clone().run_until_stopped(
                self.pool.clone(),
                self.settings.clone(),
                stop.clone(),
            )));
        }
        if parts.purge {
            loops.push(tokio::spawn(
                self.purger.clone().run_until_stopped(stop.clone()),
            ));
            loops.push(tokio::spawn(
                self.rollups.clone().run_until_stopped(stop.clone()),
            ));
            loops.push(tokio::spawn(
                crate::reconcile::Reconciler::new(self.clone()).run_until_stopped(stop.clone()),
            ));
        }
        Ok(Running {
            addr,
            admin_addr,
            gateway_addr,
            state,
            servers,
            trigger,
            loops,
        })
    }
}

/// One HTTP server of an instance.
struct HttpServer {
    handle: ServerHandle,
    task: JoinHandle<()>,
}

/// Whose answers a listener gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listener {
    /// hookd's own (webhooks, admin).
    Hookd,
    /// The gateway's: mostly upstream's answers, passed on as they came.
    Gateway,
}

/// Binds `listen` and starts a server with `routes` and the shared limits.
fn serve_http<F>(
    listen: SocketAddr,
    state: actix_web::web::Data<AppState>,
    routes: F,
    workers: usize,
    listener_kind: Listener,
) -> Result<(SocketAddr, HttpServer), StartError>
where
    F: Fn(&mut actix_web::web::ServiceConfig) + Clone + Send + 'static,
{
    let fail = |source| StartError::Listen {
        addr: listen,
        source,
    };
    let listener = TcpListener::bind(listen).map_err(fail)?;
    let bound = listener.local_addr().map_err(fail)?;
    let settings = state.app.settings.now();
    // Long enough for a delivery and a single retry: its head, its body, a handler
    // run (and a retry's wait for its turn), with room to spare. A longer bulk
    // retry is cut off for its client but runs to its end (`admin::to_completion`).
    let work = match listener_kind {
        Listener::Hookd => settings.handler_timeout * 2,
        // The longest wait for upstream a route may set (a reload may lengthen one).
        Listener::Gateway => crate::gateway::LONGEST_WAIT,
    };
    let answer_within = HEAD_TIMEOUT + settings.body_timeout + work + ANSWER_SLACK;
    let limits = http::server::Limits {
        head: HEAD_TIMEOUT,
        keep_alive: KEEP_ALIVE,
        linger: LINGER,
        answer_within,
        max_connections: MAX_CONNECTIONS,
        workers,
        grace: settings.shutdown_grace,
        own_answers: listener_kind == Listener::Hookd,
    };
    let server = http::server::serve(listener, state, routes, limits).map_err(fail)?;
    let handle = server.handle();
    let task = tokio::spawn(async move {
        if let Err(error) = server.await {
            log::error!("http server: {error}");
        }
    });
    Ok((bound, HttpServer { handle, task }))
}

/// Each connection is a file descriptor: lift the soft limit to the hard one (often
/// 1024 → far more), so the connection cap, not the descriptor limit, applies.
fn raise_open_files_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < hard
        && let Err(error) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard)
    {
        log::warn!("cannot raise the open files limit from {soft} to {hard}: {error}");
    }
}

/// A started instance.
pub struct Running {
    /// Where the webhooks are served.
    pub addr: SocketAddr,
    /// Where the admin pages and metrics are served, when apart from `addr`.
    pub admin_addr: Option<SocketAddr>,
    /// Where the Idempotency-Key gateway listens, when it is on.
    pub gateway_addr: Option<SocketAddr>,
    state: actix_web::web::Data<AppState>,
    servers: Vec<HttpServer>,
    trigger: ShutdownTrigger,
    loops: Vec<JoinHandle<()>>,
}

impl Running {
    /// From now on `/readyz` answers 503 (balancers stop sending), while
    /// everything else is served as before.
    pub fn announce_stop(&self) {
        self.state.stopping.store(true, Ordering::Relaxed);
    }

    /// Stops accepting and lets in-flight deliveries and attempts finish, for
    /// `shutdown_grace` at most: what is still running then is cut off (never
    /// acknowledged, so the provider's retry or the next start takes it up; its
    /// transaction is undone, or kept whole when its `COMMIT` was already on its
    /// way), and this returns.
    pub async fn stop(self) {
        self.announce_stop();
        self.trigger.trigger();
        let grace = self.state.app.settings.now().shutdown_grace;
        let handles: Vec<ServerHandle> = self.servers.iter().map(|s| s.handle.clone()).collect();
        // A graceful stop in progress holds the server's command loop, so a second,
        // forced stop is not heard: dropping the server (aborting its task) is
        // what makes its workers let go of their connections at once.
        let server_tasks: Vec<_> = self.servers.iter().map(|s| s.task.abort_handle()).collect();
        let mut loops = self.loops;
        let servers = self.servers;
        let drain = async {
            futures_util::future::join_all(handles.iter().map(|h| h.stop(true))).await;
            for server in servers {
                let _ = server.task.await;
            }
            for task in &mut loops {
                let _ = task.await;
            }
        };
        if tokio::time::timeout(grace, drain).await.is_err() {
            log::warn!(
                "shutdown_grace ({}) is over: cutting off the work still in flight \
                 (nothing unanswered was acknowledged; each transaction is undone or \
                 kept whole)",
                crate::duration::format(grace)
            );
            for task in server_tasks {
                task.abort();
            }
            for task in loops {
                task.abort();
            }
        }
    }

    /// Stops at once, without waiting for anything (tests tearing down).
    pub fn abort(self) {
        self.trigger.trigger();
        for server in &self.servers {
            drop(server.handle.stop(false));
        }
        for task in self.loops {
            task.abort();
        }
    }
}
