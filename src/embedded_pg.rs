//! The private PostgreSQL cluster hookd runs when `DATABASE_URL` is unset, built from
//! the server binaries on this machine. It listens on a Unix socket inside its own
//! folder only (no TCP port), keeps its data between runs, and is stopped by the
//! process that started it. As root it runs as the `postgres` system user, since
//! PostgreSQL refuses to run as root. The test suite uses the same code for its
//! throwaway cluster.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use nix::unistd::{Gid, Uid, User};
use sha2::{Digest, Sha256};

/// The superuser initdb creates, and the database hookd uses.
pub const USER: &str = "hookd";
pub const DATABASE: &str = "hookd";
const PORT: u16 = 5432;
/// Unix socket paths are limited to 107 bytes on Linux.
const MAX_SOCKET_PATH: usize = 100;

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
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> EmbeddedError + '_ {
    move |source| EmbeddedError::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[derive(Debug, Clone, Copy)]
pub struct ClusterOptions {
    /// `false` trades crash safety for speed (fsync off): for throwaway test clusters.
    pub durable: bool,
}

#[derive(Debug, Clone, Copy)]
struct RunAs {
    uid: Uid,
    gid: Gid,
}

#[derive(Debug)]
pub struct EmbeddedPostgres {
    dir: PathBuf,
    bin: PathBuf,
    run_as: Option<RunAs>,
    started_here: bool,
}

