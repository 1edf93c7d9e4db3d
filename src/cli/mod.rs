//! The `hookd` command line. Each command loads the configuration, does its one
//! job, and reports failure as one line on stderr with a non-zero exit.

/// `println!` for a command's output: a reader that went away (`hookd events
/// list | head`) ends the command quietly (`CliError::Closed`) instead of
/// panicking; another write error is the command's error.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::cli::write_line(format_args!($($arg)*))
    };
}

mod events;
mod reconcile;
mod reload;
pub mod replay;
mod serve;
pub mod sign;
pub mod verify;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use crate::app::{Database, Instance, StartError, Unmade};
use crate::config::Settings;
use crate::purge::describe;
use crate::store;

#[derive(Debug, Parser)]
#[command(
    name = "hookd",
    version = crate::version::VERSION,
    about = "A self-hosted webhook receiver"
)]
pub struct Cli {
    /// Configuration file.
    #[arg(
        long,
        global = true,
        env = "HOOKD_CONFIG",
        default_value = "hookd.toml"
    )]
    pub config: PathBuf,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP server, the retry dispatcher and the retention purge until
    /// SIGTERM/SIGINT; SIGHUP reloads the configuration and its secret files.
    Serve,
    /// Apply the migrations in sql/ and exit.
    Migrate,
    /// Sign fixture files as the provider would and POST them to a running hookd.
    Replay {
        /// Fixture files, or folders of them (their .json files, in name order).
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Source whose scheme and first secret sign the files (default: the
        /// folder's name, `fixtures/stripe` → `stripe`, when a source has it).
        #[arg(long)]
        source: Option<String>,
        /// Base URL of hookd (default: http:// + the configured listen address).
        #[arg(long)]
        url: Option<String>,
        /// Send each event this many times in a row.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
        times: u16,
        /// Send this many copies of each event at once.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
        parallel: u16,
        /// Give each file a fresh event id, so it is applied as a new event.
        #[arg(long)]
        new_ids: bool,
    },
    /// The event history: list, show, retry or verify events.
    Events {
        #[command(subcommand)]
        action: EventsAction,
    },
    /// Payments as the handlers left them, with their events.
    Payments {
        #[command(subcommand)]
        action: PaymentsAction,
    },
    /// Erase a customer's personal data (the sources' masked fields, and their
    /// id) from their stored events and payments, keeping dedupe keys and
    /// payment states; audited.
    Forget {
        /// The customer's id, as the events and payments name it.
        #[arg(long)]
        customer: String,
        /// Only this source's events and payments.
        #[arg(long)]
        source: Option<String>,
        /// Print what would be erased; change nothing.
        #[arg(long)]
        dry_run: bool,
        #[arg(long)]
        json: bool,
    },
    /// Ask a source's provider for its events of a window and store those it
    /// never delivered, as a delivery would be (deduped, applied, forwarded).
    Reconcile {
        /// The source whose provider's API is asked (its api_key, or PayPal's
        /// client_id and client_secret).
        #[arg(long)]
        source: String,
        /// RFC 3339 time or an age such as 72h (default: the source's
        /// reconcile_window).
        #[arg(long)]
        since: Option<String>,
        /// Count what would be recovered; store nothing.
        #[arg(long)]
        dry_run: bool,
        #[arg(long)]
        json: bool,
    },
    /// Run one retention pass now (or, with --dry-run, print what it would remove).
    Purge {
        /// Count what would go; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Print a fresh random secret in a scheme's format (or, with hmac, an admin token).
    Secret {
        /// The scheme whose secret format to print (hmac: an admin token too).
        #[arg(long, value_parser = crate::providers::names())]
        scheme: String,
    },
    /// Check a delivery's signature now, as POST /webhooks/NAME would: which secret
    /// signed it, or which check fails and why.
    Verify {
        /// Source whose scheme and secrets check the delivery.
        #[arg(long)]
        source: String,
        /// The delivery's headers, one "Name: value" per line (as hookd sign prints them).
        #[arg(long)]
        headers: PathBuf,
        /// The body, byte for byte as received.
        body: PathBuf,
    },
    /// Load and check the configuration (environment included) without touching the
    /// database; exit 78 with one line if it is bad.
    CheckConfig,
    /// Print the headers the provider would send with FILE (for curl -H @headers);
    /// for a provider that signs inside the body (Adyen, Braintree), the signed
    /// body, and on stderr the header to send it with.
    Sign {
        /// Source whose scheme and first secret sign the file.
        #[arg(long)]
        source: String,
        /// JSON body to sign, sent byte for byte.
        file: PathBuf,
    },
    /// Print the shell's completion script for hookd (source it, or install it where
    /// the shell looks for completions).
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), made from this command line's definition.
    #[command(hide = true)]
    Man {
        /// Write hookd.1 and a page per command (hookd-serve.1, …) into this folder
        /// instead.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub enum EventsAction {
    /// Events newest first, filtered.
    List(Box<ListArgs>),
    /// One event with its payload (personal data masked) and attempts.
    Show {
        /// webhook_events.id
        id: i64,
        /// Show the payload's personal data too (recorded in the audit trail).
        #[arg(long)]
        reveal: bool,
        #[arg(long)]
        json: bool,
    },
    /// Apply one event again now, or every event the filters match (at most 1,000).
    Retry(Box<RetryArgs>),
    /// Check a stored event's signature again, with the current secrets, as of
    /// its received time.
    Verify {
        /// webhook_events.id
        id: i64,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum PaymentsAction {
    /// A payment with the events that made it.
    Show {
        source: String,
        payment_id: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, clap::Args)]
pub struct RetryArgs {
    /// webhook_events.id (or give filters instead, for a bulk retry).
    id: Option<i64>,
    #[command(flatten)]
    filter: FilterArgs,
    /// With filters: only count what would be retried.
    #[arg(long)]
    dry_run: bool,
    #[arg(long)]
    json: bool,
}

/// The history's filters.
#[derive(Debug, Default, clap::Args)]
pub struct FilterArgs {
    #[arg(long)]
    source: Option<String>,
    #[arg(long)]
    kind: Option<String>,
    /// The provider's event type.
    #[arg(long = "type")]
    event_type: Option<String>,
    /// processed, ignored, failed or dead.
    #[arg(long)]
    status: Option<String>,
    /// RFC 3339 time or an age such as 24h.
    #[arg(long)]
    since: Option<String>,
    /// RFC 3339 time or an age such as 1h.
    #[arg(long)]
    until: Option<String>,
    /// An event id, payment id or customer id.
    #[arg(short, long)]
    q: Option<String>,
}

impl FilterArgs {
    fn is_empty(&self) -> bool {
        self.params().to_filter(chrono::Utc::now()).is_ok_and(|f| {
            f.source.is_none()
                && f.kind.is_none()
                && f.event_type.is_none()
                && f.status.is_none()
                && f.since.is_none()
                && f.until.is_none()
                && f.q.is_none()
        })
    }

    fn params(&self) -> crate::filter::ListParams {
        crate::filter::ListParams {
            source: self.source.clone(),
            kind: self.kind.clone(),
            event_type: self.event_type.clone(),
            status: self.status.clone(),
            since: self.since.clone(),
            until: self.until.clone(),
            q: self.q.clone(),
            limit: None,
            cursor: None,
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    filter: FilterArgs,
    /// At most this many (1 to 500; default 50).
    #[arg(long)]
    limit: Option<String>,
    /// Continue after the previous page (printed as "more: --cursor …").
    #[arg(long)]
    cursor: Option<String>,
    /// The admin API's JSON instead of a table.
    #[arg(long)]
    json: bool,
}

impl ListArgs {
    fn into_params(self) -> (crate::filter::ListParams, bool) {
        let mut params = self.filter.params();
        params.limit = self.limit;
        params.cursor = self.cursor;
        (params, self.json)
    }
}

/// A command's failure, printed as one line.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Start(#[from] StartError),
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error("{0}")]
    Other(String),
    /// Whoever read the output went away: nothing more to say, nothing failed.
    #[error("stdout closed")]
    Closed,
}

/// One line of a command's output on stdout (see `say!`).
pub(crate) fn write_line(line: std::fmt::Arguments<'_>) -> Result<(), CliError> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}").map_err(written)
}

/// For a line beside work whose outcome still counts (a replay's sends, a
/// verdict's exit code): a reader gone away stops nothing.
pub(crate) fn unheard(error: CliError) -> Result<(), CliError> {
    match error {
        CliError::Closed => Ok(()),
        other => Err(other),
    }
}

fn written(error: std::io::Error) -> CliError {
    match error.kind() {
        std::io::ErrorKind::BrokenPipe => CliError::Closed,
        _ => CliError::Other(format!("cannot write to stdout: {error}")),
    }
}

/// What a team adds to hookd (through `Hookd`): its handlers and its migrations.
#[derive(Debug, Clone)]
pub struct Extensions {
    pub registry: crate::handlers::Registry,
    pub migrations: &'static [crate::store::Migration],
}

pub fn run(cli: Cli, hookd: Extensions) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("hookd: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        // Need no configuration: they make the values that go into one, or
        // describe the command line itself.
        match &cli.command {
            Command::Secret { scheme } => return secret(scheme),
            Command::Completions { shell } => return completions(*shell),
            Command::Man { dir } => return man(dir.as_deref()),
            _ => {}
        }
        let settings = Settings::load(&cli.config)?;
        warn_unhandled_kinds(&settings, &hookd);
        match cli.command {
            Command::Serve => serve::serve(&cli.config, settings, hookd).await,
            Command::CheckConfig => check_config(&settings),
            Command::Verify {
                source,
                headers,
                body,
            } => verify::run(&settings, &source, &headers, &body).await,
            Command::Migrate => migrate(settings, &hookd).await,
            Command::Purge { dry_run } => purge(settings, hookd, dry_run).await,
            Command::Events { action } => {
                with_app(settings, hookd, Unmade::Make, |app| async move {
                    match action {
                        EventsAction::List(args) => {
                            let (params, json) = args.into_params();
                            events::list(&app, &params, json).await
                        }
                        EventsAction::Show { id, reveal, json } => {
                            events::show(&app, id, reveal, json).await
                        }
                        EventsAction::Retry(args) => {
                            let RetryArgs {
                                id,
                                filter,
                                dry_run,
                                json,
                            } = *args;
                            match (id, filter.is_empty()) {
                                (Some(id), true) => events::retry(&app, id, json).await,
                                (None, false) => {
                                    events::bulk_retry(&app, &filter.params(), dry_run, json)
                                        .await
                                }
                                (Some(_), false) => Err(CliError::Other(
                                    "give an event id or filters, not both".into(),
                                )),
                                (None, true) => Err(CliError::Other(
                                    "give an event id, or filters such as --status dead --since 24h"
                                        .into(),
                                )),
                            }
                        }
                        EventsAction::Verify { id, json } => events::verify(&app, id, json).await,
                    }
                })
                .await
            }
            Command::Payments { action } => {
                with_app(settings, hookd, Unmade::Make, |app| async move {
                    match action {
                        PaymentsAction::Show {
                            source,
                            payment_id,
                            json,
                        } => events::payment(&app, &source, &payment_id, json).await,
                    }
                })
                .await
            }
            Command::Forget {
                customer,
                source,
                dry_run,
                json,
            } => {
                with_app(settings, hookd, Unmade::Refuse, |app| async move {
                    events::forget(&app, &customer, source.as_deref(), dry_run, json).await
                })
                .await
            }
            Command::Reconcile {
                source,
                since,
                dry_run,
                json,
            } => {
                with_app(settings, hookd, Unmade::Refuse, |app| async move {
                    reconcile::run(&app, &source, since.as_deref(), dry_run, json).await
                })
                .await
            }
            Command::Sign { source, file } => sign::run(&settings, &source, &file),
            Command::Secret { scheme } => secret(&scheme),
            Command::Completions { shell } => completions(shell),
            Command::Man { dir } => man(dir.as_deref()),
            Command::Replay {
                paths,
                source,
                url,
                times,
                parallel,
                new_ids,
            } => {
                let options = replay::ReplayOptions {
                    paths,
                    source,
                    url,
                    times: usize::from(times),
                    parallel: usize::from(parallel),
                    new_ids,
                };
                replay::run(&settings, &options).await
            }
        }
    });
    match result {
        // A reader that stopped reading (`| head`) took what it wanted.
        Ok(()) | Err(CliError::Closed) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("hookd: {error}");
            error.exit_code()
        }
    }
}

