//! Where this machine's PostgreSQL server programs are: the folder of `initdb` on
//! `PATH` (symlinks resolved, so `pg_ctl` finds its sibling `postgres`), else the
//! newest `/usr/lib/postgresql/*/bin` (Debian keeps them off `PATH`).

use std::fs;
use std::path::{Path, PathBuf};

/// The folder holding `initdb`, `pg_ctl` and the other server programs.
pub fn folder() -> Option<PathBuf> {
    let has_both = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if has_both(&dir) {
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

/// A program next to `initdb` (`pgbench`, `psql`, …), if it is installed there.
pub fn program(name: &str) -> Option<PathBuf> {
    folder()
        .map(|dir| dir.join(name))
        .filter(|path| path.is_file())
}
