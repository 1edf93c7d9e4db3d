//! Wiring: the database (embedded or `DATABASE_URL`), migrations, the HTTP server and
//! the background loops, and the orderly stop of all of them.

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::ServerHandle;
use deadpool_postgres::Pool;
use tokio::task::JoinHandle;

use crate::config::Settings;
use crate::dispatch::Dispatcher;
use crate::embedded_pg::{self, ClusterOptions, EmbeddedPostgres};
use crate::handlers::Registry;
use crate::http::{self, AppState};
use crate::metrics::Metrics;
use crate::purge::Purger;
use crate::shutdown::{self, ShutdownTrigger};
use crate::store::{self, StoreError};

/// Where `hookd` keeps its embedded cluster, relative to the working directory.
pub const EMBEDDED_DIR: &str = ".hookd/pg";
/// Concurrent retry loops per instance.
const DISPATCH_WORKERS: usize = 2;
/// How long in-flight requests get to finish after a stop is requested.
const GRACE: Duration = Duration::from_secs(30);

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
}

/// The database hookd talks to, and the embedded cluster behind it, if any.
pub struct Database {
    pub pool: Pool,
    embedded: Option<EmbeddedPostgres>,
}

impl Database {
    /// Connects to `DATABASE_URL`, or starts the embedded cluster when it is unset.
    pub async fn open(settings: &Settings) -> Result<Self, StartError> {
        if let Some(url) = &settings.database_url {
            let (config, tls) = store::tls::connect_options(url)
                .map_err(|e| StartError::DatabaseUrl(e.to_string()))?;
            return Ok(Database {
                pool: store::pool(config, tls, store::DEFAULT_POOL_SIZE),
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
                store::DEFAULT_POOL_SIZE,
            ),
            embedded: Some(cluster),
        })
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
    /// HTTP worker threads; `None` = one per core.
    pub http_workers: Option<usize>,
}

impl Parts {
    pub const ALL: Parts = Parts {
        dispatcher: true,
        purge: true,
        http_workers: None,
    };
}

/// Everything one instance shares between its parts.
#[derive(Clone)]
pub struct App {
    pub settings: Arc<Settings>,
    pub pool: Pool,
    pub metrics: Arc<Metrics>,
    pub dispatcher: Dispatcher,
    pub purger: Purger,
}

impl App {
    pub fn new(settings: Settings, pool: Pool, registry: Registry) -> Self {
        let settings = Arc::new(settings);
        let metrics = Arc::new(Metrics::default());
        let dispatcher = Dispatcher::new(
            pool.clone(),
            Arc::new(registry),
            settings.clone(),
            metrics.clone(),
        );
        let purger = Purger::new(pool.clone(), settings.clone(), metrics.clone());
        App {
            settings,
            pool,
            metrics,
            dispatcher,
            purger,
        }
    }

    /// Binds the listener and starts the server and the chosen loops.
    pub fn start(&self, parts: Parts) -> Result<Running, StartError> {
        let addr = self.settings.listen;
        let listener =
            TcpListener::bind(addr).map_err(|source| StartError::Listen { addr, source })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| StartError::Listen { addr, source })?;
        let state = actix_web::web::Data::new(AppState {
            settings: self.settings.clone(),
            pool: self.pool.clone(),
            dispatcher: self.dispatcher.clone(),
            metrics: self.metrics.clone(),
        });
        let mut server = actix_web::HttpServer::new(move || {
            actix_web::App::new()
                .app_data(state.clone())
                .configure(http::routes)
        })
        .disable_signals()
        .shutdown_timeout(GRACE.as_secs());
        if let Some(workers) = parts.http_workers {
            server = server.workers(workers);
        }
        let server = server
            .listen(listener)
            .map_err(|source| StartError::Listen { addr, source })?
            .run();
        let handle = server.handle();
        let server_task = tokio::spawn(async move {
            if let Err(error) = server.await {
                log::error!("http server: {error}");
            }
        });

        let (trigger, stop) = shutdown::channel();
        let mut loops = Vec::new();
        if parts.dispatcher {
            for _ in 0..DISPATCH_WORKERS {
                loops.push(tokio::spawn(
                    self.dispatcher.clone().run_until_stopped(stop.clone()),
                ));
            }
        }
        if parts.purge {
            loops.push(tokio::spawn(
                self.purger.clone().run_until_stopped(stop.clone()),
            ));
        }
        Ok(Running {
            addr: local_addr,
            handle,
            server_task,
            trigger,
            loops,
        })
    }
}

/// A started instance.
pub struct Running {
    pub addr: SocketAddr,
    handle: ServerHandle,
    server_task: JoinHandle<()>,
    trigger: ShutdownTrigger,
    loops: Vec<JoinHandle<()>>,
}

impl Running {
    /// Stops accepting, lets in-flight deliveries and attempts finish, then returns.
    pub async fn stop(self) {
        self.trigger.trigger();
        self.handle.stop(true).await;
        let _ = self.server_task.await;
        for task in self.loops {
            let _ = task.await;
        }
    }

    /// Stops at once, without waiting for anything (tests tearing down).
    pub fn abort(self) {
        self.trigger.trigger();
        drop(self.handle.stop(false));
        for task in self.loops {
            task.abort();
        }
    }
}
