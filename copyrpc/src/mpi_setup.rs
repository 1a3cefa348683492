//! Connection setup between MPI ranks (feature `mpi`): every rank creates one
//! endpoint per other rank, and the ranks exchange their endpoint records with
//! one all-to-all. For benchmarks and batch jobs launched with `mpirun`; the
//! TCP setup ([`crate::conn`]) is for services.

use mpi::traits::{Communicator, CommunicatorCollectives};

use crate::context::{Context, EndpointId};
use crate::error::{CallFailed, SetupError};
use crate::info::EndpointInfo;
use crate::transport::Transport;

/// Bytes per record in the exchange (a JSON record, NUL-padded).
const RECORD: usize = 1024;

/// Connects one endpoint to every other rank of `comm`; entry `r` of the result
/// is the endpoint to rank `r` (`None` for this rank).
pub fn connect_all<C, U, F, T: Transport>(
    comm: &C,
    ctx: &mut Context<U, F, T>,
) -> Result<Vec<Option<EndpointId>>, SetupError>
where
    C: Communicator,
    F: FnMut(U, Result<&[u8], CallFailed>),
{
    let n = comm.size() as usize;
    let me = comm.rank() as usize;
    let mut eps = vec![None; n];
    let mut send = vec![0u8; n * RECORD];
    for (r, slot) in send.chunks_mut(RECORD).enumerate() {
        if r == me {
            continue;
        }
        let (ep, info) = ctx.create_endpoint()?;
        eps[r] = Some(ep);
        let json = serde_json::to_vec(&info).map_err(|e| SetupError::Invalid(e.to_string()))?;
        if json.len() >= RECORD {
            return Err(SetupError::Invalid("endpoint record too long".into()));
        }
        slot[..json.len()].copy_from_slice(&json);
    }
    let mut recv = vec![0u8; n * RECORD];
    comm.all_to_all_into(&send[..], &mut recv[..]);
    for (r, slot) in recv.chunks(RECORD).enumerate() {
        let Some(ep) = eps[r] else { continue };
        let len = slot.iter().position(|&b| b == 0).unwrap_or(RECORD);
        let info: EndpointInfo = serde_json::from_slice(&slot[..len])
            .map_err(|e| SetupError::Invalid(format!("record from rank {r}: {e}")))?;
        ctx.connect(ep, &info)?;
    }
    comm.barrier();
    Ok(eps)
}
