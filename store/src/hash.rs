//! Hashes: blob addresses and the per-run hash chain (DESIGN §3).

/// Prefix of every hash the store writes: `blake3:<64 lowercase hex>`.
pub const HASH_PREFIX: &str = "blake3:";

/// DESIGN §3: "`h0 = blake3("flow-history/1.0\n" + run id)`".
pub fn chain_start(run: &str) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(b"flow-history/1.0\n");
    h.update(run.as_bytes());
    *h.finalize().as_bytes()
}

/// DESIGN §3: "`h_n = blake3(h_{n-1} ‖ canonical stored fact n)`" — the
/// previous hash as its 32 raw bytes, then the canonical text's bytes.
pub fn chain_next(prev: &[u8; 32], canonical_fact: &str) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(prev);
    h.update(canonical_fact.as_bytes());
    *h.finalize().as_bytes()
}

/// The blake3 of a blob's bytes.
pub fn blob_hash(bytes: &[u8]) -> [u8; 32] {
    *blake3::hash(bytes).as_bytes()
}

/// `blake3:<hex>` text of a raw hash.
pub fn hash_text(h: &[u8; 32]) -> String {
    // blake3's hex is a table lookup into a fixed buffer; `hex::encode`
    // collects a char iterator one char at a time, ~2,200 instructions a
    // hash, and a W1 step writes three of these.
    let hex = blake3::Hash::from_bytes(*h).to_hex();
    let mut s = String::with_capacity(HASH_PREFIX.len() + hex.len());
    s.push_str(HASH_PREFIX);
    s.push_str(&hex);
    s
}

/// Parses `blake3:<64 lowercase hex>` into raw bytes.
pub fn parse_hash(s: &str) -> Option<[u8; 32]> {
    let hex_part = s.strip_prefix(HASH_PREFIX)?;
    if hex_part.len() != 64 || hex_part.bytes().any(|b| b.is_ascii_uppercase()) {
        return None;
    }
    let mut out = [0u8; 32];
    hex::decode_to_slice(hex_part, &mut out).ok()?;
    Some(out)
}

/// Raw bytes read from a database column, if they are a 32-byte hash.
pub fn from_column(bytes: &[u8]) -> Option<[u8; 32]> {
    <[u8; 32]>::try_from(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trip() {
        let h = blob_hash(b"abc");
        assert_eq!(parse_hash(&hash_text(&h)), Some(h));
        assert_eq!(parse_hash("blake3:00"), None);
        assert_eq!(parse_hash(&hash_text(&h).to_uppercase()), None);
    }

    /// The text every stored reference and chain hash is written in must
    /// not move: lowercase hex, most significant nibble first.
    #[test]
    fn text_is_the_lowercase_hex_of_the_bytes() {
        assert_eq!(
            hash_text(&blob_hash(b"abc")),
            "blake3:6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85"
        );
        let mut h = [0u8; 32];
        for (i, b) in h.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(37) ^ 0xa5;
        }
        assert_eq!(hash_text(&h), format!("blake3:{}", hex::encode(h)));
    }
}
