//! The embedded store: one redb file in the data directory.
