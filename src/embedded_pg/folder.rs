//! The folder a cluster lives in, and doing things inside it as the user who runs
//! the cluster.
//!
//! The preferred folder is `./.hookd/pg` (next to the project). When it cannot be
//! used — the `postgres` user cannot reach it (root working in a 0700 folder), or
//! the socket path would be too long — the cluster lives in a folder with a fresh
//! random name under the system's temporary directory, created with `mkdir` (which
//! never follows a link), owned by the cluster's user and closed to everyone else;
//! its path is recorded in `./.hookd/pg.location` so later commands find it, and a
//! recorded folder is used again only after the same checks. `./.hookd` itself
//! must be a real folder of the user running hookd (not a link, not another
//! user's), and the files hookd keeps there are opened without following links
//! (the record's staging file is made anew, exclusively). Files inside the
//! folder are written by a process running as the cluster's user, so root never
//! writes through a link someone left there, and the cluster's programs get a
//! scrubbed environment (none of hookd's secrets).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nix::unistd::{Uid, User};

use super::{EmbeddedError, PORT};

/// Unix socket paths are limited to 107 bytes on Linux.
const MAX_SOCKET_PATH: usize = 100;
/// The only environment the cluster's programs get.
const SAFE_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The user the cluster runs as, when it is not this process's user (root runs
/// it as `postgres`, since PostgreSQL refuses to run as root).
#[derive(Debug, Clone, Copy)]
pub(super) struct RunAs {
    uid: u32,
    gid: u32,
}

impl RunAs {
    pub(super) fn for_this_process() -> Result<Option<RunAs>, EmbeddedError> {
        if !Uid::effective().is_root() {
            return Ok(None);
        }
        let user = User::from_name("postgres")
            .ok()
            .flatten()
            .ok_or(EmbeddedError::NoPostgresUser)?;
        Ok(Some(RunAs {
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
        }))
    }
}

/// A prepared cluster folder.
#[derive(Debug)]
pub(super) struct ClusterFolder {
    pub(super) dir: PathBuf,
    run_as: Option<RunAs>,
}

impl ClusterFolder {
    /// The preferred folder, or the recorded or a new fallback one.
    pub(super) fn choose(preferred: &Path, run_as: Option<RunAs>) -> Result<Self, EmbeddedError> {
        let preferred = absolute(preferred)?;
        if let Some(home) = preferred.parent() {
            check_home(home)?;
        }
        let why = match prepare_preferred(&preferred, run_as) {
            Ok(()) => {
                return Ok(ClusterFolder {
                    dir: preferred,
                    run_as,
                });
            }
            Err(why) => why,
        };
        let record = location_record(&preferred);
        if let Some(recorded) = read_no_follow(&record).ok().map(PathBuf::from) {
            match check_fallback(&recorded, run_as) {
                Ok(()) => {
                    log::info!(
                        "embedded PostgreSQL cannot live in {} ({why}); using {} as recorded in {}",
                        preferred.display(),
                        recorded.display(),
                        record.display()
                    );
                    return Ok(ClusterFolder {
                        dir: recorded,
                        run_as,
                    });
                }
                Err(problem) => log::warn!(
                    "not using {} recorded in {}: {problem}; making a new folder",
                    recorded.display(),
                    record.display()
                ),
            }
        }
        let fallback = make_fallback(run_as)?;
        if let Err(error) = write_record(&record, &fallback) {
            log::warn!(
                "cannot record {} in {}: {error}; the next start will make another",
                fallback.display(),
                record.display()
            );
        }
        log::warn!(
            "embedded PostgreSQL cannot live in {} ({why}); using {} instead (the system may \
             empty its temporary folder at reboot: set DATABASE_URL for data that must last)",
            preferred.display(),
            fallback.display()
        );
        Ok(ClusterFolder {
            dir: fallback,
            run_as,
        })
    }

    /// A program run as the cluster's user, in its folder, with a scrubbed
    /// environment.
    pub(super) fn command(&self, program: &Path) -> Command {
        let mut command = Command::new(program);
        command
            .current_dir(&self.dir)
            .env_clear()
            .env("PATH", SAFE_PATH)
            .env("LC_ALL", "C")
            .stdin(Stdio::null());
        if let Some(user) = self.run_as {
            command.uid(user.uid).gid(user.gid);
        }
        command
    }

