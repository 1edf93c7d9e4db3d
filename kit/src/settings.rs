//! The settings every test and benchmark starts from.

use hookd::config::Settings;

/// The shipped `hookd.toml`, as text.
pub const SHIPPED_TOML: &str = include_str!("../../hookd.toml");

/// The shipped `hookd.toml` (without environment overrides), listening on a free
/// loopback port.
pub fn shipped_settings() -> Settings {
    let mut settings = Settings::from_toml("hookd.toml", SHIPPED_TOML, &Default::default())
        .unwrap_or_else(|e| panic!("shipped hookd.toml: {e}"));
    settings.listen = "127.0.0.1:0".parse().expect("loopback address");
    settings
}
