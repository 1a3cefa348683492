//! What a worker does with the messages of its channel ([`ToWorker`]): a
//! new client's connection, a new map, a freeze or thaw for a hand-over,
//! records pulled for an import or a copy, and a priority pull's value.

use std::sync::atomic::AtomicBool;
use std::sync::mpsc::Sender;
use std::sync::Arc;

use copyrpc::transport::Transport;
use copyrpc::Waker;
use kvs_proto::ShardMap;

use super::huge_pages::Said;
use super::parked::{maps_due, settle, try_again};
use super::{OnAck, Serving};
use crate::bulk::PullError;
use crate::config::Config;
use crate::replication::copy_in::{Copies, CopyPull};
use crate::replication::slot_state::PullStart;
use crate::role::Role;
use crate::serving::intake::Whose;
use crate::threads::to_worker::{Frozen, ToWorker};

/// The worker's log target, the same for all its files: what operators
/// filter on (`log = "info,kvs_server::serving::worker=debug"`) and what
/// scripts look for.
const LOG: &str = "kvs_server::serving::worker";

impl<T: Transport, F: OnAck> Serving<T, F> {
    /// Takes what the worker's channel holds: new clients and maps, and
    /// what the control thread, the importers and the pulls sent.
    pub(super) fn take_messages(&mut self) {
        while let Ok(m) = self.incoming.try_recv() {
            self.on_message(m);
        }
    }

    /// Acts on one message of the worker's channel.
    fn on_message(&mut self, m: ToWorker) {
        match m {
            ToWorker::Connection(p, role) if self.drain_until.is_none() => self.connect(p, role),
            ToWorker::Connection(p, _) => p.refuse("the server is shutting down"),
            ToWorker::Map(m) => self.install(m),
            ToWorker::Freeze { first, end, round } => {
                self.h.frozen = Some(Frozen {
                    first,
                    end,
                    reported: false,
                    round,
                })
            }
            ToWorker::Thaw => self.h.frozen = None,
            ToWorker::EndRetention => self.h.end_retention(),
            ToWorker::Retain => self.h.retain(),
            ToWorker::Snapshot { ask } => {
                if let Some(l) = self.log.as_mut() {
                    if !l.request_snapshot(ask) {
                        tracing::info!(target: LOG, "worker {}: a snapshot is under way already", self.w);
                    }
                }
            }
            ToWorker::SourceFrozen { first, end } => self.h.source_frozen(first..end),
            // Pulled records go in between turns, a few at a time.
            ToWorker::Records { batch, taken } => self.intake.push(batch, Whose::Import, taken),
            ToWorker::CopyRecords {
                ticket,
                batch,
                taken,
            } => self.intake.push(batch, Whose::Copy(ticket), taken),
            ToWorker::CopyPulled { ticket, result } => {
                self.h.slot_state.pulled(&ticket, result, &mut self.h.store);
            }
            ToWorker::Pulled { slot, key, value } => self.on_pulled(slot, key, value),
        }
    }

    /// A new client: its connection is set up, tagged with its role (which
    /// its requests then carry), and watched (and, with `huge_pages`, where
    /// its rings are is said).
    fn connect(&mut self, p: copyrpc::conn::PendingConnection, role: Role) {
        let w = self.w;
        let before = if self.cfg.huge_pages {
            self.ctx.huge_page_rings()
        } else {
            0
        };
        match p.establish(&mut self.ctx, &self.answer) {
            Ok(c) => {
                // Tagged before any of its requests is taken.
                self.ctx.set_tag(c.endpoint(), role.tag());
                let rings = self.ctx.huge_page_rings().saturating_sub(before);
                match self
                    .cfg
                    .huge_pages
                    .then(|| self.huge.connected(rings))
                    .flatten()
                {
                    Some((Said::Info, l)) => tracing::info!(target: LOG, "{l}"),
                    Some((Said::Warning, l)) => tracing::warn!(target: LOG, "{l}"),
                    None => {}
                }
                if let Err((mut c, e)) = self.conns.insert(c) {
                    tracing::warn!(target: LOG, "worker {w}: a client's connection: {e}");
                    self.ctx.close(c.endpoint());
                    c.check(&mut self.ctx);
                    self.ctx.remove(c.endpoint());
                }
            }
            Err(e) => {
                tracing::warn!(target: LOG, "worker {w}: a client's setup failed: {e}")
            }
        }
    }

    /// Installs a new map: slots given away are held for their new owners,
    /// and what waited for it is handled again.
    fn install(&mut self, m: ShardMap) {
        let done = self.h.install(m);
        self.fwd.on_install(&mut self.ctx, &self.h.map);
        for (slot, recs) in done.given_away {
            self.source_slots.hold(slot, recs);
        }
        // Requests waiting for pulls of slots whose import ended, or that
        // moved on, are answered now.
        let h = &self.h;
        let parked = self
            .waiting
            .take(|p| !h.store.importing(p.slot) || done.imports_ended.contains(&p.slot));
        self.ops += settle(
            &mut self.ctx,
            &mut self.h,
            &mut self.fwd,
            parked,
            &mut self.out,
        );
        if !self.maps.is_empty() {
            maps_due(&mut self.ctx, &mut self.h, &mut self.maps, &mut self.out);
        }
    }

    /// A priority pull of `key` ended: its value goes in and the requests
    /// that waited for it are handled again (or, the pull failed, told to
    /// try again).
    fn on_pulled(
        &mut self,
        slot: u32,
        key: Vec<u8>,
        value: Result<Option<Vec<u8>>, Arc<PullError>>,
    ) {
        self.waiting.pulled(&key);
        let parked = self.waiting.take(|p| p.key() == key);
        match value {
            Ok(v) => {
                self.h.store.apply_pulled(slot, &key, v.as_deref());
                self.ops += settle(
                    &mut self.ctx,
                    &mut self.h,
                    &mut self.fwd,
                    parked,
                    &mut self.out,
                );
            }
            Err(why) => {
                let w = self.w;
                tracing::warn!(target: LOG, "worker {w}: a priority pull failed: {why}");
                for p in parked {
                    try_again(&mut self.ctx, p.handle, &mut self.out);
                }
            }
        }
    }
}

/// Starts the pull of the copy `p` names, from its primary's bulk port in
/// `map`; a primary the map does not have fails it at once.
pub(super) fn start_pull(
    p: PullStart,
    map: &ShardMap,
    cfg: &Config,
    rails: &[String],
    worker: (&Sender<ToWorker>, &Waker),
    copies: &Arc<Copies>,
    stop: &Arc<AtomicBool>,
) {
    let Some(m) = map.members().get(p.from.index()) else {
        let _ = worker.0.send(ToWorker::CopyPulled {
            ticket: p.begin.ticket,
            result: Err(crate::bulk::TransferError::NotInMap(p.from)),
        });
        return;
    };
    CopyPull {
        begin: p.begin,
        from: p.from,
        bulk: std::net::SocketAddr::new(m.addr.ip(), m.bulk_port),
        slots: map.slots(),
        worker: (worker.0.clone(), worker.1.clone()),
        cfg: cfg.clone(),
        rails: rails.to_vec(),
        copies: copies.clone(),
        stop: stop.clone(),
    }
    .spawn();
}