    /// Writes (or with `append`, appends to) a file in the folder as its owner.
    pub(super) fn write(
        &self,
        relative: &str,
        text: &str,
        append: bool,
    ) -> Result<(), EmbeddedError> {
        let path = self.dir.join(relative);
        if self.run_as.is_none() {
            let mut file = OpenOptions::new()
                .create(true)
                .write(true)
                .append(append)
                .truncate(!append)
                .custom_flags(nix::libc::O_NOFOLLOW)
                .open(&path)
                .map_err(io_error(&path))?;
            return file.write_all(text.as_bytes()).map_err(io_error(&path));
        }
        let script = if append {
            "cat >> \"$1\""
        } else {
            "cat > \"$1\""
        };
        let mut child = self
            .command(Path::new("/bin/sh"))
            .args(["-c", script, "sh"])
            .arg(&path)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(io_error(&path))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(text.as_bytes()).map_err(io_error(&path))?;
        }
        let out = child.wait_with_output().map_err(io_error(&path))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(EmbeddedError::Command {
                action: format!("writing {}", path.display()),
                detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            })
        }
    }

    /// Reads a file in the folder as its owner; `None` if it cannot be read.
    pub(super) fn read(&self, relative: &str) -> Option<String> {
        let path = self.dir.join(relative);
        if self.run_as.is_none() {
            return read_no_follow(&path).ok();
        }
        let out = self
            .command(Path::new("/bin/cat"))
            .arg(&path)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Whether the cluster's user can write in `dir`.
    fn reachable(dir: &Path, run_as: Option<RunAs>) -> bool {
        let Some(user) = run_as else {
            return true;
        };
        Command::new("/usr/bin/test")
            .arg("-w")
            .arg(dir)
            .env_clear()
            .uid(user.uid)
            .gid(user.gid)
            .status()
            .is_ok_and(|s| s.success())
    }
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> EmbeddedError + '_ {
    move |source| EmbeddedError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn absolute(path: &Path) -> Result<PathBuf, EmbeddedError> {
    if path.is_absolute() {
        return Ok(path.to_path_buf());
    }
    let cwd = std::env::current_dir().map_err(io_error(Path::new(".")))?;
    Ok(cwd.join(path))
}

fn socket_fits(dir: &Path) -> bool {
    dir.join(format!(".s.PGSQL.{PORT}")).as_os_str().len() <= MAX_SOCKET_PATH
}

/// Opens a folder itself, never a link in its place.
fn open_folder(dir: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_DIRECTORY | nix::libc::O_NOFOLLOW)
        .open(dir)
}

/// A file's text, refusing a link in its place.
fn read_no_follow(path: &Path) -> io::Result<String> {
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)?;
    let mut text = String::new();
    io::Read::read_to_string(&mut file, &mut text)?;
    Ok(text)
}

/// `./.hookd`, made if missing: refused when it is a link or another user's, since
/// hookd (maybe as root) would otherwise create and write files where it leads.
fn check_home(home: &Path) -> Result<(), EmbeddedError> {
    if fs::symlink_metadata(home).is_err() {
        fs::create_dir_all(home).map_err(io_error(home))?;
    }
    let refuse = |problem: String| {
        EmbeddedError::Folder(format!(
            "{} {problem}: hookd keeps its embedded database only in a real folder of the \
             user running it (remove it, or set DATABASE_URL)",
            home.display()
        ))
    };
    let meta = fs::symlink_metadata(home).map_err(io_error(home))?;
    if meta.file_type().is_symlink() {
        return Err(refuse("is a symbolic link".into()));
    }
    if !meta.is_dir() {
        return Err(refuse("is not a folder".into()));
    }
    let me = Uid::effective().as_raw();
    if meta.uid() != me {
        return Err(refuse(format!(
            "belongs to uid {}, not to uid {me} running hookd",
            meta.uid()
        )));
    }
    Ok(())
}

/// Gives the open folder to the cluster's user, closed to everyone else.
fn claim(folder: &File, run_as: Option<RunAs>) -> io::Result<()> {
    if let Some(user) = run_as {
        std::os::unix::fs::fchown(folder, Some(user.uid), Some(user.gid))?;
    }
    folder.set_permissions(fs::Permissions::from_mode(0o700))
}

fn expected_owner(run_as: Option<RunAs>) -> u32 {
    run_as.map_or_else(|| Uid::effective().as_raw(), |user| user.uid)
}