/// `sysexits.h`'s EX_CONFIG: a configuration error, which restarting will not
/// cure (systemd's `RestartPreventExitStatus=78`).
pub const EX_CONFIG: u8 = 78;

impl CliError {
    pub fn exit_code(&self) -> ExitCode {
        match self {
            CliError::Config(_)
            | CliError::Start(StartError::DatabaseUrl(_) | StartError::NoDatabase) => {
                ExitCode::from(EX_CONFIG)
            }
            _ => ExitCode::FAILURE,
        }
    }
}

/// `hookd check-config`: everything `serve` checks before it starts, and a
/// summary of what it would serve.
fn check_config(settings: &Settings) -> Result<(), CliError> {
    settings.check_exposure()?;
    settings.check_database()?;
    let database = match &settings.database_url {
        Some(url) => {
            crate::store::tls::connect_options(url.expose()).map_err(|e| {
                crate::config::ConfigError {
                    origin: settings.origin.clone(),
                    key: "DATABASE_URL".into(),
                    problem: e.to_string(),
                }
            })?;
            "DATABASE_URL"
        }
        None => "the embedded cluster",
    };
    warn_about_exposure(settings);
    let names: Vec<&str> = settings.sources.iter().map(|s| s.name.as_str()).collect();
    let admin = match settings.admin_listen {
        Some(addr) => format!("admin pages on {addr}"),
        None => "admin pages on the same listener".into(),
    };
    let gateway = match settings.gateway.listen {
        Some(addr) => format!(
            ", the gateway on {addr} ({} route(s))",
            settings.gateway.routes.len()
        ),
        None => String::new(),
    };
    say!(
        "ok: {}: {} source(s) ({}), {} forward(s), {} admin token(s); webhooks on {}, {admin}\
         {gateway}; database: {database}",
        settings.origin,
        names.len(),
        names.join(", "),
        settings.forwards.len(),
        settings.admin_tokens.len(),
        settings.listen,
    )?;
    Ok(())
}

