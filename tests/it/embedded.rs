//! The embedded cluster's folder: when the preferred `./.hookd/pg` cannot be used,
//! a private folder with a fresh name under the temporary directory, recorded next
//! to the preferred one and checked again before any later use; links in
//! `./.hookd` (or in its place) never followed, and another user's `.hookd` refused.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use hookd::embedded_pg::{ClusterOptions, EmbeddedPostgres, Ownership};

/// A started cluster, stopped and removed when dropped (also on a failed assert).
struct Started(EmbeddedPostgres);

impl Drop for Started {
    fn drop(&mut self) {
        // A borrowed cluster is someone else's to stop and remove.
        if self.0.ownership() != Ownership::Borrowed {
            let _ = self.0.stop();
            let _ = std::fs::remove_dir_all(self.0.dir());
        }
    }
}

async fn start(preferred: PathBuf) -> Started {
    tokio::task::spawn_blocking(move || {
        Started(
            EmbeddedPostgres::start(&preferred, ClusterOptions { durable: false })
                .expect("cluster"),
        )
    })
    .await
    .expect("join")
}

/// A project folder whose `./.hookd/pg` is too long for a Unix socket, so the
/// cluster must live elsewhere (for any user, root or not).
fn project_with_a_long_path(name: &str) -> PathBuf {
    let project = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "{name}-{}-{}",
        std::process::id(),
        "x".repeat(100)
    ));
    std::fs::create_dir_all(&project).expect("project");
    project
}

fn cluster_user() -> u32 {
    if nix::unistd::Uid::effective().is_root() {
        nix::unistd::User::from_name("postgres")
            .expect("lookup")
            .expect("a postgres user")
            .uid
            .as_raw()
    } else {
        nix::unistd::Uid::effective().as_raw()
    }
}

fn assert_private_fallback(dir: &Path) {
    assert!(dir.starts_with(std::env::temp_dir()), "{}", dir.display());
    let name = dir.file_name().and_then(|n| n.to_str()).expect("name");
    assert!(
        name.starts_with("hookd-") && name.len() == "hookd-".len() + 16,
        "{name}"
    );
    let meta = std::fs::symlink_metadata(dir).expect("folder");
    assert!(meta.is_dir() && !meta.file_type().is_symlink());
    assert_eq!(meta.mode() & 0o777, 0o700, "closed to everyone else");
    assert_eq!(meta.uid(), cluster_user(), "owned by the cluster's user");
}

#[tokio::test]
async fn slow_an_unusable_preferred_folder_moves_the_cluster_to_a_private_recorded_one() {
    let project = project_with_a_long_path("fallback");
    let preferred = project.join(".hookd/pg");
    let first = start(preferred.clone()).await;
    assert_eq!(first.0.ownership(), Ownership::Owned);
    let dir = first.0.dir().to_path_buf();
    assert_private_fallback(&dir);
    let record = project.join(".hookd/pg.location");
    assert_eq!(
        std::fs::read_to_string(&record).expect("record"),
        dir.to_string_lossy()
    );

    // A later command finds the same cluster through the record.
    let second = start(preferred.clone()).await;
    assert_eq!(second.0.dir(), dir);
    assert_eq!(
        second.0.ownership(),
        Ownership::Borrowed,
        "the first still owns it"
    );
    drop(second);
    drop(first);
    let _ = std::fs::remove_dir_all(&project);
}

#[tokio::test]
async fn slow_a_record_pointing_at_a_link_or_an_open_folder_is_not_used() {
    let project = project_with_a_long_path("tampered");
    let record = project.join(".hookd/pg.location");
    std::fs::create_dir_all(record.parent().expect("parent")).expect(".hookd");
    let planted = std::env::temp_dir().join(format!("planted-{}", std::process::id()));
    std::fs::create_dir_all(&planted).expect("planted");
    std::fs::set_permissions(
        &planted,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let link = std::env::temp_dir().join(format!("hookd-link-{}", std::process::id()));
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&planted, &link).expect("symlink");

    for target in [&link, &planted] {
        std::fs::write(&record, target.to_string_lossy().as_bytes()).expect("record");
        let cluster = start(project.join(".hookd/pg")).await;
        let dir = cluster.0.dir().to_path_buf();
        assert_ne!(&dir, target);
        assert_private_fallback(&dir);
        assert_eq!(
            std::fs::read_to_string(&record).expect("record"),
            dir.to_string_lossy()
        );
        assert_eq!(
            std::fs::read_dir(&planted).expect("planted").count(),
            0,
            "nothing was written into the planted folder"
        );
    }
    let _ = std::fs::remove_file(&link);
    let _ = std::fs::remove_dir_all(&planted);
    let _ = std::fs::remove_dir_all(&project);
}

