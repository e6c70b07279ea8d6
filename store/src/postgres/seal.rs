//! Encryption at rest on Postgres (`crate::seal`): the store's data keys
//! loaded (and the first one made) at open, and `flow keys rotate`.

use crate::error::Result;
use crate::seal::{DataKeyRow, Keyring, Place, Sealer, new_data_key, rewrap};
use crate::sqlite::Rotated;
use crate::sqlite::now_ms;
use tokio_postgres::Client;

/// Rows sealed in one transaction of a rotation.
const SEAL_BATCH: i64 = 256;

async fn data_keys(client: &Client) -> Result<Vec<DataKeyRow>> {
    Ok(client
        .query(
            "SELECT id, master, wrapped FROM data_keys ORDER BY created_ms, id",
            &[],
        )
        .await?
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
        .collect::<Result<_, tokio_postgres::Error>>()?)
}

/// In one transaction holding the schema's key lock (so that servers
/// opening a new store at once make one data key, not one each).
async fn locked<T>(
    client: &Client,
    schema: &str,
    f: impl AsyncFnOnce(&Client) -> Result<T>,
) -> Result<T> {
    client.batch_execute("BEGIN").await?;
    let out = async {
        client
            .execute(
                "SELECT pg_advisory_xact_lock(hashtext($1))",
                &[&format!("flow-store-keys:{schema}")],
            )
            .await?;
        f(client).await
    }
    .await;
    match out {
        Ok(v) => {
            client.batch_execute("COMMIT").await?;
            Ok(v)
        }
        Err(e) => {
            let _ = client.batch_execute("ROLLBACK").await;
            Err(e)
        }
    }
}

/// The store's sealer (see `sqlite::seal::load`: the same rules).
pub(super) async fn load(client: &Client, schema: &str, ring: Option<&Keyring>) -> Result<Sealer> {
    locked(client, schema, async |c| {
        let mut rows = data_keys(c).await?;
        if let (Some(ring), true) = (ring, rows.is_empty()) {
            let row = new_data_key(ring)?;
            c.execute(
                "INSERT INTO data_keys (id, master, wrapped, created_ms) VALUES ($1, $2, $3, $4)",
                &[&row.0, &row.1, &row.2, &now_ms()],
            )
            .await?;
            rows.push(row);
        }
        Sealer::load(&rows, ring)
    })
    .await
}

/// `flow keys rotate` (see `sqlite::seal::rotate`). Beside running
/// servers: they keep the data keys they opened (re-wrapping changes no
/// data key), and a row is only replaced by its own sealed bytes.
pub(super) async fn rotate(client: &Client, schema: &str, ring: &Keyring) -> Result<Rotated> {
    let rewrapped = locked(client, schema, async |c| {
        let new = rewrap(ring, &data_keys(c).await?)?;
        for (id, master, wrapped) in &new {
            c.execute(
                "UPDATE data_keys SET master = $2, wrapped = $3 WHERE id = $1",
                &[id, master, wrapped],
            )
            .await?;
        }
        Ok(new.len())
    })
    .await?;
    let seal = load(client, schema, Some(ring)).await?;
    let mut out = Rotated {
        master: ring.active().to_string(),
        rewrapped,
        ..Rotated::default()
    };
    out.sealed_blobs = seal_blobs(client, &seal).await?;
    out.sealed_facts = seal_facts(client, &seal).await?;
    out.sealed_host_records = seal_host(client, &seal).await?;
    out.sealed_memory = seal_memory(client, &seal).await?;
    Ok(out)
}

async fn seal_blobs(client: &Client, seal: &Sealer) -> Result<u64> {
    let (mut after, mut total) = (Vec::<u8>::new(), 0u64);
    loop {
        let rows = client
            .query(
                "SELECT hash, body FROM blobs WHERE hash > $1 AND get_byte(body, 0) <> 255 ORDER BY hash LIMIT $2",
                &[&after, &SEAL_BATCH],
            )
            .await?;
        let (mut hashes, mut bodies, mut olds) = (Vec::new(), Vec::new(), Vec::new());
        for r in &rows {
            let (hash, body): (Vec<u8>, Vec<u8>) = (r.try_get(0)?, r.try_get(1)?);
            if let Some(h) = crate::hash::from_column(&hash) {
                bodies.push(seal.seal(Place::Blob(&h), &body)?.into_owned());
                hashes.push(hash.clone());
                olds.push(body);
            }
            after = hash;
        }
        client
            .execute(
                "UPDATE blobs b SET body = u.new FROM unnest($1::bytea[], $2::bytea[], $3::bytea[]) AS u(hash, new, old)
                 WHERE b.hash = u.hash AND b.body = u.old",
                &[&hashes, &bodies, &olds],
            )
            .await?;
        total += hashes.len() as u64;
        if (rows.len() as i64) < SEAL_BATCH {
            return Ok(total);
        }
    }
}