/// What `serve` and `check-config` say, without refusing: secrets in files others
/// may read, a database connection that may stay unencrypted, and a gateway
/// route that may outwait a stop's grace.
fn warn_about_exposure(settings: &Settings) {
    settings.warn_readable_secret_files();
    for route in &settings.gateway.routes {
        if route.rules.timeout > settings.shutdown_grace {
            log::warn!(
                "gateway route {}: timeout {} is longer than shutdown_grace {}: a request still \
                 waiting for upstream when a stop's grace ends is cut, and its key becomes \
                 unknown; raise shutdown_grace (and the stop timeout around it) to the timeout",
                route.name(),
                crate::duration::format(route.rules.timeout),
                crate::duration::format(settings.shutdown_grace)
            );
        }
    }
    for source in &settings.sources {
        if let Some(exposure) = source.scheme.provider().exposure() {
            log::warn!("source {}: {exposure}", source.name);
        }
    }
    if settings
        .database_url
        .as_ref()
        .is_some_and(|url| store::tls::prefers_tls_beyond_this_machine(url.expose()))
    {
        log::warn!(
            "DATABASE_URL: sslmode=prefer (libpq's default) to another machine: the connection \
             may be unencrypted; use sslmode=require or verify-full"
        );
    }
}

/// A kind a source maps types to, with neither a handler nor a forward, is
/// stored as `ignored`: allowed, but said, since it may be a typo.
fn warn_unhandled_kinds(settings: &Settings, hookd: &Extensions) {
    for source in &settings.sources {
        let mut kinds: Vec<&String> = source.event_types.values().collect();
        kinds.sort();
        kinds.dedup();
        for kind in kinds {
            let handled = hookd.registry.get(kind).is_some()
                || settings.forwards.iter().any(|f| f.kinds.contains(kind));
            if !handled {
                log::warn!(
                    "source {}: no handler or forward takes kind {kind:?} (handlers: {}); \
                     its events will be stored as ignored",
                    source.name,
                    hookd.registry.kinds().join(", ")
                );
            }
        }
    }
}

