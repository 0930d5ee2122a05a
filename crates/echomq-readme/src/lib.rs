//! The repository's README and design notes, whose code samples `cargo test --doc` compiles and
//! runs: pages outside the published crates' directories, so they are tested from this unpublished
//! crate.
#![doc = include_str!("../../../README.md")]

#[doc = include_str!("../../../docs/design/README.md")]
pub mod design {}