async fn seal_facts(client: &Client, seal: &Sealer) -> Result<u64> {
    let (mut after, mut total) = ((0i64, 0i64), 0u64);
    loop {
        let rows = client
            .query(
                "SELECT run_key, n, hash, body FROM facts WHERE (run_key, n) > ($1, $2) AND left(body, 1) <> '~' ORDER BY run_key, n LIMIT $3",
                &[&after.0, &after.1, &SEAL_BATCH],
            )
            .await?;
        let (mut keys, mut ns, mut bodies, mut olds) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for r in &rows {
            let (key, n, hash, body): (i64, i64, Vec<u8>, String) =
                (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?);
            after = (key, n);
            if let Some(h) = crate::hash::from_column(&hash) {
                bodies.push(seal.seal_text(Place::Fact(&h), &body)?.into_owned());
                keys.push(key);
                ns.push(n);
                olds.push(body);
            }
        }
        client
            .execute(
                "UPDATE facts f SET body = u.new FROM unnest($1::int8[], $2::int8[], $3::text[], $4::text[]) AS u(k, n, new, old)
                 WHERE f.run_key = u.k AND f.n = u.n AND f.body = u.old",
                &[&keys, &ns, &bodies, &olds],
            )
            .await?;
        total += keys.len() as u64;
        if (rows.len() as i64) < SEAL_BATCH {
            return Ok(total);
        }
    }
}

async fn seal_host(client: &Client, seal: &Sealer) -> Result<u64> {
    let (mut after, mut total) = ((0i64, 0i64), 0u64);
    loop {
        let rows = client
            .query(
                "SELECT run_key, seq, kind, head_hash, details FROM host_records WHERE (run_key, seq) > ($1, $2) AND left(details, 1) <> '~' ORDER BY run_key, seq LIMIT $3",
                &[&after.0, &after.1, &SEAL_BATCH],
            )
            .await?;
        let (mut keys, mut seqs, mut news, mut olds) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for r in &rows {
            let (key, seq, kind, head, details): (i64, i64, String, Vec<u8>, String) = (
                r.try_get(0)?,
                r.try_get(1)?,
                r.try_get(2)?,
                r.try_get(3)?,
                r.try_get(4)?,
            );
            after = (key, seq);
            news.push(
                seal.seal_text(Place::Host(&head, seq, &kind), &details)?
                    .into_owned(),
            );
            keys.push(key);
            seqs.push(seq);
            olds.push(details);
        }
        client
            .execute(
                "UPDATE host_records h SET details = u.new FROM unnest($1::int8[], $2::int8[], $3::text[], $4::text[]) AS u(k, s, new, old)
                 WHERE h.run_key = u.k AND h.seq = u.s AND h.details = u.old",
                &[&keys, &seqs, &news, &olds],
            )
            .await?;
        total += keys.len() as u64;
        if (rows.len() as i64) < SEAL_BATCH {
            return Ok(total);
        }
    }
}

async fn seal_memory(client: &Client, seal: &Sealer) -> Result<u64> {
    let (mut after, mut total) = ((String::new(), String::new()), 0u64);
    loop {
        let rows = client
            .query(
                "SELECT store, key, value FROM memory WHERE (store, key) > ($1, $2) AND left(value, 1) <> '~' ORDER BY store, key LIMIT $3",
                &[&after.0, &after.1, &SEAL_BATCH],
            )
            .await?;
        let (mut stores, mut keys, mut news, mut olds) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for r in &rows {
            let (store, key, value): (String, String, String) =
                (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?);
            news.push(
                seal.seal_text(Place::Memory(&store, &key), &value)?
                    .into_owned(),
            );
            after = (store.clone(), key.clone());
            stores.push(store);
            keys.push(key);
            olds.push(value);
        }
        client
            .execute(
                "UPDATE memory m SET value = u.new FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS u(s, k, new, old)
                 WHERE m.store = u.s AND m.key = u.k AND m.value = u.old",
                &[&stores, &keys, &news, &olds],
            )
            .await?;
        total += keys.len() as u64;
        if (rows.len() as i64) < SEAL_BATCH {
            return Ok(total);
        }
    }
}
