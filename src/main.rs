use std::process::ExitCode;

fn main() -> ExitCode {
    hookd::Hookd::new().main()
}
