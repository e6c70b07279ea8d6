//! flow-toolkit: the Rust toolkit for writing a Tool process.
