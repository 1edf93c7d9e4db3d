//! A PgBouncer in transaction mode in front of a throwaway cluster, as platform
//! teams deploy one: Debian's `pgbouncer`, run as the cluster's user (it refuses
//! to run as root), reaching PostgreSQL over the cluster's socket and listening
//! on a loopback port of its own. Stopped when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use hookd::embedded_pg::{self, EmbeddedPostgres};

/// Server connections PgBouncer keeps per database and user.
pub const SERVER_CONNECTIONS: usize = 4;

pub struct PgBouncer {
    child: Child,
    pub port: u16,
    dir: PathBuf,
}

/// Where Debian puts the program (`/usr/sbin`, often not on a user's PATH).
pub fn program() -> Option<PathBuf> {
    ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

impl PgBouncer {
    /// Starts PgBouncer for `cluster`; its log goes to `pgbouncer.log` in a
    /// folder of its own inside the cluster's.
    pub fn start(cluster: &EmbeddedPostgres, name: &str) -> PgBouncer {
        let program = program().expect("pgbouncer (Debian package pgbouncer) is installed");
        let port = free_port();
        let dir = cluster.dir().join(format!("pgbouncer-{name}-{port}"));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let users = dir.join("users.txt");
        std::fs::write(&users, format!("\"{}\" \"\"\n", embedded_pg::USER)).expect("users");
        let ini = dir.join("pgbouncer.ini");
        std::fs::write(
            &ini,
            format!(
                "[databases]\n\
                 * = host={socket} port={pg_port}\n\
                 [pgbouncer]\n\
                 listen_addr = 127.0.0.1\n\
                 listen_port = {port}\n\
                 unix_socket_dir =\n\
                 auth_type = trust\n\
                 auth_file = {users}\n\
                 pool_mode = transaction\n\
                 default_pool_size = {SERVER_CONNECTIONS}\n\
                 max_client_conn = 500\n\
                 ignore_startup_parameters = extra_float_digits\n",
                socket = cluster.dir().display(),
                pg_port = embedded_pg::PORT,
                users = users.display(),
            ),
        )
        .expect("pgbouncer.ini");
        for file in [&dir, &users, &ini] {
            let mode = if file == &dir { 0o755 } else { 0o644 };
            std::fs::set_permissions(file, std::os::unix::fs::PermissionsExt::from_mode(mode))
                .expect("chmod");
        }
        let log = std::fs::File::create(dir.join("pgbouncer.log")).expect("log");
        let child = cluster
            .command_as_cluster_user(&program)
            .arg(&ini)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("pgbouncer: {e}"));
        let bouncer = PgBouncer { child, port, dir };
        bouncer.wait_listening(Duration::from_secs(20));
        bouncer
    }

    /// A `DATABASE_URL` for `dbname` through this pooler, with or without the
    /// `pgbouncer=true` that tells hookd so.
    pub fn url(&self, dbname: &str, tell_hookd: bool) -> String {
        let flag = if tell_hookd { "&pgbouncer=true" } else { "" };
        format!(
            "postgresql://{}@127.0.0.1:{}/{dbname}?sslmode=disable{flag}",
            embedded_pg::USER,
            self.port
        )
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn wait_listening(&self, within: Duration) {
        let deadline = Instant::now() + within;
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "pgbouncer is not listening on {} within {within:?}: {}",
                self.port,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port nobody listens on now, for a process started later to
/// bind. Taken below the kernel's ephemeral range: a port `bind(0)` gives is
/// free only until an outgoing connection takes it as its own end (the tests
/// make thousands, side by side), while one below the range stays free until
/// a listener binds it.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const LOWEST: u32 = 10_000;
    let ephemeral_from = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768)
        .min(u32::from(u16::MAX));
    let span = ephemeral_from.saturating_sub(LOWEST);
    // Each process starts elsewhere in the span, then takes the next port.
    let start = std::process::id().wrapping_mul(7_919);
    for _ in 0..span.min(1_000) {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let Ok(port) = u16::try_from(LOWEST + start.wrapping_add(n) % span) else {
            continue;
        };
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    // No room below the range: a port from it, as a last resort.
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}
