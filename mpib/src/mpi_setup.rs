//! Communicator setup between MPI ranks (feature `mpi`): every rank builds
//! one communicator per other rank, and the ranks exchange their records with
//! one all-to-all. For benchmarks and batch jobs launched with `mpirun`; the
//! TCP setup ([`crate::conn`]) is for services (and gives a liveness
//! channel, which this does not: here only QP errors tell of a dead peer).

use mlx5::device::Context;
use mpi::traits::{Communicator, CommunicatorCollectives};

use crate::comm::{Comm, Config, PendingComm};
use crate::error::SetupError;
use crate::info::CommInfo;

/// Bytes per record in the exchange (a JSON record, NUL-padded).
const RECORD: usize = 4096;

/// Connects one communicator on `devices` to every other rank of `comm`;
/// entry `r` of the result is the communicator with rank `r` (`None` for this
/// rank). Every rank must call it with the same configuration.
pub fn connect_all<C: Communicator>(
    comm: &C,
    devices: &[Context],
    cfg: &Config,
) -> Result<Vec<Option<Comm>>, SetupError> {
    let n = comm.size() as usize;
    let me = comm.rank() as usize;
    let mut pending: Vec<Option<PendingComm>> = Vec::with_capacity(n);
    let mut send = vec![0u8; n * RECORD];
    for (r, slot) in send.chunks_mut(RECORD).enumerate() {
        if r == me {
            pending.push(None);
            continue;
        }
        let p = PendingComm::new(devices, cfg)?;
        let json = serde_json::to_vec(p.info()).map_err(|e| SetupError::Peer(e.to_string()))?;
        if json.len() >= RECORD {
            return Err(SetupError::Config("communicator record too long".into()));
        }
        slot[..json.len()].copy_from_slice(&json);
        pending.push(Some(p));
    }
    let mut recv = vec![0u8; n * RECORD];
    comm.all_to_all_into(&send[..], &mut recv[..]);
    let mut out = Vec::with_capacity(n);
    for (r, (slot, p)) in recv.chunks(RECORD).zip(pending).enumerate() {
        let Some(p) = p else {
            out.push(None);
            continue;
        };
        let len = slot.iter().position(|&b| b == 0).unwrap_or(RECORD);
        let info: CommInfo = serde_json::from_slice(&slot[..len])
            .map_err(|e| SetupError::Peer(format!("record from rank {r}: {e}")))?;
        out.push(Some(p.connect(&info)?));
    }
    comm.barrier();
    Ok(out)
}
