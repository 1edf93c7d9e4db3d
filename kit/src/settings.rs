//! The settings every test and benchmark starts from.

use hookd::config::Settings;

/// The shipped `hookd.toml`, as text.
pub const SHIPPED_TOML: &str = include_str!("../../hookd.toml");

/// The shipped `hookd.toml` as text, listening on `port` instead (for a real
/// `hookd serve`); fails if the shipped listen line changed.
pub fn shipped_toml_on_port(port: u16) -> String {
    const SHIPPED_LISTEN: &str = "listen = \"127.0.0.1:8080\"";
    assert!(
        SHIPPED_TOML.contains(SHIPPED_LISTEN),
        "hookd.toml no longer has {SHIPPED_LISTEN}"
    );
    shipped_toml_anywhere().replace(SHIPPED_LISTEN, &format!("listen = \"127.0.0.1:{port}\""))
}

/// The shipped `hookd.toml` as text for a copy written elsewhere: the files it
/// names (relative to its own folder) are named by their full paths.
pub fn shipped_toml_anywhere() -> String {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/");
    SHIPPED_TOML.replace("\"fixtures/", &format!("\"{fixtures}"))
}

/// The shipped `hookd.toml` (without environment overrides), listening on a free
/// loopback port.
pub fn shipped_settings() -> Settings {
    let mut settings = Settings::from_toml("hookd.toml", SHIPPED_TOML, &Default::default())
        .unwrap_or_else(|e| panic!("shipped hookd.toml: {e}"));
    settings.listen = "127.0.0.1:0".parse().expect("loopback address");
    settings
}
