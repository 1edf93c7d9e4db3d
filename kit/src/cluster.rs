//! Throwaway PostgreSQL clusters: started with the same embedded-cluster code as
//! `hookd serve`, and stopped and deleted by a detached watcher once this process
//! exits, however it exits (a failed test or a killed benchmark included).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use hookd::embedded_pg::{self, ClusterOptions, EmbeddedPostgres};
use tokio_postgres::NoTls;

/// Starts a cluster in `dir` that lives as long as this process.
pub fn throwaway(dir: &Path, options: ClusterOptions) -> EmbeddedPostgres {
    let mut cluster = EmbeddedPostgres::start(dir, options)
        .unwrap_or_else(|e| panic!("throwaway cluster in {}: {e}", dir.display()));
    remove_when_this_process_exits(&mut cluster);
    cluster
}

/// A hot standby of `primary` in `dir`, made as an operator makes one
/// (`pg_basebackup -R`) and started with the embedded-cluster code on a socket of
/// its own: it serves reads and refuses every write (SQLSTATE 25006), as an old
/// primary does after a failover. It lives as long as this process.
pub fn standby(primary: &EmbeddedPostgres, dir: &Path) -> EmbeddedPostgres {
    standby_with(primary, dir, &primary.connection_string("postgres"), "")
}

/// The same, copied from `source` (a connection string to `primary`, e.g. over
/// TCP), with `settings` (postgresql.conf lines, such as its own `port`) added to
/// its `postgresql.auto.conf`, which wins over the settings hookd writes.
pub fn standby_with(
    primary: &EmbeddedPostgres,
    dir: &Path,
    source: &str,
    settings: &str,
) -> EmbeddedPostgres {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    if nix::unistd::Uid::effective().is_root() {
        let postgres = nix::unistd::User::from_name("postgres")
            .ok()
            .flatten()
            .expect("the postgres user");
        std::os::unix::fs::chown(
            dir,
            Some(postgres.uid.as_raw()),
            Some(postgres.gid.as_raw()),
        )
        .unwrap_or_else(|e| panic!("chown {}: {e}", dir.display()));
    }
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", dir.display()));
    let backup = primary
        .command_as_cluster_user(&postgres_bin("pg_basebackup"))
        .arg("-D")
        .arg(dir.join("data"))
        .args(["-R", "-X", "stream", "-c", "fast", "-d"])
        .arg(source)
        .output()
        .unwrap_or_else(|e| panic!("pg_basebackup: {e}"));
    assert!(
        backup.status.success(),
        "pg_basebackup: {}",
        String::from_utf8_lossy(&backup.stderr)
    );
    if !settings.is_empty() {
        // As the cluster's user, who owns the file.
        let appended = primary
            .command_as_cluster_user(Path::new("/bin/sh"))
            .args(["-c", "printf '%s\\n' \"$1\" >> \"$2\"", "sh", settings])
            .arg(dir.join("data/postgresql.auto.conf"))
            .status()
            .unwrap_or_else(|e| panic!("postgresql.auto.conf: {e}"));
        assert!(appended.success(), "postgresql.auto.conf");
    }
    throwaway(dir, ClusterOptions { durable: false })
}

