//! What this build is: the package version and the git revision it was built
//! from (`build.rs` finds it; `unknown` when it could not).

pub const REVISION: &str = env!("HOOKD_BUILD_REVISION");

/// `hookd --version` prints `hookd ` and this: `0.1.0 (rev 0123456789ab)`.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (rev ",
    env!("HOOKD_BUILD_REVISION"),
    ")"
);
