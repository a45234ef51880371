//! Logging setup: human-readable by default, JSON with `--log-json`.

use tracing_subscriber::EnvFilter;

pub fn init(json: bool) {
    let filter =
        EnvFilter::try_from_env("METALHERD_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A second init (tests) is harmless: keep the first subscriber.
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
