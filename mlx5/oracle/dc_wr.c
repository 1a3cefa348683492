/* rdma-core's own DC WQE writer, for the hardware oracle test of ours
 * (tests/hw_dc.rs). Only verbs.h's and mlx5dv.h's inline work-request
 * functions are used: they call through the provider's function pointers in
 * the QP, so nothing here links to libibverbs (the crate loads it at run
 * time). */
#include <stdint.h>
#include <infiniband/verbs.h>
#include <infiniband/mlx5dv.h>

/* Builds one signaled RDMA WRITE of one SGE on a DCI created with
 * IBV_QP_EX_WITH_RDMA_WRITE, addressed to DCT `dctn` with `key` over `ah` on
 * DCI stream `stream`, and leaves it in the send queue, not rung: the caller
 * reads the WQE, then calls oracle_dc_wr_abort. Returns -1 (and starts
 * nothing) when the provider has no stream-aware DC address setter. */
int oracle_dc_wr_write(struct ibv_qp_ex *qpx, struct mlx5dv_qp_ex *mqpx, struct ibv_ah *ah,
		       uint32_t dctn, uint64_t key, uint16_t stream, uint32_t rkey,
		       uint64_t raddr, uint32_t lkey, uint64_t addr, uint32_t len)
{
	if (!mqpx->wr_set_dc_addr_stream)
		return -1;
	ibv_wr_start(qpx);
	qpx->wr_id = 1;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(qpx, rkey, raddr);
	mlx5dv_wr_set_dc_addr_stream(mqpx, ah, dctn, key, stream);
	ibv_wr_set_sge(qpx, lkey, addr, len);
	return 0;
}

/* Drops what oracle_dc_wr_write built: the producer index goes back, no
 * doorbell is rung. */
void oracle_dc_wr_abort(struct ibv_qp_ex *qpx)
{
	ibv_wr_abort(qpx);
}