fn prepare_preferred(dir: &Path, run_as: Option<RunAs>) -> Result<(), String> {
    if !socket_fits(dir) {
        return Err("its path is too long for a Unix socket".into());
    }
    fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let folder = open_folder(dir).map_err(|e| format!("cannot open it as a folder: {e}"))?;
    let owner = folder.metadata().map_err(|e| e.to_string())?.uid();
    if owner != Uid::effective().as_raw() && owner != expected_owner(run_as) {
        return Err(format!("it belongs to another user (uid {owner})"));
    }
    claim(&folder, run_as).map_err(|e| e.to_string())?;
    if ClusterFolder::reachable(dir, run_as) {
        Ok(())
    } else {
        Err("the postgres user cannot reach it".into())
    }
}

/// Holds, until dropped, the right to make or start the cluster for
/// `preferred`: two hookd processes started together (two commands, or a
/// command and `serve`) would otherwise both run initdb on one folder, or
/// both start it. A lock file beside it (`.hookd/pg.lock`), taken in turn;
/// `None` where no lock file can be made (the folder's own checks then
/// decide, as before).
pub(super) fn lock_making(
    preferred: &Path,
) -> Result<Option<nix::fcntl::Flock<File>>, EmbeddedError> {
    let preferred = absolute(preferred)?;
    let Some(home) = preferred.parent() else {
        return Ok(None);
    };
    check_home(home)?;
    let path = beside(&preferred, ".lock");
    let file = match OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(&path)
    {
        Ok(file) => file,
        Err(error) => {
            log::debug!("no lock file {}: {error}", path.display());
            return Ok(None);
        }
    };
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive) {
        Ok(locked) => Ok(Some(locked)),
        Err((_, errno)) => {
            log::debug!("cannot lock {}: {errno}", path.display());
            Ok(None)
        }
    }
}

/// Whether a cluster was made for `preferred` and is still there: in it, or in
/// the fallback its record names (a record whose folder the system emptied at
/// reboot names none). Only looks: creates nothing.
pub(super) fn made_for(preferred: &Path) -> bool {
    let made_in = |dir: &Path| match fs::metadata(dir.join("data/PG_VERSION")) {
        Ok(meta) => meta.is_file(),
        // The cluster user's folder, closed to this one (root without the
        // right to enter it): it is there, and not this user's to look into.
        Err(error) if error.kind() == io::ErrorKind::PermissionDenied => dir.is_dir(),
        Err(_) => false,
    };
    made_in(preferred)
        || read_no_follow(&location_record(preferred))
            .is_ok_and(|recorded| made_in(Path::new(&recorded)))
}

/// `./.hookd/pg` → `./.hookd/pg.location`.
fn location_record(preferred: &Path) -> PathBuf {
    beside(preferred, ".location")
}

/// A file next to the preferred folder, named after it: `./.hookd/pg` and
/// `.lock` → `./.hookd/pg.lock`.
fn beside(preferred: &Path, suffix: &str) -> PathBuf {
    let mut name = preferred
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(suffix);
    preferred.with_file_name(name)
}

/// A recorded fallback is used again only if it is still a real folder of the
/// cluster's user that no one else may enter.
fn check_fallback(dir: &Path, run_as: Option<RunAs>) -> Result<(), String> {
    if !dir.is_absolute() || !socket_fits(dir) {
        return Err("not an absolute, short enough path".into());
    }
    let link = fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
    if link.file_type().is_symlink() || !link.is_dir() {
        return Err("not a folder (a link, or something else)".into());
    }
    let folder = open_folder(dir).map_err(|e| e.to_string())?;
    let meta = folder.metadata().map_err(|e| e.to_string())?;
    if meta.uid() != expected_owner(run_as) {
        return Err(format!("it belongs to uid {}", meta.uid()));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "others may enter it (mode {:o})",
            meta.mode() & 0o777
        ));
    }
    if !ClusterFolder::reachable(dir, run_as) {
        return Err("the postgres user cannot reach it".into());
    }
    Ok(())
}

