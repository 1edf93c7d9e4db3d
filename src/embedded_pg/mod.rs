//! The private PostgreSQL cluster hookd runs when `DATABASE_URL` is unset, built from
//! the server binaries on this machine. It listens on a Unix socket inside its own
//! folder only (no TCP port), keeps its data between runs, and is stopped by the
//! process that owns it. As root it runs as the `postgres` system user, since
//! PostgreSQL refuses to run as root. The test suite uses the same code for its
//! throwaway cluster.
//!
//! `binaries` finds the server programs, `folder` chooses and guards the folder,
//! and this module runs the cluster's life: initialise, configure, start or adopt,
//! stop.

pub mod binaries;
mod folder;
/// A process as the folder records it.
mod mark;

use std::io;
use std::path::{Path, PathBuf};
use std::process::Output;

use folder::{ClusterFolder, RunAs};
use mark::Mark;

/// The superuser initdb creates, and the database hookd uses.
pub const USER: &str = "hookd";
pub const DATABASE: &str = "hookd";
pub const PORT: u16 = 5432;
/// Written in the cluster's folder: the hookd that will stop it (its `Mark`).
const OWNER_FILE: &str = "hookd.pid";
/// Written in the cluster's folder: the other hookds using it, a `Mark` a
/// line; the owner hands the cluster to one of them rather than stop it under
/// them.
const USERS_FILE: &str = "hookd.users";

#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    #[error(
        "no PostgreSQL server binaries (initdb, pg_ctl) on PATH or in /usr/lib/postgresql/*/bin: \
         set DATABASE_URL or install PostgreSQL"
    )]
    NoBinaries,
    #[error(
        "running as root needs a `postgres` system user to own the embedded cluster: \
         create one, or set DATABASE_URL"
    )]
    NoPostgresUser,
    #[error("{action} failed: {detail}")]
    Command { action: String, detail: String },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{0}")]
    Folder(String),
}

#[derive(Debug, Clone, Copy)]
pub struct ClusterOptions {
    /// `false` trades crash safety for speed (fsync off): for throwaway test clusters.
    pub durable: bool,
}

/// Who stops the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// This process started it and stops it.
    Owned,
    /// The hookd that started it is gone (killed), or handed it to this one:
    /// this process stops it.
    Adopted,
    /// Another live hookd (or a watcher) stops it; this process leaves it
    /// running, unless that one handed it over or is gone when this one stops.
    Borrowed,
}

#[derive(Debug)]
pub struct EmbeddedPostgres {
    folder: ClusterFolder,
    bin: PathBuf,
    ownership: Ownership,
    /// This process ran initdb: the cluster is new and empty.
    made_now: bool,
    /// Where it was asked for: its lock (`folder::lock_making`) is taken again
    /// to hand the cluster over.
    preferred: PathBuf,
    /// This process is in `USERS_FILE` (it borrows the cluster and may be
    /// handed it).
    registered: bool,
}

/// Whether `EmbeddedPostgres::start(preferred_dir, …)` would find a cluster
/// made earlier (rather than make a new one).
pub fn made_for(preferred_dir: &Path) -> bool {
    folder::made_for(preferred_dir)
}

impl EmbeddedPostgres {
    /// Starts (initialising on first use) the cluster in `preferred_dir`, or reuses it
    /// when it is already running. Falls back to a private folder under the system
    /// temporary directory when the `postgres` user cannot reach `preferred_dir`.
    pub fn start(preferred_dir: &Path, options: ClusterOptions) -> Result<Self, EmbeddedError> {
        let bin = binaries::folder().ok_or(EmbeddedError::NoBinaries)?;
        let run_as = RunAs::for_this_process()?;
        // Held until the cluster runs: one process at a time makes or starts it.
        let _making = folder::lock_making(preferred_dir)?;
        let folder = ClusterFolder::choose(preferred_dir, run_as)?;
        let mut cluster = EmbeddedPostgres {
            folder,
            bin,
            ownership: Ownership::Borrowed,
            made_now: false,
            preferred: preferred_dir.to_path_buf(),
            registered: false,
        };
        cluster.made_now = cluster.init_if_needed(options)?;
        cluster.write_settings(options)?;
        if cluster.is_running() {
            let orphaned = cluster.unowned(None);
            log::info!(
                "embedded PostgreSQL already running in {}; reusing it{}",
                cluster.dir().display(),
                if orphaned {
                    " (its owner is gone: adopting it)"
                } else {
                    ""
                }
            );
            if orphaned {
                cluster.take_ownership(Ownership::Adopted)?;
            } else {
                cluster.register()?;
            }
            return Ok(cluster);
        }
        let log_file = cluster.dir().join("postgres.log");
        let started = cluster.pg_ctl(&[
            "start",
            "-w",
            "-t",
            "60",
            "-s",
            "-l",
            &log_file.to_string_lossy(),
        ])?;
        if !started.status.success() {
            // Another hookd may have started it at the same moment.
            if cluster.is_running() {
                cluster.register()?;
                return Ok(cluster);
            }
            return Err(EmbeddedError::Command {
                action: "pg_ctl start".into(),
                detail: format!("{}; see {}", last_line(&started), log_file.display()),
            });
        }
        cluster.take_ownership(Ownership::Owned)?;
        log::info!(
            "started embedded PostgreSQL in {} (socket only, user {})",
            cluster.dir().display(),
            if run_as.is_some() {
                "postgres"
            } else {
                "current"
            }
        );
        Ok(cluster)
    }