impl EmbeddedPostgres {
    /// Starts (initialising on first use) the cluster in `preferred_dir`, or reuses it
    /// when it is already running. Falls back to a folder under the system temporary
    /// directory when the `postgres` user cannot reach `preferred_dir`.
    pub fn start(preferred_dir: &Path, options: ClusterOptions) -> Result<Self, EmbeddedError> {
        let bin = find_binaries().ok_or(EmbeddedError::NoBinaries)?;
        let run_as = if Uid::effective().is_root() {
            let user = User::from_name("postgres")
                .ok()
                .flatten()
                .ok_or(EmbeddedError::NoPostgresUser)?;
            Some(RunAs {
                uid: user.uid,
                gid: user.gid,
            })
        } else {
            None
        };
        let preferred = absolute(preferred_dir)?;
        let dir = match prepare_dir(&preferred, run_as) {
            Ok(()) => preferred,
            Err(why) => {
                let fallback = fallback_dir(&preferred);
                prepare_dir(&fallback, run_as).map_err(|why2| EmbeddedError::Command {
                    action: format!("preparing {}", fallback.display()),
                    detail: why2,
                })?;
                log::warn!(
                    "embedded PostgreSQL cannot live in {} ({why}); using {} instead",
                    preferred.display(),
                    fallback.display()
                );
                fallback
            }
        };
        let mut cluster = EmbeddedPostgres {
            dir,
            bin,
            run_as,
            started_here: false,
        };
        cluster.init_if_needed(options)?;
        cluster.write_settings(options)?;
        if cluster.is_running() {
            // Left behind by a hookd that was killed: adopt it, so it is stopped
            // at exit. Otherwise another live hookd owns it.
            let orphaned = cluster.owner().is_none_or(|pid| !process_alive(pid));
            log::info!(
                "embedded PostgreSQL already running in {}; reusing it{}",
                cluster.dir.display(),
                if orphaned {
                    " (its owner is gone: adopting it)"
                } else {
                    ""
                }
            );
            if orphaned {
                cluster.take_ownership()?;
            }
            return Ok(cluster);
        }
        let log_file = cluster.dir.join("postgres.log");
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
                return Ok(cluster);
            }
            return Err(EmbeddedError::Command {
                action: "pg_ctl start".into(),
                detail: format!("{}; see {}", last_line(&started), log_file.display()),
            });
        }
        cluster.take_ownership()?;
        log::info!(
            "started embedded PostgreSQL in {} (socket only, user {})",
            cluster.dir.display(),
            if run_as.is_some() {
                "postgres"
            } else {
                "current"
            }
        );
        Ok(cluster)
    }

    /// The folder holding the data directory and the socket.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn pg_config(&self, dbname: &str) -> tokio_postgres::Config {
        let mut config = tokio_postgres::Config::new();
        config
            .host_path(&self.dir)
            .port(PORT)
            .user(USER)
            .dbname(dbname);
        config
    }

    /// A `DATABASE_URL` (key=value form) for another process.
    pub fn connection_string(&self, dbname: &str) -> String {
        let host = self
            .dir
            .to_string_lossy()
            .replace('\\', "\\\\")
            .replace('\'', "\\'");
        format!("host='{host}' port={PORT} user={USER} dbname={dbname}")
    }

    /// Stops the cluster if this process started it.
    pub fn stop(&mut self) -> Result<(), EmbeddedError> {
        if !self.started_here {
            return Ok(());
        }
        let out = self.pg_ctl(&["stop", "-m", "fast", "-w", "-s"])?;
        if !out.status.success() && self.is_running() {
            return Err(EmbeddedError::Command {
                action: "pg_ctl stop".into(),
                detail: last_line(&out),
            });
        }
        self.started_here = false;
        let _ = fs::remove_file(self.owner_file());
        log::info!("stopped embedded PostgreSQL in {}", self.dir.display());
        Ok(())
    }

    fn owner_file(&self) -> PathBuf {
        self.dir.join("hookd.pid")
    }

    /// The hookd process that will stop the cluster.
    fn owner(&self) -> Option<u32> {
        fs::read_to_string(self.owner_file())
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    fn take_ownership(&mut self) -> Result<(), EmbeddedError> {
        let path = self.owner_file();
        fs::write(&path, std::process::id().to_string()).map_err(io_error(&path))?;
        self.started_here = true;
        Ok(())
    }

    /// For throwaway clusters: a detached watcher that shuts the cluster down and
    /// deletes its folder once process `pid` has exited, however it exited.
    pub fn remove_when_process_exits(&mut self, pid: u32) -> Result<(), EmbeddedError> {
        let dir = self.dir.to_string_lossy().replace('\'', "'\\''");
        let script = format!(
            "while [ -d /proc/{pid} ]; do sleep 0.5; done; \
             pm=$(head -n1 '{dir}/data/postmaster.pid' 2>/dev/null); \
             if [ -n \"$pm\" ]; then kill -QUIT \"$pm\" 2>/dev/null; \
               while kill -0 \"$pm\" 2>/dev/null; do sleep 0.2; done; fi; \
             rm -rf '{dir}'"
        );
        Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(io_error(Path::new("sh")))?;
        // The watcher owns the shutdown now.
        self.started_here = false;
        Ok(())
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn is_running(&self) -> bool {
        self.data_dir().join("postmaster.pid").exists()
            && self
                .pg_ctl(&["status", "-s"])
                .map(|o| o.status.success())
                .unwrap_or(false)
    }

    fn init_if_needed(&self, options: ClusterOptions) -> Result<(), EmbeddedError> {
        let data = self.data_dir();
        if data.join("PG_VERSION").exists() {
            return Ok(());
        }
        let data_arg = data.to_string_lossy().into_owned();
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
        let conf = data.join("postgresql.conf");
        let mut text = fs::read_to_string(&conf).map_err(io_error(&conf))?;
        text.push_str(
            "\n# hookd rewrites hookd.conf at every start\ninclude_if_exists = 'hookd.conf'\n",
        );
        fs::write(&conf, text).map_err(io_error(&conf))?;
        Ok(())
    }

    fn write_settings(&self, options: ClusterOptions) -> Result<(), EmbeddedError> {
        let socket_dir = self.dir.to_string_lossy().replace('\'', "''");
        // wal_compression: a retention purge rewrites many old pages, and their
        // full-page images in the WAL compress several-fold.
        let mut text = format!(
            "listen_addresses = ''\nunix_socket_directories = '{socket_dir}'\nport = {PORT}\n\
             max_connections = 200\nwal_compression = on\n"
        );
        if !options.durable {
            text.push_str("fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n");
        }
        let path = self.data_dir().join("hookd.conf");
        fs::write(&path, text).map_err(io_error(&path))?;
        if let Some(user) = self.run_as {
            nix::unistd::chown(&path, Some(user.uid), Some(user.gid))
                .map_err(|e| io_error(&path)(e.into()))?;
        }
        Ok(())
    }

    fn pg_ctl(&self, args: &[&str]) -> Result<Output, EmbeddedError> {
        let data = self.data_dir().to_string_lossy().into_owned();
        let mut full = vec!["-D", data.as_str()];
        full.extend_from_slice(args);
        self.run("pg_ctl", &full)
    }

    fn run(&self, program: &str, args: &[&str]) -> Result<Output, EmbeddedError> {
        let path = self.bin.join(program);
        let mut command = Command::new(&path);
        command
            .args(args)
            .current_dir(&self.dir)
            .env_remove("PGDATA")
            .env("LC_ALL", "C")
            .stdin(Stdio::null());
        if let Some(user) = self.run_as {
            command.uid(user.uid.as_raw()).gid(user.gid.as_raw());
        }
        command.output().map_err(io_error(&path))
    }
}

fn process_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// `initdb` and `pg_ctl` from PATH, else the newest `/usr/lib/postgresql/*/bin`.
fn find_binaries() -> Option<PathBuf> {
    let has_both = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if has_both(&dir) {
                // Resolve symlinks so pg_ctl finds its sibling `postgres` binary.
                let initdb = fs::canonicalize(dir.join("initdb")).ok()?;
                return initdb.parent().map(Path::to_path_buf);
            }
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            has_both(&bin).then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

fn absolute(path: &Path) -> Result<PathBuf, EmbeddedError> {
    if path.is_absolute() {
        return Ok(path.to_path_buf());
    }
    let cwd = std::env::current_dir().map_err(io_error(Path::new(".")))?;
    Ok(cwd.join(path))
}

/// Creates `dir` for the cluster and checks the user who will run it can use it.
fn prepare_dir(dir: &Path, run_as: Option<RunAs>) -> Result<(), String> {
    let socket = dir.join(format!(".s.PGSQL.{PORT}"));
    if socket.as_os_str().len() > MAX_SOCKET_PATH {
        return Err("its path is too long for a Unix socket".into());
    }
    fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(|e| e.to_string())?;
    let Some(user) = run_as else {
        return Ok(());
    };
    nix::unistd::chown(dir, Some(user.uid), Some(user.gid)).map_err(|e| e.to_string())?;
    let reachable = Command::new("test")
        .arg("-w")
        .arg(dir)
        .uid(user.uid.as_raw())
        .gid(user.gid.as_raw())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if reachable {
        Ok(())
    } else {
        Err("the postgres user cannot reach it".into())
    }
}

/// A folder of hookd's own under the system temporary directory, stable per project
/// folder so the data survives restarts.
fn fallback_dir(preferred: &Path) -> PathBuf {
    let digest = Sha256::digest(preferred.as_os_str().as_encoded_bytes());
    let tag = hex::encode(&digest[..6]);
    std::env::temp_dir().join(format!("hookd-{tag}")).join("pg")
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
