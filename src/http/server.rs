//! The HTTP listeners: actix-web's service on actix-server, with every connection
//! held to a deadline of progress.
//!
//! actix times a connection's *first* request head, and idle keep-alive, but not
//! the head of a later request on the same connection, nor the rest of a chunked
//! body it keeps reading after an early answer. So each connection is wrapped: it
//! must write something (an answer) within `answer_within` of being accepted and
//! of its previous write, or it is closed. Idle keep-alive connections are closed
//! by actix long before that; a slow head, a slow body, a slow reader of the
//! answer or an endless chunked body all end at the deadline.

use std::future::Future;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use actix_http::{HttpService, KeepAlive, Protocol};
use actix_server::Server;
use actix_service::{ServiceFactoryExt, fn_service, map_config};
use actix_web::dev::AppConfig;
use actix_web::{App, web};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep, sleep_until};

use super::AppState;

/// How one listener treats its connections.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// A request's head must arrive within this (the first request of a connection;
    /// later ones fall under `answer_within`).
    pub head: Duration,
    /// An idle keep-alive connection is closed after this.
    pub keep_alive: Duration,
    /// After an early answer (413, 408), the rest of the body is read and dropped
    /// for at most this long, so the client sees the answer rather than a reset.
    pub linger: Duration,
    /// A connection must write (answer) within this of being accepted and of its
    /// previous write.
    pub answer_within: Duration,
    /// Open connections, all workers together; past it, new ones wait in the
    /// kernel's backlog.
    pub max_connections: usize,
    pub workers: usize,
    /// How long in-flight requests get to finish after a stop is requested.
    pub grace: Duration,
    /// Every answer is hookd's own: it carries `X-Request-Id` and a 500 counts
    /// as hookd's failure. Not so for the gateway, which passes on upstream's.
    pub own_answers: bool,
}

/// Starts a server on `listener` with the routes `routes` configures.
pub fn serve<F>(
    listener: TcpListener,
    state: web::Data<AppState>,
    routes: F,
    limits: Limits,
) -> io::Result<Server>
where
    F: Fn(&mut web::ServiceConfig) + Clone + Send + 'static,
{
    let local: SocketAddr = listener.local_addr()?;
    let builder = actix_server::Server::build();
    let draining = builder.graceful_shutdown_signal();
    let per_worker = limits.max_connections.div_ceil(limits.workers.max(1));
    let server = builder
        .workers(limits.workers)
        .max_concurrent_connections(per_worker)
        .backlog(2048)
        // A backstop a second past the grace: `Running::stop` cuts off at the
        // exact grace and says so in the log; were the workers' own timer (whole
        // seconds, started a moment later) to fire first, work would be cut off
        // with no word of it.
        .shutdown_timeout(limits.grace.as_secs() + 1 + u64::from(limits.grace.subsec_nanos() > 0))
        .disable_signals()
        .listen(format!("hookd-{local}"), listener, move || {
            let own = limits.own_answers;
            let app = App::new()
                .app_data(state.clone())
                .wrap(actix_web::middleware::Condition::new(
                    own,
                    actix_web::middleware::from_fn(super::error::count_internal_errors),
                ))
                .wrap(actix_web::middleware::Condition::new(
                    own,
                    actix_web::middleware::from_fn(super::request_id::middleware),
                ))
                .configure(routes.clone());
            let draining = draining.clone();
            let service = HttpService::build()
                // Idle keep-alive connections end at once when the server stops.
                .graceful_shutdown_signal(move || {
                    let draining = draining.clone();
                    async move { draining.notified().await }
                })
                .keep_alive(KeepAlive::Timeout(limits.keep_alive))
                .client_request_timeout(limits.head)
                .client_disconnect_timeout(limits.linger)
                .local_addr(local)
                .finish(map_config(
                    actix_service::IntoServiceFactory::into_factory(app)
                        .map_err(|error: actix_web::Error| error.error_response()),
                    |_| AppConfig::default(),
                ));
            fn_service(move |io: TcpStream| async move {
                let _ = io.set_nodelay(true);
                let peer = io.peer_addr().ok();
                Ok::<_, actix_http::error::DispatchError>((
                    Progressing::new(io, limits.answer_within),
                    Protocol::Http1,
                    peer,
                ))
            })
            .and_then(service)
        })?
        .run();
    Ok(server)
}

/// A connection that is closed unless it writes within `limit` of being accepted
/// and of its previous write.
pub struct Progressing {
    io: TcpStream,
    limit: Duration,
    deadline: Pin<Box<Sleep>>,
}

impl Progressing {
    fn new(io: TcpStream, limit: Duration) -> Self {
        Progressing {
            io,
            limit,
            deadline: Box::pin(sleep_until(Instant::now() + limit)),
        }
    }

    /// `Err` once the deadline has passed; otherwise registers for its wake-up.
    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the connection made no progress in time",
            )),
            Poll::Pending => Ok(()),
        }
    }
}

impl AsyncRead for Progressing {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Err(error) = this.check(cx) {
            return Poll::Ready(Err(error));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Progressing {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Err(error) = this.check(cx) {
            return Poll::Ready(Err(error));
        }
        let written = Pin::new(&mut this.io).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = written
            && n > 0
        {
            let next = Instant::now() + this.limit;
            this.deadline.as_mut().reset(next);
        }
        written
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
