//! TFTP: packet codec, a sans-IO transfer state machine and a thin tokio
//! driver serving files from a read-only file source. Never imports `controller`.

pub mod config;
