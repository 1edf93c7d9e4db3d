//! The `hookd` command line. Each command loads the configuration, does its one
//! job, and reports failure as one line on stderr with a non-zero exit.

mod serve;
pub mod sign;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::app::{Database, StartError};
use crate::config::Settings;
use crate::store;

#[derive(Debug, Parser)]
#[command(name = "hookd", version, about = "A self-hosted webhook receiver")]
pub struct Cli {
    /// Configuration file.
    #[arg(long, global = true, default_value = "hookd.toml")]
    pub config: PathBuf,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP server, the retry dispatcher and the retention purge until SIGTERM/SIGINT.
    Serve,
    /// Apply the migrations in sql/ and exit.
    Migrate,
    /// Print the headers the provider would send with FILE (for curl -H @headers).
    Sign {
        /// Source whose scheme and first secret sign the file.
        #[arg(long)]
        source: String,
        /// JSON body to sign, sent byte for byte.
        file: PathBuf,
    },
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
}

pub fn run(cli: Cli) -> ExitCode {
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
        let settings = Settings::load(&cli.config)?;
        match cli.command {
            Command::Serve => serve::serve(settings).await,
            Command::Migrate => migrate(settings).await,
            Command::Sign { source, file } => sign::run(&settings, &source, &file),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("hookd: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn migrate(settings: Settings) -> Result<(), CliError> {
    let database = Database::open(&settings).await?;
    let result = store::migrate(&database.pool).await;
    database.close().await;
    let applied = result?;
    println!(
        "applied {applied} migration(s); schema at version {}",
        latest_version()
    );
    Ok(())
}

fn latest_version() -> i32 {
    store::MIGRATIONS.last().map_or(0, |m| m.version)
}
