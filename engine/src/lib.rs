//! flow-engine: FlowSpec programs as a pure state machine (DESIGN §3–§4).
//!
//! Owns the FlowSpec model, the checker and its diagnostics, the interpreter
//! and replay verdicts. It does no IO, reads no clock, spawns nothing and
//! depends only on flow-abi: the host feeds it events and carries out the
//! effects it returns.
