//! flow-store: the home of every history (DESIGN §3, §6 "Run archives").
//!
//! Owns the fact log, content-addressed blobs, the hash chain, the runs index,
//! discovery, host records and archives. It never interprets a program and
//! depends only on flow-abi.
