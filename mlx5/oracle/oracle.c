/*
 * rdma-core oracle for the mlx5::prm module (tests/oracle.rs).
 *
 * Everything here is computed by the C compiler from rdma-core's public header
 * <infiniband/mlx5dv.h> (Debian: libibverbs-dev) and the <infiniband/tm_types.h>
 * it includes: struct sizes and field offsets, enum values, and the header's
 * own inline helpers (mlx5dv_set_ctrl_seg, mlx5dv_set_data_seg,
 * mlx5dv_get_cqe_*). Only static inline functions of the header are used, so
 * nothing links against libibverbs.
 *
 * The few tag-matching constants libmlx5 keeps to itself (the TM segment's
 * opcodes and flags, the CQE's app and app_op values) are copied below from
 * rdma-core 44's providers/mlx5, with the functions that use them; their table
 * names carry a "provider:" prefix so the Rust side says which is which.
 *
 * build.rs compiles this file twice on x86 targets: once plainly (everything
 * but the SSE variant) and once with -DORACLE_X86_ONLY -mssse3 (only
 * oracle_x86_ctrl_seg, which tests/oracle.rs calls only after checking the CPU
 * at run time).
 */
#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <infiniband/mlx5dv.h>
#include <infiniband/tm_types.h>
#include <infiniband/verbs.h>

/* mlx5dv_set_ctrl_seg's arguments (tests/oracle.rs's OracleCtrl). */
struct oracle_ctrl {
	uint32_t qpn;
	uint32_t imm;
	uint16_t pi;
	uint8_t opcode;
	uint8_t opmod;
	uint8_t fm_ce_se;
	uint8_t ds;
	uint8_t signature;
};

#ifndef ORACLE_X86_ONLY

/* ------------------------------------------------------------------------ */
/* Tag-matching constants private to libmlx5                                  */
/* ------------------------------------------------------------------------ */

/* rdma-core 44, providers/mlx5/mlx5.h: the command of a struct
 * mlx5_wqe_tm_seg (set_tm_seg stores it as `op << 4`) and its flags. */
enum {
	ORACLE_MLX5_TM_OPCODE_NOP	= 0x00,
	ORACLE_MLX5_TM_OPCODE_APPEND	= 0x01,
	ORACLE_MLX5_TM_OPCODE_REMOVE	= 0x02,
};

enum {
	ORACLE_MLX5_SRQ_FLAG_TM_SW_CNT	= (1 << 6),
	ORACLE_MLX5_SRQ_FLAG_TM_CQE_REQ	= (1 << 7),
};

/* rdma-core 44, providers/mlx5/cq.c: struct mlx5_cqe64's app and app_op. */
enum {
	ORACLE_MLX5_CQE_APP_TAG_MATCHING = 1,
};

enum {
	ORACLE_MLX5_CQE_APP_OP_TM_CONSUMED = 0x1,
	ORACLE_MLX5_CQE_APP_OP_TM_EXPECTED = 0x2,
	ORACLE_MLX5_CQE_APP_OP_TM_UNEXPECTED = 0x3,
	ORACLE_MLX5_CQE_APP_OP_TM_NO_TAG = 0x4,
	ORACLE_MLX5_CQE_APP_OP_TM_APPEND = 0x5,
	ORACLE_MLX5_CQE_APP_OP_TM_REMOVE = 0x6,
	ORACLE_MLX5_CQE_APP_OP_TM_NOOP = 0x7,
	ORACLE_MLX5_CQE_APP_OP_TM_CONSUMED_SW_RDNV = 0x9,
	ORACLE_MLX5_CQE_APP_OP_TM_CONSUMED_MSG = 0xA,
	ORACLE_MLX5_CQE_APP_OP_TM_CONSUMED_MSG_SW_RDNV = 0xB,
	ORACLE_MLX5_CQE_APP_OP_TM_MSG_COMPLETION_CANCELED = 0xC,
};

/* ------------------------------------------------------------------------ */
/* Sizes, offsets and enum values                                            */
/* ------------------------------------------------------------------------ */

struct oracle_entry {
	const char *name;
	int64_t value;
};