/// `start`, for a folder hookd must refuse: the one-line reason.
async fn refused(preferred: PathBuf) -> String {
    tokio::task::spawn_blocking(move || {
        match EmbeddedPostgres::start(&preferred, ClusterOptions { durable: false }) {
            Ok(cluster) => {
                let cluster = Started(cluster);
                panic!("started in {}", cluster.0.dir().display())
            }
            Err(error) => error.to_string(),
        }
    })
    .await
    .expect("join")
}

/// A private folder a cluster could use (its user's, mode 0700), as a fallback
/// would be: what a planted link would lead root into.
fn usable_folder(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("folder");
    std::os::unix::fs::chown(&dir, Some(cluster_user()), None).expect("chown");
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .expect("chmod");
    dir
}

#[tokio::test]
async fn slow_a_linked_location_record_or_staging_file_is_not_followed() {
    let project = project_with_a_long_path("linked-record");
    let home = project.join(".hookd");
    std::fs::create_dir_all(&home).expect(".hookd");
    // pg.location a link to a file naming a folder hookd could use: not read.
    let planted = usable_folder("planted-record");
    let elsewhere = project.join("elsewhere");
    std::fs::write(&elsewhere, planted.to_string_lossy().as_bytes()).expect("target");
    std::os::unix::fs::symlink(&elsewhere, home.join("pg.location")).expect("symlink");
    // pg.location.new a link to another file: not written through.
    let victim = project.join("victim");
    std::fs::write(&victim, "untouched").expect("victim");
    std::os::unix::fs::symlink(&victim, home.join("pg.location.new")).expect("symlink");

    let cluster = start(home.join("pg")).await;
    let dir = cluster.0.dir().to_path_buf();
    assert_ne!(dir, planted, "the linked record was followed");
    assert_private_fallback(&dir);
    assert_eq!(
        std::fs::read_to_string(&elsewhere).expect("target"),
        planted.to_string_lossy(),
        "the record's target is unchanged"
    );
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "untouched",
        "nothing written through the staging link"
    );
    let record = home.join("pg.location");
    assert!(
        !std::fs::symlink_metadata(&record)
            .expect("record")
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read_to_string(&record).expect("record"),
        dir.to_string_lossy()
    );
    assert_eq!(
        std::fs::read_dir(&planted).expect("planted").count(),
        0,
        "nothing in the planted folder"
    );
    drop(cluster);
    let _ = std::fs::remove_dir_all(&planted);
    let _ = std::fs::remove_dir_all(&project);
}

#[tokio::test]
async fn slow_a_linked_hookd_folder_is_refused_with_one_line() {
    let project = project_with_a_long_path("linked-home");
    let elsewhere = project.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("elsewhere");
    std::os::unix::fs::symlink(&elsewhere, project.join(".hookd")).expect("symlink");
    let reason = refused(project.join(".hookd/pg")).await;
    assert!(
        reason.contains(".hookd") && reason.contains("symbolic link") && !reason.contains('\n'),
        "{reason}"
    );
    assert_eq!(
        std::fs::read_dir(&elsewhere).expect("elsewhere").count(),
        0,
        "nothing was made where the link points"
    );
    let _ = std::fs::remove_dir_all(&project);
}

#[tokio::test]
async fn slow_a_hookd_folder_of_another_user_is_refused_with_one_line() {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("skipped: only root can give a folder to another user");
        return;
    }
    let nobody = nix::unistd::User::from_name("nobody")
        .expect("lookup")
        .expect("a nobody user");
    let project = project_with_a_long_path("foreign-home");
    let home = project.join(".hookd");
    std::fs::create_dir_all(&home).expect(".hookd");
    std::os::unix::fs::chown(&home, Some(nobody.uid.as_raw()), Some(nobody.gid.as_raw()))
        .expect("chown");
    let reason = refused(home.join("pg")).await;
    assert!(
        reason.contains(".hookd") && reason.contains("belongs to uid") && !reason.contains('\n'),
        "{reason}"
    );
    assert_eq!(std::fs::read_dir(&home).expect(".hookd").count(), 0);
    let _ = std::fs::remove_dir_all(&project);
}