/// Starts a watcher, running as the cluster's user in its own process group, that
/// stops the cluster and deletes its folder once this process has exited; from
/// then on the watcher owns the cluster's shutdown.
pub fn remove_when_this_process_exits(cluster: &mut EmbeddedPostgres) {
    let pid = std::process::id();
    let quote = |p: &Path| p.to_string_lossy().replace('\'', "'\\''");
    let dir = quote(cluster.dir());
    let pg_ctl = quote(&cluster.bin_dir().join("pg_ctl"));
    let script = format!(
        "while [ -d /proc/{pid} ]; do sleep 0.5; done; \
         '{pg_ctl}' -D '{dir}/data' stop -m immediate -w -s >/dev/null 2>&1; \
         rm -rf '{dir}'"
    );
    // Detached on purpose: the watcher must outlive this process.
    #[allow(clippy::zombie_processes)]
    let _watcher = cluster
        .command_as_cluster_user(Path::new("/bin/sh"))
        .args(["-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("cluster watcher: {e}"));
    cluster.hand_over_shutdown();
}

/// Where a PostgreSQL client program is: next to `initdb` on PATH (symlinks
/// resolved), else the newest `/usr/lib/postgresql/*/bin` — as hookd finds them.
pub fn postgres_bin(program: &str) -> PathBuf {
    embedded_pg::binaries::program(program)
        .unwrap_or_else(|| panic!("no {program} next to initdb (PATH or /usr/lib/postgresql)"))
}

/// A plain connection, driven on the current runtime.
pub async fn connect(config: tokio_postgres::Config) -> tokio_postgres::Client {
    let (client, connection) = config.connect(NoTls).await.expect("connect");
    tokio::spawn(connection);
    client
}

/// The build's `target/tmp` (where a test's or benchmark's files go), found from
/// the running executable when it sits in `…/<profile>/deps/` or
/// `…/<profile>/examples/` as cargo puts it; the system's temporary folder for a
/// binary anywhere else.
pub fn tmp_root() -> PathBuf {
    let exe = std::env::current_exe().ok();
    let in_cargo_layout = |exe: &PathBuf| {
        exe.parent()
            .and_then(|dir| dir.file_name())
            .is_some_and(|name| name == "deps" || name == "examples")
    };
    exe.filter(in_cargo_layout)
        .and_then(|exe| exe.ancestors().nth(3).map(|target| target.join("tmp")))
        .unwrap_or_else(std::env::temp_dir)
}

/// A folder under the system's temporary folder for a cluster that is copied
/// into place (a standby): pg_basebackup writes the copy as the cluster's user,
/// who cannot enter a private clone when root runs the tests as `postgres`, and
/// hookd keeps a cluster only inside a folder of the user running it, which the
/// system's temporary folder itself is not for anyone but root. So a fresh folder
/// of this process's user, open for reading to others; removed when dropped.
pub struct SharedFolder {
    path: PathBuf,
}

impl SharedFolder {
    pub fn new(name: &str) -> SharedFolder {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.subsec_nanos());
        let path = std::env::temp_dir().join(format!("{name}-{}-{nanos}", std::process::id()));
        // create_dir, not create_dir_all: never a folder or link left there before.
        std::fs::create_dir(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // Set after creating it, so the umask cannot close it to the cluster's user.
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
        SharedFolder { path }
    }

    /// Where the cluster goes (the folder is its `./.hookd`, in hookd's terms).
    pub fn cluster_dir(&self) -> PathBuf {
        self.path.join("pg")
    }
}

impl Drop for SharedFolder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Stops the PostgreSQL cluster in `dir` (as the cluster's user) and removes the
/// folder when dropped: a test that starts a cluster and then fails leaves no
/// postmaster behind.
pub struct ClusterGuard {
    pub dir: std::path::PathBuf,
}

impl ClusterGuard {
    pub fn new(dir: &std::path::Path) -> ClusterGuard {
        ClusterGuard {
            dir: dir.to_path_buf(),
        }
    }

    /// Whether the postmaster in `dir` is alive (`pg_ctl status`).
    pub fn running(&self) -> bool {
        pg_ctl_as_cluster_user(&self.dir, &["status"])
    }
}

impl Drop for ClusterGuard {
    fn drop(&mut self) {
        if self.running() {
            pg_ctl_as_cluster_user(&self.dir, &["stop", "-m", "immediate", "-w"]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `pg_ctl ARGS -D DIR/data` as the user that runs the cluster (`postgres` when
/// this process is root); whether it succeeded. Never panics: guards call it
/// while a failed test unwinds.
pub fn pg_ctl_as_cluster_user(dir: &std::path::Path, args: &[&str]) -> bool {
    use std::os::unix::process::CommandExt;
    let Some(pg_ctl) = hookd::embedded_pg::binaries::program("pg_ctl") else {
        return false;
    };
    let mut command = std::process::Command::new(pg_ctl);
    command
        .args(args)
        .arg("-s")
        .arg("-D")
        .arg(dir.join("data"))
        .current_dir("/")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    if nix::unistd::Uid::effective().is_root() {
        let Ok(Some(postgres)) = nix::unistd::User::from_name("postgres") else {
            return false;
        };
        command
            .uid(postgres.uid.as_raw())
            .gid(postgres.gid.as_raw());
    }
    command.status().is_ok_and(|s| s.success())
}
