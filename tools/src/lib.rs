//! flow-tools: bindings and the implementations behind a program's Tools.
pub mod manifest;