#define SIZE(st) { "sizeof:" #st, (int64_t)sizeof(struct st) }
/* offsetof and sizeof of one member: "offsetof:st.f" and "fieldsize:st.f". */
#define FIELD(st, f)                                                        \
	{ "offsetof:" #st "." #f, (int64_t)offsetof(struct st, f) },           \
	{ "fieldsize:" #st "." #f, (int64_t)sizeof(((struct st *)0)->f) }
#define VALUE(v) { #v, (int64_t)(v) }
/* A libmlx5-private constant copied above: "provider:NAME". */
#define PROVIDER_VALUE(v) { "provider:" #v, (int64_t)(ORACLE_##v) }

static const struct oracle_entry oracle_entries[] = {
	/* struct mlx5_wqe_ctrl_seg */
	SIZE(mlx5_wqe_ctrl_seg),
	FIELD(mlx5_wqe_ctrl_seg, opmod_idx_opcode),
	FIELD(mlx5_wqe_ctrl_seg, qpn_ds),
	FIELD(mlx5_wqe_ctrl_seg, signature),
	FIELD(mlx5_wqe_ctrl_seg, dci_stream_channel_id),
	FIELD(mlx5_wqe_ctrl_seg, fm_ce_se),
	FIELD(mlx5_wqe_ctrl_seg, imm),

	/* struct mlx5_wqe_raddr_seg */
	SIZE(mlx5_wqe_raddr_seg),
	FIELD(mlx5_wqe_raddr_seg, raddr),
	FIELD(mlx5_wqe_raddr_seg, rkey),
	FIELD(mlx5_wqe_raddr_seg, reserved),

	/* struct mlx5_wqe_av (struct mlx5_wqe_datagram_seg holds one) */
	SIZE(mlx5_wqe_av),
	SIZE(mlx5_wqe_datagram_seg),
	FIELD(mlx5_wqe_av, key.dc_key),
	FIELD(mlx5_wqe_av, key.qkey.qkey),
	FIELD(mlx5_wqe_av, key.qkey.reserved),
	FIELD(mlx5_wqe_av, dqp_dct),
	FIELD(mlx5_wqe_av, stat_rate_sl),
	FIELD(mlx5_wqe_av, fl_mlid),
	FIELD(mlx5_wqe_av, rlid),
	FIELD(mlx5_wqe_av, reserved0),
	FIELD(mlx5_wqe_av, rmac),
	FIELD(mlx5_wqe_av, tclass),
	FIELD(mlx5_wqe_av, hop_limit),
	FIELD(mlx5_wqe_av, grh_gid_fl),
	FIELD(mlx5_wqe_av, rgid),

	/* struct mlx5_wqe_data_seg */
	SIZE(mlx5_wqe_data_seg),
	FIELD(mlx5_wqe_data_seg, byte_count),
	FIELD(mlx5_wqe_data_seg, lkey),
	FIELD(mlx5_wqe_data_seg, addr),

	/* struct mlx5_wqe_inl_data_seg */
	SIZE(mlx5_wqe_inl_data_seg),
	FIELD(mlx5_wqe_inl_data_seg, byte_count),

	/* struct mlx5_wqe_atomic_seg */
	SIZE(mlx5_wqe_atomic_seg),
	FIELD(mlx5_wqe_atomic_seg, swap_add),
	FIELD(mlx5_wqe_atomic_seg, compare),

	/* struct mlx5_wqe_srq_next_seg */
	SIZE(mlx5_wqe_srq_next_seg),
	FIELD(mlx5_wqe_srq_next_seg, rsvd0),
	FIELD(mlx5_wqe_srq_next_seg, next_wqe_index),
	FIELD(mlx5_wqe_srq_next_seg, signature),
	FIELD(mlx5_wqe_srq_next_seg, rsvd1),

	/* struct mlx5_cqe64 (the first 32 bytes are a union; these are the
	 * members of its anonymous struct) */
	SIZE(mlx5_cqe64),
	FIELD(mlx5_cqe64, rsvd0),
	FIELD(mlx5_cqe64, wqe_id),
	FIELD(mlx5_cqe64, rsvd4),
	FIELD(mlx5_cqe64, ml_path),
	FIELD(mlx5_cqe64, rsvd20),
	FIELD(mlx5_cqe64, slid),
	FIELD(mlx5_cqe64, flags_rqpn),
	FIELD(mlx5_cqe64, hds_ip_ext),
	FIELD(mlx5_cqe64, l4_hdr_type_etc),
	FIELD(mlx5_cqe64, vlan_info),
	FIELD(mlx5_cqe64, srqn_uidx),
	FIELD(mlx5_cqe64, imm_inval_pkey),
	FIELD(mlx5_cqe64, app),
	FIELD(mlx5_cqe64, app_op),
	FIELD(mlx5_cqe64, app_info),
	FIELD(mlx5_cqe64, byte_cnt),
	FIELD(mlx5_cqe64, timestamp),
	FIELD(mlx5_cqe64, sop_drop_qpn),
	FIELD(mlx5_cqe64, wqe_counter),
	FIELD(mlx5_cqe64, signature),
	FIELD(mlx5_cqe64, op_own),

	/* The tag-matching forms of struct mlx5_cqe64's leading union */
	FIELD(mlx5_cqe64, tm_cqe),
	FIELD(mlx5_cqe64, tm_cqe.success),
	FIELD(mlx5_cqe64, tm_cqe.hw_phase_cnt),
	FIELD(mlx5_cqe64, tm_cqe.rsvd0),
	FIELD(mlx5_cqe64, tmh),
	FIELD(mlx5_cqe64, tmh.opcode),
	FIELD(mlx5_cqe64, tmh.reserved),
	FIELD(mlx5_cqe64, tmh.app_ctx),
	FIELD(mlx5_cqe64, tmh.tag),

	/* struct mlx5_tm_cqe */
	SIZE(mlx5_tm_cqe),
	FIELD(mlx5_tm_cqe, success),
	FIELD(mlx5_tm_cqe, hw_phase_cnt),
	FIELD(mlx5_tm_cqe, rsvd0),

	/* struct mlx5_wqe_tm_seg */
	SIZE(mlx5_wqe_tm_seg),
	FIELD(mlx5_wqe_tm_seg, opcode),
	FIELD(mlx5_wqe_tm_seg, flags),
	FIELD(mlx5_wqe_tm_seg, index),
	FIELD(mlx5_wqe_tm_seg, rsvd0),
	FIELD(mlx5_wqe_tm_seg, sw_cnt),
	FIELD(mlx5_wqe_tm_seg, rsvd1),
	FIELD(mlx5_wqe_tm_seg, append_tag),
	FIELD(mlx5_wqe_tm_seg, append_mask),

	/* struct ibv_tmh, struct ibv_rvh (infiniband/tm_types.h) */
	SIZE(ibv_tmh),
	FIELD(ibv_tmh, opcode),
	FIELD(ibv_tmh, reserved),
	FIELD(ibv_tmh, app_ctx),
	FIELD(ibv_tmh, tag),
	SIZE(ibv_rvh),
	FIELD(ibv_rvh, va),
	FIELD(ibv_rvh, rkey),
	FIELD(ibv_rvh, len),

	/* struct mlx5_err_cqe */
	SIZE(mlx5_err_cqe),
	FIELD(mlx5_err_cqe, rsvd0),
	FIELD(mlx5_err_cqe, srqn),
	FIELD(mlx5_err_cqe, rsvd1),
	FIELD(mlx5_err_cqe, vendor_err_synd),
	FIELD(mlx5_err_cqe, syndrome),
	FIELD(mlx5_err_cqe, s_wqe_opcode_qpn),
	FIELD(mlx5_err_cqe, wqe_counter),
	FIELD(mlx5_err_cqe, signature),
	FIELD(mlx5_err_cqe, op_own),

	/* Send WQE opcodes */
	VALUE(MLX5_OPCODE_NOP),
	VALUE(MLX5_OPCODE_SEND_INVAL),
	VALUE(MLX5_OPCODE_RDMA_WRITE),
	VALUE(MLX5_OPCODE_RDMA_WRITE_IMM),
	VALUE(MLX5_OPCODE_SEND),
	VALUE(MLX5_OPCODE_SEND_IMM),
	VALUE(MLX5_OPCODE_RDMA_READ),
	VALUE(MLX5_OPCODE_ATOMIC_CS),
	VALUE(MLX5_OPCODE_ATOMIC_FA),
	VALUE(MLX5_OPCODE_ATOMIC_MASKED_CS),
	VALUE(MLX5_OPCODE_ATOMIC_MASKED_FA),
	VALUE(MLX5_OPCODE_LOCAL_INVAL),
	VALUE(MLX5_OPCODE_TAG_MATCHING),

	/* CQE opcodes */
	VALUE(MLX5_CQE_REQ),
	VALUE(MLX5_CQE_RESP_WR_IMM),
	VALUE(MLX5_CQE_RESP_SEND),
	VALUE(MLX5_CQE_RESP_SEND_IMM),
	VALUE(MLX5_CQE_RESP_SEND_INV),
	VALUE(MLX5_CQE_RESIZE_CQ),
	VALUE(MLX5_CQE_NO_PACKET),
	VALUE(MLX5_CQE_SIG_ERR),
	VALUE(MLX5_CQE_REQ_ERR),
	VALUE(MLX5_CQE_RESP_ERR),
	VALUE(MLX5_CQE_INVALID),

	/* Error CQE syndromes */
	VALUE(MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR),
	VALUE(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR),
	VALUE(MLX5_CQE_SYNDROME_LOCAL_PROT_ERR),
	VALUE(MLX5_CQE_SYNDROME_WR_FLUSH_ERR),
	VALUE(MLX5_CQE_SYNDROME_MW_BIND_ERR),
	VALUE(MLX5_CQE_SYNDROME_BAD_RESP_ERR),
	VALUE(MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR),
	VALUE(MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR),
	VALUE(MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR),
	VALUE(MLX5_CQE_SYNDROME_REMOTE_OP_ERR),
	VALUE(MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR),
	VALUE(MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR),
	VALUE(MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR),

	/* Control segment flags */
	VALUE(MLX5_WQE_CTRL_CQ_UPDATE),
	VALUE(MLX5_WQE_CTRL_SOLICITED),
	VALUE(MLX5_WQE_CTRL_FENCE),
	VALUE(MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE),

	/* CQE op_own / format */
	VALUE(MLX5_CQE_OWNER_MASK),
	VALUE(MLX5_INLINE_SCATTER_32),
	VALUE(MLX5_INLINE_SCATTER_64),

	/* Mini CQE responder formats */
	VALUE(MLX5DV_CQE_RES_FORMAT_HASH),
	VALUE(MLX5DV_CQE_RES_FORMAT_CSUM),
	VALUE(MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX),

	/* Tag matching: the header's, then libmlx5's own */
	VALUE(IBV_TMH_NO_TAG),
	VALUE(IBV_TMH_RNDV),
	VALUE(IBV_TMH_FIN),
	VALUE(IBV_TMH_EAGER),
	VALUE(MLX5_TMC_SUCCESS),
	PROVIDER_VALUE(MLX5_TM_OPCODE_NOP),
	PROVIDER_VALUE(MLX5_TM_OPCODE_APPEND),
	PROVIDER_VALUE(MLX5_TM_OPCODE_REMOVE),
	PROVIDER_VALUE(MLX5_SRQ_FLAG_TM_SW_CNT),
	PROVIDER_VALUE(MLX5_SRQ_FLAG_TM_CQE_REQ),
	PROVIDER_VALUE(MLX5_CQE_APP_TAG_MATCHING),
	PROVIDER_VALUE(MLX5_CQE_APP_OP_TM_CONSUMED),
	PROVIDER_VALUE(MLX5_CQE_APP_OP_TM_EXPECTED),
	PROVIDER_VALUE(MLX5_CQE_APP_OP_TM_UNEXPECTED),
	PROVIDER_VALUE(MLX5_CQE_APP_OP_TM_NO_TAG),
	PROVIDER_VALUE(MLX5_CQE_APP_OP_TM_APPEND),
	PROVIDER_VALUE(MLX5_CQE_APP_OP_TM_REMOVE),
	PROVIDER_VALUE(MLX5_CQE_APP_OP_TM_NOOP),
	PROVIDER_VALUE(MLX5_CQE_APP_OP_TM_CONSUMED_SW_RDNV),
	PROVIDER_VALUE(MLX5_CQE_APP_OP_TM_CONSUMED_MSG),
	PROVIDER_VALUE(MLX5_CQE_APP_OP_TM_CONSUMED_MSG_SW_RDNV),
	PROVIDER_VALUE(MLX5_CQE_APP_OP_TM_MSG_COMPLETION_CANCELED),

	/* Miscellaneous */
	VALUE(MLX5_EXTENDED_UD_AV),
	VALUE(MLX5_INLINE_SEG),
	VALUE(MLX5_INVALID_LKEY),
	VALUE(MLX5_SEND_WQE_BB),
	VALUE(MLX5_SEND_WQE_SHIFT),
	VALUE(MLX5_RCV_DBR),
	VALUE(MLX5_SND_DBR),
	VALUE(MLX5_CQ_DOORBELL),
	VALUE(MLX5_CQ_DB_REQ_NOT_SOL),
	VALUE(MLX5_CQ_DB_REQ_NOT),
};

/* Points *out at the table and returns its length. */
size_t oracle_table(const struct oracle_entry **out)
{
	*out = oracle_entries;
	return sizeof(oracle_entries) / sizeof(oracle_entries[0]);
}

/* ------------------------------------------------------------------------ */
/* WQE segment writers                                                       */
/* ------------------------------------------------------------------------ */

/* mlx5dv_set_ctrl_seg; `imm` is stored as passed (raw, not byte-swapped). */
void oracle_ctrl_seg(uint8_t out[16], const struct oracle_ctrl *a)
{
	struct mlx5_wqe_ctrl_seg seg;

	memcpy(&seg, out, sizeof(seg));
	mlx5dv_set_ctrl_seg(&seg, a->pi, a->opcode, a->opmod, a->qpn,
			    a->fm_ce_se, a->ds, a->signature, a->imm);
	memcpy(out, &seg, sizeof(seg));
}

/* The control segment's DCI stream id, as providers/mlx5
 * mlx5_send_wr_set_dc_addr_stream writes it (that writer needs a device). */
void oracle_ctrl_stream(uint8_t out[16], uint16_t stream_id)
{
	struct mlx5_wqe_ctrl_seg seg;

	memcpy(&seg, out, sizeof(seg));
	seg.dci_stream_channel_id = htobe16(stream_id);
	memcpy(out, &seg, sizeof(seg));
}

/* mlx5dv_set_dgram_seg's arguments, in one struct (tests/oracle.rs
 * OracleAv mirrors it). */
struct oracle_av {
	uint64_t key;
	uint32_t dqp_dct;
	uint32_t grh_gid_fl;
	uint16_t rlid;
	uint8_t ext;
	uint8_t stat_rate_sl;
	uint8_t fl_mlid;
	uint8_t tclass;
	uint8_t hop_limit;
	uint8_t rmac[6];
	uint8_t rgid[16];
};

/* mlx5dv_set_dgram_seg. */
void oracle_dgram_seg(uint8_t out[48], const struct oracle_av *a)
{
	struct mlx5_wqe_datagram_seg seg;
	uint8_t rmac[6], rgid[16];

	memcpy(rmac, a->rmac, sizeof(rmac));
	memcpy(rgid, a->rgid, sizeof(rgid));
	memcpy(&seg, out, sizeof(seg));
	mlx5dv_set_dgram_seg(&seg, a->key, a->dqp_dct, a->ext, a->stat_rate_sl,
			     a->fl_mlid, a->rlid, rmac, a->tclass, a->hop_limit,
			     a->grh_gid_fl, rgid);
	memcpy(out, &seg, sizeof(seg));
}

/* mlx5dv_set_data_seg. */
void oracle_data_seg(uint8_t out[16], uint32_t length, uint32_t lkey,
		     uint64_t addr)
{
	struct mlx5_wqe_data_seg seg;

	memcpy(&seg, out, sizeof(seg));
	mlx5dv_set_data_seg(&seg, length, lkey, (uintptr_t)addr);
	memcpy(out, &seg, sizeof(seg));
}

/* Remote address segment, as rdma-core's providers/mlx5 set_raddr_seg. */
void oracle_raddr_seg(uint8_t out[16], uint64_t raddr, uint32_t rkey)
{
	struct mlx5_wqe_raddr_seg seg;

	memcpy(&seg, out, sizeof(seg));
	seg.raddr = htobe64(raddr);
	seg.rkey = htobe32(rkey);
	seg.reserved = 0;
	memcpy(out, &seg, sizeof(seg));
}

/* Atomic segment (compare-and-swap / fetch-and-add operands). */
void oracle_atomic_seg(uint8_t out[16], uint64_t swap_add, uint64_t compare)
{
	struct mlx5_wqe_atomic_seg seg;

	memcpy(&seg, out, sizeof(seg));
	seg.swap_add = htobe64(swap_add);
	seg.compare = htobe64(compare);
	memcpy(out, &seg, sizeof(seg));
}

/* Inline data segment header, as providers/mlx5 set_data_inl_seg. */
void oracle_inline_seg(uint8_t out[4], uint32_t len)
{
	struct mlx5_wqe_inl_data_seg seg;

	memcpy(&seg, out, sizeof(seg));
	seg.byte_count = htobe32(len | MLX5_INLINE_SEG);
	memcpy(out, &seg, sizeof(seg));
}

/* SRQ next segment, as providers/mlx5 does when it links an SRQ's WQEs:
 * all zero but next_wqe_index. */
void oracle_srq_next_seg(uint8_t out[16], uint16_t next_wqe_index)
{
	struct mlx5_wqe_srq_next_seg seg;

	memset(&seg, 0, sizeof(seg));
	seg.next_wqe_index = htobe16(next_wqe_index);
	memcpy(out, &seg, sizeof(seg));
}

/* ------------------------------------------------------------------------ */
/* Tag matching: the wire headers and the command QP's WQE                    */
/* ------------------------------------------------------------------------ */

/* struct ibv_tmh, as a sender fills it: the reserved bytes zero ("must be
 * zero", tm_types.h), the user data and tag big-endian as declared. */
void oracle_tmh(uint8_t out[16], uint8_t opcode, uint32_t app_ctx, uint64_t tag)
{
	struct ibv_tmh h;

	memcpy(&h, out, sizeof(h));
	h.opcode = opcode;
	memset(h.reserved, 0, sizeof(h.reserved));
	h.app_ctx = htobe32(app_ctx);
	h.tag = htobe64(tag);
	memcpy(out, &h, sizeof(h));
}

/* struct ibv_rvh. */
void oracle_rvh(uint8_t out[16], uint64_t va, uint32_t rkey, uint32_t len)
{
	struct ibv_rvh h;

	memcpy(&h, out, sizeof(h));
	h.va = htobe64(va);
	h.rkey = htobe32(rkey);
	h.len = htobe32(len);
	memcpy(out, &h, sizeof(h));
}

/* One tag-list operation (tests/oracle.rs's OracleTmOp): what
 * ibv_post_srq_ops takes in a struct ibv_ops_wr, plus the list index libmlx5
 * picks and the command QP's state. */
struct oracle_tm_op {
	uint64_t tag;
	uint64_t mask;
	uint64_t sge_addr;
	uint32_t sge_length;
	uint32_t sge_lkey;
	uint32_t unexpected_cnt;
	uint32_t qpn;
	uint16_t index;
	uint16_t cur_post;
	uint8_t op;		/* ORACLE_MLX5_TM_OPCODE_* */
	uint8_t signaled;	/* IBV_OPS_SIGNALED */
	uint8_t sync;		/* IBV_OPS_TM_SYNC */
	uint8_t num_sge;
};

static void oracle_ops_wr(struct ibv_ops_wr *wr, struct ibv_sge *sge,
			  const struct oracle_tm_op *a)
{
	memset(wr, 0, sizeof(*wr));
	wr->flags = (a->signaled ? IBV_OPS_SIGNALED : 0) |
		    (a->sync ? IBV_OPS_TM_SYNC : 0);
	wr->tm.unexpected_cnt = a->unexpected_cnt;
	wr->tm.add.tag = a->tag;
	wr->tm.add.mask = a->mask;
	sge->addr = a->sge_addr;
	sge->length = a->sge_length;
	sge->lkey = a->sge_lkey;
	wr->tm.add.sg_list = sge;
	wr->tm.add.num_sge = a->num_sge;
}

/* rdma-core 44's set_tm_seg (providers/mlx5/qp.c), statement for statement. */
static void oracle_set_tm_seg(struct mlx5_wqe_tm_seg *tmseg, int op,
			      struct ibv_ops_wr *wr, int index)
{
	tmseg->flags = 0;
	if (wr->flags & IBV_OPS_SIGNALED)
		tmseg->flags |= ORACLE_MLX5_SRQ_FLAG_TM_CQE_REQ;
	if (wr->flags & IBV_OPS_TM_SYNC) {
		tmseg->flags |= ORACLE_MLX5_SRQ_FLAG_TM_SW_CNT;
		tmseg->sw_cnt = htobe16(wr->tm.unexpected_cnt);
	}
	tmseg->opcode = op << 4;
	if (op == ORACLE_MLX5_TM_OPCODE_NOP)
		return;
	tmseg->index = htobe16(index);
	if (op == ORACLE_MLX5_TM_OPCODE_REMOVE)
		return;
	tmseg->append_tag = htobe64(wr->tm.add.tag);
	tmseg->append_mask = htobe64(wr->tm.add.mask);
}

/* The TM segment set_tm_seg writes, over whatever `out` holds (it leaves
 * the bytes a command does not use as they were). */
void oracle_tm_seg(uint8_t out[32], const struct oracle_tm_op *a)
{
	struct mlx5_wqe_tm_seg seg;
	struct ibv_ops_wr wr;
	struct ibv_sge sge;

	oracle_ops_wr(&wr, &sge, a);
	memcpy(&seg, out, sizeof(seg));
	oracle_set_tm_seg(&seg, a->op, &wr, a->index);
	memcpy(out, &seg, sizeof(seg));
}

/* One WQE of rdma-core 44's mlx5_post_srq_ops (providers/mlx5/qp.c): the
 * control segment, the TM segment and, for an append, the data segment (the
 * end-of-list one, set_data_ptr_seg_end, for an empty buffer), over `out`
 * (a 64-byte basic block). Returns the WQE's size in 16-byte units. */
unsigned oracle_tm_wqe(uint8_t out[64], const struct oracle_tm_op *a)
{
	struct mlx5_wqe_ctrl_seg ctrl;
	struct mlx5_wqe_tm_seg tm;
	struct mlx5_wqe_data_seg data;
	struct ibv_ops_wr wr;
	struct ibv_sge sge;
	uint32_t zero = 0;
	unsigned size;

	oracle_ops_wr(&wr, &sge, a);
	memcpy(&ctrl, out, sizeof(ctrl));
	memcpy(&tm, out + 16, sizeof(tm));
	memcpy(&data, out + 48, sizeof(data));

	/* *(uint32_t *)(seg + 8) = 0: signature, stream id and fm_ce_se. */
	memcpy((uint8_t *)&ctrl + 8, &zero, sizeof(zero));
	ctrl.imm = 0;
	ctrl.fm_ce_se = 0;
	size = sizeof(ctrl) / 16;

	oracle_set_tm_seg(&tm, a->op, &wr, a->index);
	size += sizeof(tm) / 16;
	if (a->op == ORACLE_MLX5_TM_OPCODE_APPEND) {
		if (wr.tm.add.num_sge && wr.tm.add.sg_list->length) {
			/* set_data_ptr_seg(seg, sg_list, 0) */
			data.byte_count = htobe32(wr.tm.add.sg_list->length);
			data.lkey = htobe32(wr.tm.add.sg_list->lkey);
			data.addr = htobe64(wr.tm.add.sg_list->addr);
		} else {
			/* set_data_ptr_seg_end */
			data.byte_count = 0;
			data.lkey = htobe32(MLX5_INVALID_LKEY);
			data.addr = 0;
		}
		size += sizeof(data) / 16;
	}

	ctrl.opmod_idx_opcode = htobe32(MLX5_OPCODE_TAG_MATCHING |
					((a->cur_post & 0xffff) << 8));
	ctrl.qpn_ds = htobe32(size | (a->qpn << 8));

	memcpy(out, &ctrl, sizeof(ctrl));
	memcpy(out + 16, &tm, sizeof(tm));
	memcpy(out + 48, &data, sizeof(data));
	return size;
}

/* What libmlx5 makes of a tag-matching CQE's app_op (rdma-core 44,
 * providers/mlx5/cq.c), one bit per finding (tests/oracle.rs mirrors them). */
enum {
	TM_NAMES_TAG = 1 << 0,		/* handle_tag_matching: tm_list[app_info] */
	TM_ENDS_TAG = 1 << 1,		/* ... and mlx5_cqe_app_op_tm_is_complete */
	TM_RNDV_INCOMPLETE = 1 << 2,	/* status IBV_WC_TM_RNDV_INCOMPLETE */
	TM_LIST_OP = 1 << 3,		/* a command QP's completion */
	TM_SRQ_WQE = 1 << 4,		/* an SRQ WQE at wqe_counter */
	TM_WC_MATCH = 1 << 5,		/* mlx5_cq_read_wc_flags: IBV_WC_TM_MATCH */
	TM_WC_DATA_VALID = 1 << 6,	/* ...: IBV_WC_TM_DATA_VALID */
};

/* mlx5_cqe_app_op_tm_is_complete. */
static int oracle_tm_is_complete(int op)
{
	return op != ORACLE_MLX5_CQE_APP_OP_TM_CONSUMED &&
	       op != ORACLE_MLX5_CQE_APP_OP_TM_CONSUMED_SW_RDNV;
}

/* The switches of handle_tag_matching and mlx5_cq_read_wc_flags over
 * app_op, their case lists as in rdma-core 44. */
uint32_t oracle_tm_app_op(uint8_t app_op)
{
	uint32_t bits = 0;

	switch (app_op) {
	case ORACLE_MLX5_CQE_APP_OP_TM_CONSUMED_MSG_SW_RDNV:
	case ORACLE_MLX5_CQE_APP_OP_TM_CONSUMED_SW_RDNV:
	case ORACLE_MLX5_CQE_APP_OP_TM_MSG_COMPLETION_CANCELED:
		bits |= TM_RNDV_INCOMPLETE;
		__attribute__((fallthrough));
	case ORACLE_MLX5_CQE_APP_OP_TM_CONSUMED_MSG:
	case ORACLE_MLX5_CQE_APP_OP_TM_CONSUMED:
	case ORACLE_MLX5_CQE_APP_OP_TM_EXPECTED:
		bits |= TM_NAMES_TAG;
		if (oracle_tm_is_complete(app_op))
			bits |= TM_ENDS_TAG;
		break;
	case ORACLE_MLX5_CQE_APP_OP_TM_REMOVE:
	case ORACLE_MLX5_CQE_APP_OP_TM_APPEND:
	case ORACLE_MLX5_CQE_APP_OP_TM_NOOP:
		bits |= TM_LIST_OP;
		break;
	case ORACLE_MLX5_CQE_APP_OP_TM_UNEXPECTED:
	case ORACLE_MLX5_CQE_APP_OP_TM_NO_TAG:
		bits |= TM_SRQ_WQE;
		break;
	}

	switch (app_op) {
	case ORACLE_MLX5_CQE_APP_OP_TM_CONSUMED_MSG_SW_RDNV:
	case ORACLE_MLX5_CQE_APP_OP_TM_CONSUMED_MSG:
	case ORACLE_MLX5_CQE_APP_OP_TM_MSG_COMPLETION_CANCELED:
		bits |= TM_WC_MATCH | TM_WC_DATA_VALID;
		break;
	case ORACLE_MLX5_CQE_APP_OP_TM_CONSUMED_SW_RDNV:
	case ORACLE_MLX5_CQE_APP_OP_TM_CONSUMED:
		bits |= TM_WC_MATCH;
		break;
	case ORACLE_MLX5_CQE_APP_OP_TM_EXPECTED:
		bits |= TM_WC_DATA_VALID;
		break;
	}
	return bits;
}

/* ------------------------------------------------------------------------ */
/* CQ arm                                                                     */
/* ------------------------------------------------------------------------ */

/* The doorbell-record index of the arm word: rdma-core's providers/mlx5
 * (MLX5_CQ_ARM_DB), not in the public header. */
enum { ORACLE_MLX5_CQ_ARM_DB = 1 };

/* rdma-core's mlx5_arm_cq (providers/mlx5/cq.c, rdma-core 44), statement for
 * statement, with the CQ reduced to the fields it reads (arm_sn, cons_index,
 * cqn, dbrec) and the context's CQ UAR page passed in: it writes the arm word
 * into dbrec[MLX5_CQ_ARM_DB] and the 64-bit doorbell, big-endian
 * (mmio_write64_be of htobe64), at uar + MLX5_CQ_DOORBELL. The command and
 * doorbell offset are the header's MLX5_CQ_DB_REQ_NOT(_SOL) and
 * MLX5_CQ_DOORBELL. */
void oracle_arm_cq(uint32_t dbrec[2], uint8_t *uar, uint32_t arm_sn,
		   uint32_t cons_index, uint32_t cqn, int solicited)
{
	uint64_t doorbell;
	uint64_t be;
	uint32_t sn;
	uint32_t ci;
	uint32_t cmd;

	sn  = arm_sn & 3;
	ci  = cons_index & 0xffffff;
	cmd = solicited ? MLX5_CQ_DB_REQ_NOT_SOL : MLX5_CQ_DB_REQ_NOT;

	doorbell = sn << 28 | cmd | ci;
	doorbell <<= 32;
	doorbell |= cqn;

	dbrec[ORACLE_MLX5_CQ_ARM_DB] = htobe32(sn << 28 | cmd | ci);

	/* mmio_write64_be(ctx->cq_uar_reg + MLX5_CQ_DOORBELL, htobe64(doorbell)):
	 * one 64-bit store of the big-endian value. */
	be = htobe64(doorbell);
	memcpy(uar + MLX5_CQ_DOORBELL, &be, sizeof(be));
}

/* ------------------------------------------------------------------------ */
/* CQE readers                                                               */
/* ------------------------------------------------------------------------ */

/* Indices into oracle_cqe64's output; tests/oracle.rs mirrors them. */
enum {
	CQE64_OWNER,		/* mlx5dv_get_cqe_owner */
	CQE64_SE,		/* mlx5dv_get_cqe_se */
	CQE64_FORMAT,		/* mlx5dv_get_cqe_format */
	CQE64_OPCODE,		/* mlx5dv_get_cqe_opcode */
	CQE64_OP_OWN,
	CQE64_SIGNATURE,
	CQE64_WQE_COUNTER,
	CQE64_BYTE_CNT,
	CQE64_IMM_INVAL_PKEY,
	CQE64_SRQN_UIDX,
	CQE64_SRQN,		/* srqn_uidx & 0xffffff */
	CQE64_SOP_DROP_QPN,
	CQE64_QPN,		/* sop_drop_qpn & 0xffffff */
	CQE64_S_WQE_OPCODE,	/* sop_drop_qpn >> 24 */
	CQE64_TIMESTAMP,
	CQE64_WQE_ID,
	CQE64_ML_PATH,
	CQE64_SLID,
	CQE64_FLAGS_RQPN,
	CQE64_HDS_IP_EXT,
	CQE64_L4_HDR_TYPE_ETC,
	CQE64_VLAN_INFO,
	CQE64_APP,
	CQE64_APP_OP,
	CQE64_APP_INFO,
	CQE64_IS_TM,		/* app == MLX5_CQE_APP_TAG_MATCHING */
	CQE64_TM_SUCCESS,	/* tm_cqe.success */
	CQE64_TM_SUCCEEDED,	/* tm_cqe.success & MLX5_TMC_SUCCESS */
	CQE64_TM_HW_PHASE_CNT,	/* tm_cqe.hw_phase_cnt */
	CQE64_TMH_OPCODE,	/* tmh.opcode */
	CQE64_TMH_APP_CTX,	/* tmh.app_ctx (ibv_wc_tm_info.priv) */
	CQE64_TMH_TAG,		/* tmh.tag (ibv_wc_tm_info.tag) */
	CQE64_NFIELDS
};

/* Returns the number of values oracle_cqe64 writes. */
size_t oracle_cqe64_nfields(void)
{
	return CQE64_NFIELDS;
}

/* Decodes a 64-byte CQE through struct mlx5_cqe64 and the mlx5dv_get_cqe_*
 * helpers. */
void oracle_cqe64(const uint8_t in[64], uint64_t out[CQE64_NFIELDS])
{
	struct mlx5_cqe64 cqe;

	memcpy(&cqe, in, sizeof(cqe));
	out[CQE64_OWNER] = mlx5dv_get_cqe_owner(&cqe);
	out[CQE64_SE] = mlx5dv_get_cqe_se(&cqe);
	out[CQE64_FORMAT] = mlx5dv_get_cqe_format(&cqe);
	out[CQE64_OPCODE] = mlx5dv_get_cqe_opcode(&cqe);
	out[CQE64_OP_OWN] = cqe.op_own;
	out[CQE64_SIGNATURE] = cqe.signature;
	out[CQE64_WQE_COUNTER] = be16toh(cqe.wqe_counter);
	out[CQE64_BYTE_CNT] = be32toh(cqe.byte_cnt);
	out[CQE64_IMM_INVAL_PKEY] = be32toh(cqe.imm_inval_pkey);
	out[CQE64_SRQN_UIDX] = be32toh(cqe.srqn_uidx);
	out[CQE64_SRQN] = be32toh(cqe.srqn_uidx) & 0xffffff;
	out[CQE64_SOP_DROP_QPN] = be32toh(cqe.sop_drop_qpn);
	out[CQE64_QPN] = be32toh(cqe.sop_drop_qpn) & 0xffffff;
	out[CQE64_S_WQE_OPCODE] = be32toh(cqe.sop_drop_qpn) >> 24;
	out[CQE64_TIMESTAMP] = be64toh(cqe.timestamp);
	out[CQE64_WQE_ID] = be16toh(cqe.wqe_id);
	out[CQE64_ML_PATH] = cqe.ml_path;
	out[CQE64_SLID] = be16toh(cqe.slid);
	out[CQE64_FLAGS_RQPN] = be32toh(cqe.flags_rqpn);
	out[CQE64_HDS_IP_EXT] = cqe.hds_ip_ext;
	out[CQE64_L4_HDR_TYPE_ETC] = cqe.l4_hdr_type_etc;
	out[CQE64_VLAN_INFO] = be16toh(cqe.vlan_info);
	out[CQE64_APP] = cqe.app;
	out[CQE64_APP_OP] = cqe.app_op;
	out[CQE64_APP_INFO] = be16toh(cqe.app_info);
	/* As rdma-core's cq.c reads them. */
	out[CQE64_IS_TM] = cqe.app == ORACLE_MLX5_CQE_APP_TAG_MATCHING;
	out[CQE64_TM_SUCCESS] = be32toh(cqe.tm_cqe.success);
	out[CQE64_TM_SUCCEEDED] =
		(be32toh(cqe.tm_cqe.success) & MLX5_TMC_SUCCESS) != 0;
	out[CQE64_TM_HW_PHASE_CNT] = be16toh(cqe.tm_cqe.hw_phase_cnt);
	out[CQE64_TMH_OPCODE] = cqe.tmh.opcode;
	out[CQE64_TMH_APP_CTX] = be32toh(cqe.tmh.app_ctx);
	out[CQE64_TMH_TAG] = be64toh(cqe.tmh.tag);
}

/* Indices into oracle_err_cqe's output; tests/oracle.rs mirrors them. */
enum {
	ERR_SRQN,
	ERR_VENDOR_ERR_SYND,
	ERR_SYNDROME,
	ERR_S_WQE_OPCODE_QPN,
	ERR_QPN,		/* s_wqe_opcode_qpn & 0xffffff */
	ERR_S_WQE_OPCODE,	/* s_wqe_opcode_qpn >> 24 */
	ERR_WQE_COUNTER,
	ERR_SIGNATURE,
	ERR_OP_OWN,
	ERR_NFIELDS
};

/* Returns the number of values oracle_err_cqe writes. */
size_t oracle_err_cqe_nfields(void)
{
	return ERR_NFIELDS;
}

/* Decodes a 64-byte error CQE through struct mlx5_err_cqe. */
void oracle_err_cqe(const uint8_t in[64], uint64_t out[ERR_NFIELDS])
{
	struct mlx5_err_cqe e;

	memcpy(&e, in, sizeof(e));
	out[ERR_SRQN] = be32toh(e.srqn);
	out[ERR_VENDOR_ERR_SYND] = e.vendor_err_synd;
	out[ERR_SYNDROME] = e.syndrome;
	out[ERR_S_WQE_OPCODE_QPN] = be32toh(e.s_wqe_opcode_qpn);
	out[ERR_QPN] = be32toh(e.s_wqe_opcode_qpn) & 0xffffff;
	out[ERR_S_WQE_OPCODE] = be32toh(e.s_wqe_opcode_qpn) >> 24;
	out[ERR_WQE_COUNTER] = be16toh(e.wqe_counter);
	out[ERR_SIGNATURE] = e.signature;
	out[ERR_OP_OWN] = e.op_own;
}

#else /* ORACLE_X86_ONLY */

#if !defined(__SSE3__) || !defined(__SSSE3__)
#error "ORACLE_X86_ONLY needs -mssse3 (mlx5dv_x86_set_ctrl_seg uses _mm_shuffle_epi8)"
#endif

/* mlx5dv_x86_set_ctrl_seg (SSE shuffle variant); `imm` is stored raw. Writes
 * all 16 bytes, including the reserved dci_stream_channel_id (zero). */
void oracle_x86_ctrl_seg(uint8_t out[16], const struct oracle_ctrl *a)
{
	struct mlx5_wqe_ctrl_seg seg __attribute__((aligned(16)));

	mlx5dv_x86_set_ctrl_seg(&seg, a->pi, a->opcode, a->opmod, a->qpn,
				a->fm_ce_se, a->ds, a->signature, a->imm);
	memcpy(out, &seg, sizeof(seg));
}

#endif /* ORACLE_X86_ONLY */
