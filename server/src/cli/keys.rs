//! `flow keys`: the master keys of encryption at rest (docs/custody.md
//! "Encryption at rest"). `new` writes a key file, `rotate` re-wraps a
//! store's data keys under the key file's active key and seals the rows
//! written before encryption was turned on. `new-signing` writes an
//! archive signing key (docs/custody.md "Signed archives"; the archive
//! module makes it).

use super::Global;
use crate::error::{Error, Result};
use clap::{Args, Subcommand};
use flow_store::Keyring;
use std::path::{Path, PathBuf};

#[derive(Subcommand, Debug, Clone)]
pub enum KeysCommand {
    /// Write a fresh random master key into FILE and make it the active
    /// one (FILE is created, or its other keys are kept for rotation).
    #[command(after_help = concat!(
        "Example:\n  flow keys new /etc/flowd/keys   # then: flow serve --key-file /etc/flowd/keys\n\n",
        "The file is written with mode 0600. Keep it out of the database, its backups and version control: without it an encrypted store cannot be read.\n\n",
        "Exit codes: 0 written; 2 refused (FILE does not read as a key file, or cannot be written)."))]
    New {
        /// The key file.
        file: PathBuf,
    },
    /// Re-wrap every data key of the store under the key file's active
    /// master key, and seal the rows the store holds in plaintext.
    #[command(after_help = concat!(
        "Example:\n  flow keys new keys.txt && flow --key-file keys.txt keys rotate\n  flow --key-file keys.txt keys rotate --postgres postgres://flowd@db/flowd\n\n",
        "The key file must hold the key that wraps the store's data keys now (the old one) and the new active key. Afterwards the old key can be removed from the file. ",
        "Safe to interrupt and run again, and beside a running server (docs/custody.md \"Rotation\").\n\n",
        "Exit codes: 0 rotated; 2 refused (no --key-file); 5 a storage failure (a key the store needs is not in the file)."))]
    Rotate(RotateArgs),
    /// Write a new Ed25519 signing key (mode 0600; never over an existing
    /// file) and print its public line for a trusted-keys file.
    #[command(
        name = "new-signing",
        after_help = "Example:\n  flow keys new-signing ~/.flowd/alice.key --signer alice >> team.keys\n\nExit codes: 0 written (the public line `ed25519:<base64> NAME` printed); 2 refused: the file exists or the name is malformed."
    )]
    NewSigning {
        /// The key file to write.
        file: PathBuf,
        /// The name the key signs as (1 to 128 bytes).
        #[arg(long)]
        signer: String,
    },
}

#[derive(Args, Debug, Clone)]
pub struct RotateArgs {
    /// Rotate the Postgres store at this URL instead of the SQLite file
    /// under --data.
    #[arg(long, value_name = "URL")]
    pub postgres: Option<String>,
    /// The Postgres schema that holds the store's tables.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "public",
        requires = "postgres"
    )]
    pub postgres_schema: String,
}

pub(super) fn run(g: &Global, cmd: KeysCommand) -> Result<u8> {
    match cmd {
        KeysCommand::New { file } => new(g, &file),
        KeysCommand::Rotate(a) => rotate(g, &a),
        KeysCommand::NewSigning { file, signer } => super::archive::new_signing(g, &file, &signer),
    }
}

fn new(g: &Global, file: &Path) -> Result<u8> {
    let shown = file.display().to_string();
    let (ring, id) = if file.exists() {
        let mut ring = Keyring::load(file)?;
        let id = ring.add_generated()?;
        (ring, id)
    } else {
        let ring = Keyring::generate(&shown)?;
        let id = ring.active().to_string();
        (ring, id)
    };
    write_private(file, &ring.to_text())
        .map_err(|e| Error::Refused(format!("cannot write the key file {shown}: {e}")))?;
    if g.json {
        println!("{}", serde_json::json!({"file": shown, "active": id}));
    } else {
        println!("wrote key {id} to {shown}; it is the active key");
    }
    Ok(0)
}

/// Writes `text` to `path` through a temporary file beside it (renamed
/// over it: a crash leaves the old file or the new, never half), readable
/// by its owner only.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp-flow-keys");
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts.open(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)
}

fn rotate(g: &Global, a: &RotateArgs) -> Result<u8> {
    let ring = super::store::keyring(g)?.ok_or_else(|| {
        Error::Refused(
            "flow keys rotate needs the key file: pass --key-file FILE (or FLOW_KEY_FILE); `flow keys new FILE` makes one".into(),
        )
    })?;
    let done = match &a.postgres {
        Some(url) => flow_store::PostgresStore::open(flow_store::PostgresOptions {
            url: url.clone(),
            schema: a.postgres_schema.clone(),
            keys: Some(ring.clone()),
        })?
        .rotate_keys(&ring)?,
        None => {
            std::fs::create_dir_all(&g.data)
                .map_err(|e| Error::Refused(format!("{}: {e}", g.data.display())))?;
            let opts = flow_store::SqliteOptions {
                keys: Some(ring.clone()),
                ..flow_store::SqliteOptions::default()
            };
            flow_store::SqliteStore::open(g.data.join("flow.db"), opts)?.rotate_keys(&ring)?
        }
    };
    if g.json {
        println!("{}", serde_json::to_string(&done).unwrap_or_default());
    } else {
        println!(
            "every data key is wrapped by master key {} ({} re-wrapped); sealed the rows kept in plaintext: {} blobs, {} facts, {} host records, {} memory values",
            done.master,
            done.rewrapped,
            done.sealed_blobs,
            done.sealed_facts,
            done.sealed_host_records,
            done.sealed_memory
        );
    }
    Ok(0)
}