async fn migrate(settings: Settings, hookd: &Extensions) -> Result<(), CliError> {
    // Preparing the database is this command's job: it may make the cluster.
    let database = Database::open(&settings).await?;
    let result = store::migrate_with(&database.pool, hookd.migrations).await;
    database.close().await;
    let applied = result?;
    say!(
        "applied {applied} migration(s); schema at version {}",
        latest_version()
    )?;
    Ok(())
}

/// Runs `work` against the configured database, then closes it: for a
/// command beside `serve` (`Database::open_for_command`).
async fn with_app<F, Fut>(
    settings: Settings,
    hookd: Extensions,
    unmade: Unmade,
    work: F,
) -> Result<(), CliError>
where
    F: FnOnce(Instance) -> Fut,
    Fut: std::future::Future<Output = Result<(), CliError>>,
{
    let database = Database::open_for_command(&settings, unmade).await?;
    on_database(database, settings, hookd, Schema::Check, work).await
}

/// What a command does about the schema before its work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Schema {
    /// Brings it up to date (`serve`).
    Migrate,
    /// Wants it current: a database no hookd has used yet is migrated (no
    /// instance runs on it); one an older build migrated is left as it is
    /// and refused — a newer binary run for a look (`events list` on a
    /// bastion host) must not change the schema under the running instances
    /// as a side effect.
    Check,
}