    /// Whether this process made the cluster (ran initdb): it is new and empty.
    pub fn made_now(&self) -> bool {
        self.made_now
    }

    /// The folder holding the data directory and the socket.
    pub fn dir(&self) -> &Path {
        &self.folder.dir
    }

    pub fn ownership(&self) -> Ownership {
        self.ownership
    }

    pub fn pg_config(&self, dbname: &str) -> tokio_postgres::Config {
        let mut config = tokio_postgres::Config::new();
        config
            .host_path(self.dir())
            .port(PORT)
            .user(USER)
            .dbname(dbname);
        config
    }

    /// A `DATABASE_URL` (key=value form) for another process.
    pub fn connection_string(&self, dbname: &str) -> String {
        let host = self
            .dir()
            .to_string_lossy()
            .replace('\\', "\\\\")
            .replace('\'', "\\'");
        format!("host='{host}' port={PORT} user={USER} dbname={dbname}")
    }

    /// Stops the cluster if this process owns it (started, adopted or was
    /// handed it, or its owner is gone) and no other hookd still uses it; else
    /// hands it to one that does, which then stops it in turn.
    pub fn stop(&mut self) -> Result<(), EmbeddedError> {
        // No start or other stop changes the users meanwhile.
        // (Stopped even where the lock cannot be taken now.)
        let _making = folder::lock_making(&self.preferred).ok().flatten();
        let me = Mark::this_process();
        if self.registered {
            self.registered = false;
            // One line a handle: another handle here may still use it.
            let mut others = self.users();
            if let Some(at) = others.iter().position(|&m| m == me) {
                others.remove(at);
            }
            self.write_users(&others)?;
            // Its owner, leaving first, may have handed it to this process, or
            // been killed: nobody else would stop it.
            if self.unowned(Some(me)) {
                self.ownership = Ownership::Adopted;
            }
        }
        if self.ownership == Ownership::Borrowed {
            return Ok(());
        }
        let mut heirs: Vec<Mark> = self
            .users()
            .into_iter()
            .filter(|&m| m != me && m.alive())
            .collect();
        if !heirs.is_empty() {
            let heir = heirs.remove(0);
            self.write_users(&heirs)?;
            self.folder.write(OWNER_FILE, &heir.to_string(), false)?;
            self.ownership = Ownership::Borrowed;
            log::info!(
                "left embedded PostgreSQL running in {} for hookd {}, which still uses it \
                 and stops it when it exits",
                self.dir().display(),
                heir.pid()
            );
            return Ok(());
        }
        let out = self.pg_ctl(&["stop", "-m", "fast", "-w", "-s"])?;
        if !out.status.success() && self.is_running() {
            return Err(EmbeddedError::Command {
                action: "pg_ctl stop".into(),
                detail: last_line(&out),
            });
        }
        self.ownership = Ownership::Borrowed;
        // Empty files read as "no owner" and "no users".
        let _ = self.folder.write(OWNER_FILE, "", false);
        let _ = self.write_users(&[]);
        log::info!("stopped embedded PostgreSQL in {}", self.dir().display());
        Ok(())
    }

    /// The hookd process that will stop the cluster: `Some(None)` when none
    /// is written, `None` when the file cannot be read (which says nothing).
    fn owner(&self) -> Option<Option<Mark>> {
        self.folder.read(OWNER_FILE).map(|text| Mark::parse(&text))
    }

    /// Whether nobody alive but `me` (this process, if given) would stop the
    /// cluster: no owner written, or one that is gone. An owner file that
    /// cannot be read says nothing, and the cluster is left to its owner.
    fn unowned(&self, me: Option<Mark>) -> bool {
        self.owner()
            .is_some_and(|owner| owner.is_none_or(|o| Some(o) == me || !o.alive()))
    }

