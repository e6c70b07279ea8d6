//! flow-abi: what crosses the host boundary.
//!
//! Owns Flow values and types, the canonical JSON text, type-directed
//! decoding, JSON Schema reading and generation, type terms, declaration
//! fingerprints, the Tool process protocol messages and the facts of a
//! history with their ids, as the Flow runtime specification "host
//! boundary" fixes them (see `docs/concepts.md` and `docs/abi.md`).
//!
//! It depends on no other flowd crate and does no IO: every other crate
//! stands on it, so it must stay small, exact and panic-free on any input.

pub mod builtin;
pub mod decode;
pub mod error;
pub mod example;
pub mod fact;
pub mod json;
pub mod number;
pub mod protocol;
pub mod schema;
pub mod signature;
pub mod temporal;
pub mod types;
pub mod typespec;
pub mod value;

pub use decode::{decode, decode_json};
pub use error::DecodeError;
pub use temporal::{Duration, Instant};
pub use types::{Body, Ctor, Decl, DeclId, Field, Refinement, Type, TypeSet};
pub use value::Value;

/// The data version shared by the value encoding, the Tool protocol and the
/// history format (host-boundary.txt, "Versioning").
pub const DATA_VERSION: &str = "1.0";

/// Limits on decoded values (DESIGN §2). Each is a clear refusal, never a
/// panic or an allocation blow-up.
pub mod limits {
    /// Deepest nesting of arrays and objects.
    pub const MAX_DEPTH: usize = 128;
    /// Decimal digits of an Int.
    pub const MAX_INT_DIGITS: usize = 1000;
    /// Significant digits of a Decimal.
    pub const MAX_DECIMAL_DIGITS: usize = 1000;
    /// Characters of one number's canonical text. The seed allows any i64
    /// Decimal exponent; since canonical numbers are written out in full, we
    /// narrow that to what fits in this many characters (DESIGN §2).
    pub const MAX_NUMBER_TEXT: usize = 4096;
    /// Bytes of one Text.
    pub const MAX_TEXT_BYTES: usize = 16 << 20;
    /// Bytes of one Tool reply (larger is BadReply).
    pub const MAX_REPLY_BYTES: usize = 16 << 20;
    /// Bytes of a run's input.
    pub const MAX_INPUT_BYTES: usize = 16 << 20;
}
