//! This process among the driver processes: MPI ranks under `mpirun`
//! (feature `mpi`), else alone. Each rank drives its share; rank 0 embeds
//! the server when none is given and prints the merged report.

#[cfg(feature = "mpi")]
use ycsb_driver::measure::Measurements;
use ycsb_driver::properties::Properties;
use ycsb_driver::runner::PhaseResult;

use crate::{die, Command};

/// Gives this rank its share: `load` splits the records (by `insertstart`
/// and `insertcount`, as several Java clients are run), `run` the operations.
pub(crate) fn share_among_ranks(props: &mut Properties, cmd: Command, ranks: &Ranks) {
    let (r, n) = (ranks.rank as u64, ranks.size as u64);
    let get = |k: &str, d: u64| props.get_u64(k, d).unwrap_or_else(|e| die(&e));
    let split = |total: u64| ycsb_driver::workload::ops_for_thread(total, ranks.rank, ranks.size);
    let before = |total: u64| r * (total / n) + r.min(total % n);
    match cmd {
        Command::Load => {
            let records = get("recordcount", 0);
            let start = get("insertstart", 0);
            let total = get("insertcount", records.saturating_sub(start));
            props.set("insertstart", (start + before(total)).to_string());
            props.set("insertcount", split(total).to_string());
        }
        Command::Run => {
            let ops = get("operationcount", 0);
            props.set("operationcount", split(ops).to_string());
        }
    }
}

/// This process among the driver processes: MPI ranks under `mpirun` (feature
/// `mpi`), else alone.
pub(crate) struct Ranks {
    /// This rank.
    pub rank: usize,
    /// Ranks in all.
    pub size: usize,
    #[cfg(feature = "mpi")]
    world: Option<(
        mpi::environment::Universe,
        mpi::topology::SimpleCommunicator,
    )>,
}

impl Ranks {
    #[cfg(not(feature = "mpi"))]
    pub fn init() -> Ranks {
        Ranks { rank: 0, size: 1 }
    }

    #[cfg(feature = "mpi")]
    pub fn init() -> Ranks {
        use mpi::traits::Communicator;
        match mpi::initialize() {
            Some(u) => {
                let w = u.world();
                Ranks {
                    rank: w.rank() as usize,
                    size: w.size() as usize,
                    world: Some((u, w)),
                }
            }
            None => Ranks {
                rank: 0,
                size: 1,
                world: None,
            },
        }
    }

    pub fn barrier(&self) {
        #[cfg(feature = "mpi")]
        if let Some((_, w)) = &self.world {
            use mpi::traits::CommunicatorCollectives;
            w.barrier();
        }
    }

    /// Rank 0's embedded server (address, fabric), sent to every rank.
    #[allow(unused_variables)]
    pub fn broadcast_server(&self, mine: Option<(String, String)>) -> (String, String) {
        #[cfg(feature = "mpi")]
        if let Some((_, w)) = &self.world {
            use mpi::traits::{Communicator, Root};
            let mut buf = [0u8; 512];
            if let Some((a, f)) = &mine {
                let line = format!("{a}\n{f}");
                buf[..line.len()].copy_from_slice(line.as_bytes());
            }
            w.process_at_rank(0).broadcast_into(&mut buf[..]);
            let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
            let text = String::from_utf8_lossy(&buf[..end]).into_owned();
            let (a, f) = text.split_once('\n').unwrap_or((&text, ""));
            return (a.to_owned(), f.to_owned());
        }
        mine.unwrap_or_else(|| die(&"no embedded server to share"))
    }

    /// Rank 0 gets every rank's result merged, with the slowest rank's run
    /// time in ms; the other ranks get `None`.
    pub fn gather(&self, r: PhaseResult) -> Option<(PhaseResult, u64)> {
        let ms = r.runtime.as_millis().max(1) as u64;
        #[cfg(feature = "mpi")]
        if let Some((_, w)) = &self.world {
            use mpi::traits::{Communicator, Destination, Source};
            if self.rank != 0 {
                let mut b = r.measurements.to_bytes();
                b.extend_from_slice(&r.operations.to_le_bytes());
                b.extend_from_slice(&ms.to_le_bytes());
                w.process_at_rank(0).send(&b[..]);
                return None;
            }
            let mut all = r;
            let mut slowest = ms;
            for from in 1..self.size {
                let (b, _) = w.process_at_rank(from as i32).receive_vec::<u8>();
                if b.len() < 16 {
                    die(&format!("rank {from} sent a short result"));
                }
                let (m, tail) = b.split_at(b.len() - 16);
                let m = Measurements::from_bytes(m)
                    .unwrap_or_else(|e| die(&format!("rank {from}: {e}")));
                all.measurements.merge(&m);
                all.operations += u64::from_le_bytes(tail[..8].try_into().expect("8 bytes"));
                slowest = slowest.max(u64::from_le_bytes(tail[8..].try_into().expect("8 bytes")));
            }
            return Some((all, slowest));
        }
        Some((r, ms))
    }
}