/// `with_app` on `database`.
async fn on_database<F, Fut>(
    database: Database,
    settings: Settings,
    hookd: Extensions,
    schema: Schema,
    work: F,
) -> Result<(), CliError>
where
    F: FnOnce(Instance) -> Fut,
    Fut: std::future::Future<Output = Result<(), CliError>>,
{
    let result = async {
        match schema {
            Schema::Migrate => {
                store::migrate_with(&database.pool, hookd.migrations).await?;
            }
            Schema::Check if store::never_migrated(&database.pool).await? => {
                // Said loudly for a database named by DATABASE_URL: a
                // mistyped name or a missing search_path shows here.
                let saying = "the database has no hookd schema yet: applying hookd's \
                              migrations first, as `hookd migrate` would";
                if database.is_embedded() {
                    log::info!("{saying}");
                } else {
                    log::warn!("{saying}");
                }
                store::migrate_with(&database.pool, hookd.migrations).await?;
            }
            Schema::Check => {
                let client = database.pool.get().await.map_err(store::StoreError::from)?;
                store::check_schema(&client, hookd.migrations)
                    .await
                    .map_err(|error| match error {
                        store::StoreError::Schema(why) => store::StoreError::Schema(format!(
                            "{why}: run `hookd migrate` (as the role that owns the schema) first"
                        )),
                        other => other,
                    })?;
            }
        }
        let app = Instance::new(
            settings,
            database.pool.clone(),
            database.connector.clone(),
            hookd.registry,
        )
        .with_migrations(hookd.migrations);
        work(app).await
    }
    .await;
    database.close().await;
    result
}

async fn purge(settings: Settings, hookd: Extensions, dry_run: bool) -> Result<(), CliError> {
    with_app(settings, hookd, Unmade::Make, |app| async move {
        if dry_run {
            let preview = app.purger.preview().await?;
            say!("would drop payloads: {}", describe(&preview.payloads))?;
            say!("would delete keys:   {}", describe(&preview.keys))?;
            say!(
                "would delete expired idempotency keys: {}",
                preview.idempotency_keys
            )?;
            say!(
                "would delete expired gateway keys: {}",
                preview.gateway_keys
            )?;
        } else {
            let outcome = app.purger.run_once(None).await?;
            if outcome.skipped {
                say!("another instance is purging; nothing done")?;
            } else {
                say!("dropped payloads: {}", describe(&outcome.payloads_dropped))?;
                say!("deleted keys:     {}", describe(&outcome.keys_deleted))?;
                say!(
                    "deleted expired idempotency keys: {}",
                    outcome.idempotency_keys_deleted
                )?;
                say!(
                    "deleted expired gateway keys: {}",
                    outcome.api_idempotency_keys_deleted
                )?;
            }
        }
        Ok(())
    })
    .await
}

fn secret(scheme: &str) -> Result<(), CliError> {
    let secret = crate::providers::named(scheme)
        .map(|provider| provider.new_secret())
        .ok_or_else(|| CliError::Other(format!("no scheme named {scheme:?}")))?;
    say!("{}", secret.expose())?;
    Ok(())
}

fn completions(shell: clap_complete::Shell) -> Result<(), CliError> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "hookd", &mut out);
    print_bytes(&out)
}

fn man(dir: Option<&std::path::Path>) -> Result<(), CliError> {
    let Some(dir) = dir else {
        let mut out = Vec::new();
        clap_mangen::Man::new(Cli::command())
            .render(&mut out)
            .map_err(|e| CliError::Other(format!("cannot render the manual page: {e}")))?;
        return print_bytes(&out);
    };
    clap_mangen::generate_to(Cli::command(), dir).map_err(|e| {
        CliError::Other(format!(
            "cannot write the manual pages to {}: {e}",
            dir.display()
        ))
    })
}

/// Writes to stdout, a closed pipe (`| head`) reported as one line, not a panic.
fn print_bytes(bytes: &[u8]) -> Result<(), CliError> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(bytes)
        .and_then(|()| stdout.flush())
        .map_err(written)
}

fn latest_version() -> i32 {
    store::MIGRATIONS.last().map_or(0, |m| m.version)
}
