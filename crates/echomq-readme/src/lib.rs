//! The repository's README, whose code samples `cargo test --doc` compiles and runs: a page outside
//! the published crates' directories, so it is tested from this unpublished crate.
#![doc = include_str!("../../../README.md")]