    /// The other hookds that said they use the cluster (some may be gone).
    fn users(&self) -> Vec<Mark> {
        self.folder
            .read(USERS_FILE)
            .unwrap_or_default()
            .lines()
            .filter_map(Mark::parse)
            .collect()
    }

    fn write_users(&self, users: &[Mark]) -> Result<(), EmbeddedError> {
        let text: String = users.iter().map(|user| format!("{user}\n")).collect();
        self.folder.write(USERS_FILE, &text, false)
    }

    /// Says this process uses the cluster another one stops (not when that
    /// one is this process: a second handle here is never handed it).
    fn register(&mut self) -> Result<(), EmbeddedError> {
        let me = Mark::this_process();
        if self.owner() == Some(Some(me)) {
            return Ok(());
        }
        let mut users: Vec<Mark> = self.users().into_iter().filter(Mark::alive).collect();
        users.push(me);
        self.write_users(&users)?;
        self.registered = true;
        Ok(())
    }

    fn take_ownership(&mut self, how: Ownership) -> Result<(), EmbeddedError> {
        self.folder
            .write(OWNER_FILE, &Mark::this_process().to_string(), false)?;
        self.ownership = how;
        Ok(())
    }

    /// The folder of the server programs this cluster runs.
    pub fn bin_dir(&self) -> &Path {
        &self.bin
    }

    /// A command run as the cluster's user, in its folder, with a scrubbed
    /// environment (as hookd runs `pg_ctl`).
    pub fn command_as_cluster_user(&self, program: &Path) -> std::process::Command {
        self.folder.command(program)
    }

    /// From now on something else stops the cluster (a watcher of a throwaway
    /// cluster): dropping this value leaves it running.
    pub fn hand_over_shutdown(&mut self) {
        self.ownership = Ownership::Borrowed;
        self.registered = false;
    }

    fn data_dir(&self) -> PathBuf {
        self.dir().join("data")
    }

    fn is_running(&self) -> bool {
        self.pg_ctl(&["status", "-s"])
            .map(|o| o.status.success())
            .unwrap_or(false)
    }

    /// Whether it made the cluster now.
    fn init_if_needed(&self, options: ClusterOptions) -> Result<bool, EmbeddedError> {
        if self.folder.read("data/PG_VERSION").is_some() {
            return Ok(false);
        }
        let data_arg = self.data_dir().to_string_lossy().into_owned();
        let mut args = vec![
            "-D",
            &data_arg,
            "-U",
            USER,
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-locale",
        ];
        if !options.durable {
            args.push("--no-sync");
        }
        let out = self.run("initdb", &args)?;
        if !out.status.success() {
            return Err(EmbeddedError::Command {
                action: "initdb".into(),
                detail: last_line(&out),
            });
        }
        self.folder.write(
            "data/postgresql.conf",
            "\n# hookd rewrites hookd.conf at every start\ninclude_if_exists = 'hookd.conf'\n",
            true,
        )?;
        Ok(true)
    }

    fn write_settings(&self, options: ClusterOptions) -> Result<(), EmbeddedError> {
        let socket_dir = self.dir().to_string_lossy().replace('\'', "''");
        // wal_compression: a retention purge rewrites many old pages, and their
        // full-page images in the WAL compress several-fold.
        // backend_flush_after: under a stream of inserts, the backends write most
        // of the pages out of the small buffer pool; without it the kernel keeps
        // them dirty for up to 30 s, then writes them in bursts (and all at once
        // at a checkpoint's fsync) that stall every commit's WAL flush behind
        // them: tens to hundreds of milliseconds.
        let mut text = format!(
            "listen_addresses = ''\nunix_socket_directories = '{socket_dir}'\nport = {PORT}\n\
             max_connections = 200\nwal_compression = on\nbackend_flush_after = '256kB'\n"
        );
        if !options.durable {
            text.push_str("fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n");
        }
        self.folder.write("data/hookd.conf", &text, false)
    }

    fn pg_ctl(&self, args: &[&str]) -> Result<Output, EmbeddedError> {
        let data = self.data_dir().to_string_lossy().into_owned();
        let mut full = vec!["-D", data.as_str()];
        full.extend_from_slice(args);
        self.run("pg_ctl", &full)
    }

    fn run(&self, program: &str, args: &[&str]) -> Result<Output, EmbeddedError> {
        let path = self.bin.join(program);
        self.folder
            .command(&path)
            .args(args)
            .output()
            .map_err(|source| EmbeddedError::Io { path, source })
    }
}

fn last_line(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    stderr
        .lines()
        .chain(stdout.lines())
        .rfind(|l| !l.trim().is_empty())
        .unwrap_or("no output")
        .trim()
        .to_string()
}
