//! pycollect-core: the parts of pycollect that must be fast and correct without Python.
//!
//! This crate has no PyO3 dependency so that its lock-free code can be tested with
//! `cargo test`, loom and proptest without linking libpython. The bindings live in
//! `rust/pycollect-py`.

/// Version of the pycollect release this crate belongs to (the Python package reports it).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

#[cfg(test)]
mod tests {
    #[test]
    fn version_is_semver_like() {
        let parts: Vec<&str> = super::VERSION.split('.').collect();
        assert_eq!(parts.len(), 3, "version {:?}", super::VERSION);
        assert!(parts.iter().all(|p| p.parse::<u32>().is_ok()));
    }
}
