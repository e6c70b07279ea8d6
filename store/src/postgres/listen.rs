//! The live tail across processes: one dedicated, non-pooled connection
//! LISTENs on the store's channel and bumps the local heads for every
//! `run:n` the writers of any process NOTIFY inside their append
//! transactions (so a notification means a committed fact). The same
//! connection LISTENs on the worker queue's channel and hands its notes
//! to the queue's observers (see `workers`). ECOSYSTEM §3:
//! a pooled connection would drop notifications, and nothing is delivered
//! while disconnected — after reconnecting, every waiting tail is woken to
//! re-read the database.

use super::connect::describe;
use super::queue_notes::Observers;
use crate::api::HeadNote;
use crate::error::{Error, Result};
use crate::tail::Heads;
use crate::workers::QueueNote;
use std::sync::Arc;
use std::sync::mpsc::sync_channel;
use std::time::Duration;
use tokio::runtime::Handle;
use tokio_postgres::{AsyncMessage, Config, NoTls};

/// Wait between reconnection attempts.
const RETRY: Duration = Duration::from_secs(1);

/// The channels one store listens on.
pub(super) struct Channels {
    /// `flow_facts:<schema>`: `run:n` of each commit.
    pub facts: String,
    /// `flow_workers:<schema>`: the worker queue's notes.
    pub queue: String,
}

/// Starts the listener and waits until it is listening, so a store that
/// opened sees every fact committed after that.
pub(super) fn start(
    handle: &Handle,
    cfg: Config,
    channels: Channels,
    heads: Arc<Heads>,
    queue: Arc<Observers>,
) -> Result<()> {
    let (ready, ready_rx) = sync_channel::<Result<()>>(1);
    handle.spawn(async move {
        let mut ready = Some(ready);
        loop {
            let r = listen(&cfg, &channels, &heads, &queue, &mut ready).await;
            if let Some(tx) = ready.take() {
                // Failed before it ever listened: the open fails.
                let _ = tx.send(r);
                return;
            }
            tokio::time::sleep(RETRY).await;
        }
    });
    ready_rx.recv().map_err(|_| Error::WriterGone)?
}

/// One connection's life: LISTEN, then bump heads until it ends.
async fn listen(
    cfg: &Config,
    channels: &Channels,
    heads: &Heads,
    queue: &Observers,
    ready: &mut Option<std::sync::mpsc::SyncSender<Result<()>>>,
) -> Result<()> {
    let (client, mut conn) = cfg.connect(NoTls).await.map_err(|e| {
        Error::Unavailable(format!(
            "cannot connect to Postgres at {} to LISTEN: {e}",
            describe(cfg)
        ))
    })?;
    let sql = format!(
        "LISTEN \"{}\"; LISTEN \"{}\"",
        channels.facts, channels.queue
    );
    let mut subscribe = Box::pin(client.batch_execute(&sql));
    let mut listening = false;
    loop {
        tokio::select! {
            r = &mut subscribe, if !listening => {
                r?;
                listening = true;
                // Whatever was committed while no one listened is read by
                // the woken tails.
                heads.resync();
                queue.note(&QueueNote::Resync);
                if let Some(tx) = ready.take() {
                    let _ = tx.send(Ok(()));
                }
            }
            m = std::future::poll_fn(|cx| conn.poll_message(cx)) => match m {
                Some(Ok(AsyncMessage::Notification(n))) if n.channel() == channels.queue => {
                    if let Some(note) = super::queue_notes::parse_note(n.payload(), queue.origin()) {
                        queue.note(&note);
                    }
                }
                Some(Ok(AsyncMessage::Notification(n))) => {
                    if let Some((run, at)) = n.payload().rsplit_once(':')
                        && let Ok(at) = at.parse::<u64>()
                        && let Ok(run) = flow_abi::fact::RunId::parse(run)
                    {
                        heads.bump(&[HeadNote {
                            run,
                            n: at,
                            facts: Vec::new(),
                        }]);
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e.into()),
                None => return Err(Error::Unavailable("the LISTEN connection closed".into())),
            }
        }
    }
}