/// A new folder with a random name under the temporary directory.
fn make_fallback(run_as: Option<RunAs>) -> Result<PathBuf, EmbeddedError> {
    let temp = std::env::temp_dir();
    for _ in 0..16 {
        let dir = temp.join(format!("hookd-{}", hex::encode(rand::random::<[u8; 8]>())));
        match fs::create_dir(&dir) {
            Ok(()) => {}
            // Someone else's, or a link: never ours. Try another name.
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(error) => return Err(io_error(&dir)(error)),
        }
        let folder = open_folder(&dir).map_err(io_error(&dir))?;
        claim(&folder, run_as).map_err(io_error(&dir))?;
        if !socket_fits(&dir) {
            return Err(EmbeddedError::Folder(format!(
                "{} is too long for a Unix socket: set TMPDIR to a shorter folder, or DATABASE_URL",
                dir.display()
            )));
        }
        return Ok(dir);
    }
    Err(EmbeddedError::Folder(format!(
        "could not make a new folder under {}",
        temp.display()
    )))
}

/// Records the fallback's path, replacing the record in one step.
fn write_record(record: &Path, fallback: &Path) -> io::Result<()> {
    if let Some(parent) = record.parent() {
        fs::create_dir_all(parent)?;
    }
    let staging = record.with_extension("location.new");
    // A stale one (or a link planted in its place) goes; unlinking never follows.
    match fs::remove_file(&staging) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
        _ => {}
    }
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(&staging)?;
    file.write_all(fallback.as_os_str().as_encoded_bytes())?;
    drop(file);
    fs::rename(&staging, record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_counts_as_made_only_where_its_files_still_are() {
        let project = std::env::temp_dir().join(format!(
            "hookd-made-for-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        let preferred = project.join(".hookd/pg");
        fs::create_dir_all(&preferred).expect("folder");
        assert!(!made_for(&preferred), "an empty folder");
        // A record naming a fallback the system emptied at reboot.
        let fallback = project.join("fallback");
        fs::create_dir_all(&fallback).expect("fallback");
        fs::write(
            location_record(&preferred),
            fallback.to_str().expect("utf-8"),
        )
        .expect("record");
        assert!(!made_for(&preferred), "a record of an emptied folder");
        fs::create_dir_all(fallback.join("data")).expect("data");
        fs::write(fallback.join("data/PG_VERSION"), "15\n").expect("version");
        assert!(made_for(&preferred), "the recorded cluster");
        fs::remove_file(location_record(&preferred)).expect("no record");
        fs::create_dir_all(preferred.join("data")).expect("data");
        fs::write(preferred.join("data/PG_VERSION"), "15\n").expect("version");
        assert!(made_for(&preferred), "the preferred folder's cluster");
        let _ = fs::remove_dir_all(&project);
    }

    #[test]
    fn the_record_sits_next_to_the_preferred_folder() {
        assert_eq!(
            location_record(Path::new("/srv/app/.hookd/pg")),
            Path::new("/srv/app/.hookd/pg.location")
        );
    }

    #[test]
    fn a_recorded_fallback_must_be_a_private_folder_of_its_owner() {
        let root = std::env::temp_dir().join(format!("hookd-check-{}", std::process::id()));
        fs::create_dir_all(&root).expect("root");
        let private = root.join("private");
        fs::create_dir_all(&private).expect("private");
        fs::set_permissions(&private, fs::Permissions::from_mode(0o700)).expect("chmod");
        let open = root.join("open");
        fs::create_dir_all(&open).expect("open");
        fs::set_permissions(&open, fs::Permissions::from_mode(0o755)).expect("chmod");
        let link = root.join("link");
        let _ = fs::remove_file(&link);
        std::os::unix::fs::symlink(&private, &link).expect("symlink");

        // As this user (no switch): ours and private is fine; open or a link is not.
        assert_eq!(check_fallback(&private, None), Ok(()));
        assert!(check_fallback(&open, None).is_err());
        assert!(check_fallback(&link, None).is_err());
        assert!(check_fallback(&root.join("missing"), None).is_err());
        assert!(check_fallback(Path::new("relative"), None).is_err());
        let _ = fs::remove_dir_all(&root);
    }

    #[test]
    fn new_fallbacks_have_fresh_names_and_are_closed() {
        let a = make_fallback(None).expect("folder");
        let b = make_fallback(None).expect("folder");
        assert_ne!(a, b);
        let mode = fs::metadata(&a).expect("meta").mode() & 0o777;
        assert_eq!(mode, 0o700);
        let _ = fs::remove_dir(&a);
        let _ = fs::remove_dir(&b);
    }
}
