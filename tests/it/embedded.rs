//! The embedded cluster's folder: when the preferred `./.hookd/pg` cannot be used,
//! a private folder with a fresh name under the temporary directory, recorded next
//! to the preferred one and checked again before any later use.

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
async fn an_unusable_preferred_folder_moves_the_cluster_to_a_private_recorded_one() {
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
async fn a_record_pointing_at_a_link_or_an_open_folder_is_not_used() {
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
