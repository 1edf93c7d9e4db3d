//! Names the revision hookd is built from, for `--version` and `hookd_build_info`:
//! the git commit (12 hex digits) when building from this project's own checkout,
//! else `HOOKD_REVISION` (a source tarball, a container build without `.git`),
//! else `unknown`. Never fails the build.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=HOOKD_REVISION");
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let revision = git_revision(&manifest_dir)
        .or_else(from_env)
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=HOOKD_BUILD_REVISION={revision}");
}

/// `HOOKD_REVISION`, when it is a plain token (it ends up in a label and a
/// version line).
fn from_env() -> Option<String> {
    let value = std::env::var("HOOKD_REVISION").ok()?;
    let value = value.trim();
    if is_token(value) {
        Some(value.to_string())
    } else {
        if !value.is_empty() {
            println!(
                "cargo:warning=HOOKD_REVISION is not 1 to 40 letters, digits, '.', '-' or '_'; \
                 using \"unknown\""
            );
        }
        None
    }
}

fn is_token(value: &str) -> bool {
    (1..=40).contains(&value.len())
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
}

/// HEAD's commit, only when the checkout is this crate's own: a tarball unpacked
/// inside some other repository must not take that repository's commit.
fn git_revision(manifest_dir: &Path) -> Option<String> {
    let toplevel = git(manifest_dir, &["rev-parse", "--show-toplevel"])?;
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if !same(Path::new(&toplevel), manifest_dir) {
        return None;
    }
    rerun_when_head_moves(manifest_dir);
    let revision = git(manifest_dir, &["rev-parse", "--short=12", "HEAD"])?;
    is_token(&revision).then_some(revision)
}

/// Reruns this script when HEAD changes (a checkout) or the branch it points to
/// does (a commit), and at no other time. `--git-path` finds the files in a
/// worktree too, where `.git` is a file and the branches live in the main
/// repository. Only existing files are named: cargo reruns on every build for a
/// path that does not exist.
fn rerun_when_head_moves(dir: &Path) {
    // logs/HEAD grows at every commit, whatever holds the branch (a loose ref,
    // packed-refs after `git gc`).
    let mut paths = vec![
        "HEAD".to_string(),
        "packed-refs".to_string(),
        "logs/HEAD".to_string(),
    ];
    if let Some(branch) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
        paths.push(branch);
    }
    for path in paths {
        if let Some(file) = git(dir, &["rev-parse", "--git-path", &path]) {
            let file = dir.join(file);
            if file.is_file() {
                println!("cargo:rerun-if-changed={}", file.display());
            }
        }
    }
}

/// One line of git's output, or `None` when git is missing or fails.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?;
    let line = text.trim();
    (!line.is_empty()).then(|| line.to_string())
}
