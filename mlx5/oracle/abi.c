/* ABI oracle for the hand-written bindings in src/hw/ffi.rs: sizeof/offsetof
 * of every field of every mirrored struct, and the constants, as a C compiler
 * sees rdma-core's installed headers. */
#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>
#include <infiniband/mlx5dv.h>

struct abi_row {
	const char *name;
	long offset;
	long size; /* -1: the Rust struct declares a prefix only */
};

#define S(st) { #st ".", 0, (long)sizeof(struct st) },
#define PREFIX(st) { #st ".", 0, -1 },
#define F(st, f) { #st "." #f, (long)offsetof(struct st, f), (long)sizeof(((struct st *)0)->f) },
/* Members of anonymous structs, relative to the enclosing member. */
#define A(name, st, m, f) { name, (long)(offsetof(struct st, m.f) - offsetof(struct st, m)), (long)sizeof(((struct st *)0)->m.f) },

static const struct abi_row rows[] = {
	S(ibv_comp_channel)
	F(ibv_comp_channel, context) F(ibv_comp_channel, fd) F(ibv_comp_channel, refcnt)

	S(ibv_device_attr)
	F(ibv_device_attr, fw_ver) F(ibv_device_attr, node_guid) F(ibv_device_attr, sys_image_guid)
	F(ibv_device_attr, max_mr_size) F(ibv_device_attr, page_size_cap) F(ibv_device_attr, vendor_id)
	F(ibv_device_attr, vendor_part_id) F(ibv_device_attr, hw_ver) F(ibv_device_attr, max_qp)
	F(ibv_device_attr, max_qp_wr) F(ibv_device_attr, device_cap_flags) F(ibv_device_attr, max_sge)
	F(ibv_device_attr, max_sge_rd) F(ibv_device_attr, max_cq) F(ibv_device_attr, max_cqe)
	F(ibv_device_attr, max_mr) F(ibv_device_attr, max_pd) F(ibv_device_attr, max_qp_rd_atom)
	F(ibv_device_attr, max_ee_rd_atom) F(ibv_device_attr, max_res_rd_atom) F(ibv_device_attr, max_qp_init_rd_atom)
	F(ibv_device_attr, max_ee_init_rd_atom) F(ibv_device_attr, atomic_cap) F(ibv_device_attr, max_ee)
	F(ibv_device_attr, max_rdd) F(ibv_device_attr, max_mw) F(ibv_device_attr, max_raw_ipv6_qp)
	F(ibv_device_attr, max_raw_ethy_qp) F(ibv_device_attr, max_mcast_grp) F(ibv_device_attr, max_mcast_qp_attach)
	F(ibv_device_attr, max_total_mcast_qp_attach) F(ibv_device_attr, max_ah) F(ibv_device_attr, max_fmr)
	F(ibv_device_attr, max_map_per_fmr) F(ibv_device_attr, max_srq) F(ibv_device_attr, max_srq_wr)
	F(ibv_device_attr, max_srq_sge) F(ibv_device_attr, max_pkeys) F(ibv_device_attr, local_ca_ack_delay)
	F(ibv_device_attr, phys_port_cnt)

	S(ibv_port_attr)
	F(ibv_port_attr, state) F(ibv_port_attr, max_mtu) F(ibv_port_attr, active_mtu) F(ibv_port_attr, gid_tbl_len)
	F(ibv_port_attr, port_cap_flags) F(ibv_port_attr, max_msg_sz) F(ibv_port_attr, bad_pkey_cntr)
	F(ibv_port_attr, qkey_viol_cntr) F(ibv_port_attr, pkey_tbl_len) F(ibv_port_attr, lid) F(ibv_port_attr, sm_lid)
	F(ibv_port_attr, lmc) F(ibv_port_attr, max_vl_num) F(ibv_port_attr, sm_sl) F(ibv_port_attr, subnet_timeout)
	F(ibv_port_attr, init_type_reply) F(ibv_port_attr, active_width) F(ibv_port_attr, active_speed)
	F(ibv_port_attr, phys_state) F(ibv_port_attr, link_layer) F(ibv_port_attr, flags) F(ibv_port_attr, port_cap_flags2)

	S(ibv_global_route)
	F(ibv_global_route, dgid) F(ibv_global_route, flow_label) F(ibv_global_route, sgid_index)
	F(ibv_global_route, hop_limit) F(ibv_global_route, traffic_class)

	S(ibv_ah_attr)
	F(ibv_ah_attr, grh) F(ibv_ah_attr, dlid) F(ibv_ah_attr, sl) F(ibv_ah_attr, src_path_bits)
	F(ibv_ah_attr, static_rate) F(ibv_ah_attr, is_global) F(ibv_ah_attr, port_num)

	S(ibv_qp_cap)
	F(ibv_qp_cap, max_send_wr) F(ibv_qp_cap, max_recv_wr) F(ibv_qp_cap, max_send_sge)
	F(ibv_qp_cap, max_recv_sge) F(ibv_qp_cap, max_inline_data)

	S(ibv_qp_attr)
	F(ibv_qp_attr, qp_state) F(ibv_qp_attr, cur_qp_state) F(ibv_qp_attr, path_mtu) F(ibv_qp_attr, path_mig_state)
	F(ibv_qp_attr, qkey) F(ibv_qp_attr, rq_psn) F(ibv_qp_attr, sq_psn) F(ibv_qp_attr, dest_qp_num)
	F(ibv_qp_attr, qp_access_flags) F(ibv_qp_attr, cap) F(ibv_qp_attr, ah_attr) F(ibv_qp_attr, alt_ah_attr)
	F(ibv_qp_attr, pkey_index) F(ibv_qp_attr, alt_pkey_index) F(ibv_qp_attr, en_sqd_async_notify)
	F(ibv_qp_attr, sq_draining) F(ibv_qp_attr, max_rd_atomic) F(ibv_qp_attr, max_dest_rd_atomic)
	F(ibv_qp_attr, min_rnr_timer) F(ibv_qp_attr, port_num) F(ibv_qp_attr, timeout) F(ibv_qp_attr, retry_cnt)
	F(ibv_qp_attr, rnr_retry) F(ibv_qp_attr, alt_port_num) F(ibv_qp_attr, alt_timeout) F(ibv_qp_attr, rate_limit)

	S(ibv_qp_init_attr)
	F(ibv_qp_init_attr, qp_context) F(ibv_qp_init_attr, send_cq) F(ibv_qp_init_attr, recv_cq)
	F(ibv_qp_init_attr, srq) F(ibv_qp_init_attr, cap) F(ibv_qp_init_attr, qp_type) F(ibv_qp_init_attr, sq_sig_all)

	S(ibv_srq_attr) F(ibv_srq_attr, max_wr) F(ibv_srq_attr, max_sge) F(ibv_srq_attr, srq_limit)
	S(ibv_srq_init_attr) F(ibv_srq_init_attr, srq_context) F(ibv_srq_init_attr, attr)

	S(ibv_tm_cap) F(ibv_tm_cap, max_num_tags) F(ibv_tm_cap, max_ops)
	S(ibv_srq_init_attr_ex)
	F(ibv_srq_init_attr_ex, srq_context) F(ibv_srq_init_attr_ex, attr) F(ibv_srq_init_attr_ex, comp_mask)
	F(ibv_srq_init_attr_ex, srq_type) F(ibv_srq_init_attr_ex, pd) F(ibv_srq_init_attr_ex, xrcd)
	F(ibv_srq_init_attr_ex, cq) F(ibv_srq_init_attr_ex, tm_cap)
	S(ibv_tm_caps)
	F(ibv_tm_caps, max_rndv_hdr_size) F(ibv_tm_caps, max_num_tags) F(ibv_tm_caps, flags)
	F(ibv_tm_caps, max_ops) F(ibv_tm_caps, max_sge)
	/* Read as a prefix: the provider fills the attr_size bytes it is given. */
	PREFIX(ibv_device_attr_ex)
	F(ibv_device_attr_ex, orig_attr) F(ibv_device_attr_ex, comp_mask) F(ibv_device_attr_ex, tm_caps)
	/* Reached by offset from the ibv_context it ends with (verbs.h's
	 * verbs_get_ctx_op). */
	PREFIX(verbs_context)
	F(verbs_context, context) F(verbs_context, sz) F(verbs_context, create_srq_ex)
	F(verbs_context, query_device_ex)

	S(ibv_cq_init_attr_ex)
	F(ibv_cq_init_attr_ex, cqe) F(ibv_cq_init_attr_ex, cq_context) F(ibv_cq_init_attr_ex, channel)
	F(ibv_cq_init_attr_ex, comp_vector) F(ibv_cq_init_attr_ex, wc_flags) F(ibv_cq_init_attr_ex, comp_mask)
	F(ibv_cq_init_attr_ex, flags) F(ibv_cq_init_attr_ex, parent_domain)

	S(ibv_gid_entry)
	F(ibv_gid_entry, gid) F(ibv_gid_entry, gid_index) F(ibv_gid_entry, port_num) F(ibv_gid_entry, gid_type)
	F(ibv_gid_entry, ndev_ifindex)

	S(ibv_pd) F(ibv_pd, context) F(ibv_pd, handle)
	S(ibv_mr)
	F(ibv_mr, context) F(ibv_mr, pd) F(ibv_mr, addr) F(ibv_mr, length) F(ibv_mr, handle) F(ibv_mr, lkey) F(ibv_mr, rkey)

	PREFIX(ibv_cq)
	F(ibv_cq, context) F(ibv_cq, channel) F(ibv_cq, cq_context) F(ibv_cq, handle) F(ibv_cq, cqe)
	PREFIX(ibv_srq)
	F(ibv_srq, context) F(ibv_srq, srq_context) F(ibv_srq, pd) F(ibv_srq, handle)
	PREFIX(ibv_qp)
	F(ibv_qp, context) F(ibv_qp, qp_context) F(ibv_qp, pd) F(ibv_qp, send_cq) F(ibv_qp, recv_cq)
	F(ibv_qp, srq) F(ibv_qp, handle) F(ibv_qp, qp_num) F(ibv_qp, state) F(ibv_qp, qp_type)

	S(ibv_context_ops)
	F(ibv_context_ops, _compat_query_device) F(ibv_context_ops, _compat_query_port) F(ibv_context_ops, _compat_alloc_pd)
	F(ibv_context_ops, _compat_dealloc_pd) F(ibv_context_ops, _compat_reg_mr) F(ibv_context_ops, _compat_rereg_mr)
	F(ibv_context_ops, _compat_dereg_mr) F(ibv_context_ops, alloc_mw) F(ibv_context_ops, bind_mw)
	F(ibv_context_ops, dealloc_mw) F(ibv_context_ops, _compat_create_cq) F(ibv_context_ops, poll_cq)
	F(ibv_context_ops, req_notify_cq) F(ibv_context_ops, _compat_cq_event) F(ibv_context_ops, _compat_resize_cq)
	F(ibv_context_ops, _compat_destroy_cq) F(ibv_context_ops, _compat_create_srq) F(ibv_context_ops, _compat_modify_srq)
	F(ibv_context_ops, _compat_query_srq) F(ibv_context_ops, _compat_destroy_srq) F(ibv_context_ops, post_srq_recv)
	F(ibv_context_ops, _compat_create_qp) F(ibv_context_ops, _compat_query_qp) F(ibv_context_ops, _compat_modify_qp)
	F(ibv_context_ops, _compat_destroy_qp) F(ibv_context_ops, post_send) F(ibv_context_ops, post_recv)
	F(ibv_context_ops, _compat_create_ah) F(ibv_context_ops, _compat_destroy_ah) F(ibv_context_ops, _compat_attach_mcast)
	F(ibv_context_ops, _compat_detach_mcast) F(ibv_context_ops, _compat_async_event)
	PREFIX(ibv_context)
	F(ibv_context, device) F(ibv_context, ops) F(ibv_context, abi_compat)
	S(ibv_sge) F(ibv_sge, addr) F(ibv_sge, length) F(ibv_sge, lkey)
	{ "ibv_rdma_wr.", 0, (long)sizeof(((struct ibv_send_wr *)0)->wr.rdma) },
	A("ibv_rdma_wr.remote_addr", ibv_send_wr, wr.rdma, remote_addr)
	A("ibv_rdma_wr.rkey", ibv_send_wr, wr.rdma, rkey)
	{ "ibv_atomic_wr.", 0, (long)sizeof(((struct ibv_send_wr *)0)->wr.atomic) },
	A("ibv_atomic_wr.remote_addr", ibv_send_wr, wr.atomic, remote_addr)
	A("ibv_atomic_wr.compare_add", ibv_send_wr, wr.atomic, compare_add)
	A("ibv_atomic_wr.swap", ibv_send_wr, wr.atomic, swap)
	A("ibv_atomic_wr.rkey", ibv_send_wr, wr.atomic, rkey)
	S(ibv_send_wr)
	F(ibv_send_wr, wr_id) F(ibv_send_wr, next) F(ibv_send_wr, sg_list) F(ibv_send_wr, num_sge)
	F(ibv_send_wr, opcode) F(ibv_send_wr, send_flags) F(ibv_send_wr, imm_data) F(ibv_send_wr, wr)
	F(ibv_send_wr, qp_type) F(ibv_send_wr, bind_mw)
	S(ibv_recv_wr) F(ibv_recv_wr, wr_id) F(ibv_recv_wr, next) F(ibv_recv_wr, sg_list) F(ibv_recv_wr, num_sge)
	S(ibv_wc)
	F(ibv_wc, wr_id) F(ibv_wc, status) F(ibv_wc, opcode) F(ibv_wc, vendor_err) F(ibv_wc, byte_len)
	F(ibv_wc, imm_data) F(ibv_wc, qp_num) F(ibv_wc, src_qp) F(ibv_wc, wc_flags) F(ibv_wc, pkey_index)
	F(ibv_wc, slid) F(ibv_wc, sl) F(ibv_wc, dlid_path_bits)

	{ "mlx5dv_obj_pair.", 0, (long)sizeof(((struct mlx5dv_obj *)0)->qp) },
	A("mlx5dv_obj_pair.in_", mlx5dv_obj, qp, in)
	A("mlx5dv_obj_pair.out", mlx5dv_obj, qp, out)
	S(mlx5dv_obj)
	F(mlx5dv_obj, qp) F(mlx5dv_obj, cq) F(mlx5dv_obj, srq) F(mlx5dv_obj, rwq) F(mlx5dv_obj, dm)
	F(mlx5dv_obj, ah) F(mlx5dv_obj, pd)

	{ "mlx5dv_qp_queue.", 0, (long)sizeof(((struct mlx5dv_qp *)0)->sq) },
	A("mlx5dv_qp_queue.buf", mlx5dv_qp, sq, buf)
	A("mlx5dv_qp_queue.wqe_cnt", mlx5dv_qp, sq, wqe_cnt)
	A("mlx5dv_qp_queue.stride", mlx5dv_qp, sq, stride)
	{ "mlx5dv_qp_bf.", 0, (long)sizeof(((struct mlx5dv_qp *)0)->bf) },
	A("mlx5dv_qp_bf.reg", mlx5dv_qp, bf, reg)
	A("mlx5dv_qp_bf.size", mlx5dv_qp, bf, size)
	S(mlx5dv_qp)
	F(mlx5dv_qp, dbrec) F(mlx5dv_qp, sq) F(mlx5dv_qp, rq) F(mlx5dv_qp, bf) F(mlx5dv_qp, comp_mask)
	F(mlx5dv_qp, uar_mmap_offset) F(mlx5dv_qp, tirn) F(mlx5dv_qp, tisn) F(mlx5dv_qp, rqn) F(mlx5dv_qp, sqn)
	F(mlx5dv_qp, tir_icm_addr)

	S(mlx5dv_cq)
	F(mlx5dv_cq, buf) F(mlx5dv_cq, dbrec) F(mlx5dv_cq, cqe_cnt) F(mlx5dv_cq, cqe_size) F(mlx5dv_cq, cq_uar)
	F(mlx5dv_cq, cqn) F(mlx5dv_cq, comp_mask)
	S(mlx5dv_srq)
	F(mlx5dv_srq, buf) F(mlx5dv_srq, dbrec) F(mlx5dv_srq, stride) F(mlx5dv_srq, head) F(mlx5dv_srq, tail)
	F(mlx5dv_srq, comp_mask) F(mlx5dv_srq, srqn)
	S(mlx5dv_cq_init_attr)
	F(mlx5dv_cq_init_attr, comp_mask) F(mlx5dv_cq_init_attr, cqe_comp_res_format) F(mlx5dv_cq_init_attr, flags)
	F(mlx5dv_cq_init_attr, cqe_size)

	S(mlx5dv_cqe_comp_caps) F(mlx5dv_cqe_comp_caps, max_num) F(mlx5dv_cqe_comp_caps, supported_format)
	S(mlx5dv_sw_parsing_caps) F(mlx5dv_sw_parsing_caps, sw_parsing_offloads) F(mlx5dv_sw_parsing_caps, supported_qpts)
	S(mlx5dv_striding_rq_caps)
	F(mlx5dv_striding_rq_caps, min_single_stride_log_num_of_bytes) F(mlx5dv_striding_rq_caps, max_single_stride_log_num_of_bytes)
	F(mlx5dv_striding_rq_caps, min_single_wqe_log_num_of_strides) F(mlx5dv_striding_rq_caps, max_single_wqe_log_num_of_strides)
	F(mlx5dv_striding_rq_caps, supported_qpts)
	S(mlx5dv_sig_caps) F(mlx5dv_sig_caps, block_size) F(mlx5dv_sig_caps, block_prot) F(mlx5dv_sig_caps, t10dif_bg)
	F(mlx5dv_sig_caps, crc_type)
	S(mlx5dv_dci_streams_caps) F(mlx5dv_dci_streams_caps, max_log_num_concurent) F(mlx5dv_dci_streams_caps, max_log_num_errored)
	S(mlx5dv_crypto_caps) F(mlx5dv_crypto_caps, failed_selftests) F(mlx5dv_crypto_caps, crypto_engines)
	F(mlx5dv_crypto_caps, wrapped_import_method) F(mlx5dv_crypto_caps, log_max_num_deks) F(mlx5dv_crypto_caps, flags)
	S(mlx5dv_context)
	F(mlx5dv_context, version) F(mlx5dv_context, flags) F(mlx5dv_context, comp_mask) F(mlx5dv_context, cqe_comp_caps)
	F(mlx5dv_context, sw_parsing_caps) F(mlx5dv_context, striding_rq_caps) F(mlx5dv_context, tunnel_offloads_caps)
	F(mlx5dv_context, max_dynamic_bfregs) F(mlx5dv_context, max_clock_info_update_nsec) F(mlx5dv_context, flow_action_flags)
	F(mlx5dv_context, dc_odp_caps) F(mlx5dv_context, hca_core_clock) F(mlx5dv_context, num_lag_ports)
	F(mlx5dv_context, sig_caps) F(mlx5dv_context, dci_streams_caps) F(mlx5dv_context, max_wr_memcpy_length)
	F(mlx5dv_context, crypto_caps)

	/* DC queues (mlx5dv_create_qp) and address handles. */
	S(ibv_rx_hash_conf)
	F(ibv_rx_hash_conf, rx_hash_function) F(ibv_rx_hash_conf, rx_hash_key_len) F(ibv_rx_hash_conf, rx_hash_key)
	F(ibv_rx_hash_conf, rx_hash_fields_mask)
	S(ibv_qp_init_attr_ex)
	F(ibv_qp_init_attr_ex, qp_context) F(ibv_qp_init_attr_ex, send_cq) F(ibv_qp_init_attr_ex, recv_cq)
	F(ibv_qp_init_attr_ex, srq) F(ibv_qp_init_attr_ex, cap) F(ibv_qp_init_attr_ex, qp_type)
	F(ibv_qp_init_attr_ex, sq_sig_all) F(ibv_qp_init_attr_ex, comp_mask) F(ibv_qp_init_attr_ex, pd)
	F(ibv_qp_init_attr_ex, xrcd) F(ibv_qp_init_attr_ex, create_flags) F(ibv_qp_init_attr_ex, max_tso_header)
	F(ibv_qp_init_attr_ex, rwq_ind_tbl) F(ibv_qp_init_attr_ex, rx_hash_conf) F(ibv_qp_init_attr_ex, source_qpn)
	F(ibv_qp_init_attr_ex, send_ops_flags)
	S(mlx5dv_dci_streams) F(mlx5dv_dci_streams, log_num_concurent) F(mlx5dv_dci_streams, log_num_errored)
	S(mlx5dv_dc_init_attr) F(mlx5dv_dc_init_attr, dc_type)
	/* The anonymous union: as a whole (its largest member) and each member. */
	{ "mlx5dv_dc_init_attr.u", (long)offsetof(struct mlx5dv_dc_init_attr, dct_access_key),
	  (long)(sizeof(struct mlx5dv_dc_init_attr) - offsetof(struct mlx5dv_dc_init_attr, dct_access_key)) },
	F(mlx5dv_dc_init_attr, dct_access_key) F(mlx5dv_dc_init_attr, dci_streams)
	S(mlx5dv_qp_init_attr)
	F(mlx5dv_qp_init_attr, comp_mask) F(mlx5dv_qp_init_attr, create_flags) F(mlx5dv_qp_init_attr, dc_init_attr)
	F(mlx5dv_qp_init_attr, send_ops_flags)
	PREFIX(ibv_ah) F(ibv_ah, context) F(ibv_ah, pd) F(ibv_ah, handle)
	S(mlx5dv_ah) F(mlx5dv_ah, av) F(mlx5dv_ah, comp_mask)
	S(mlx5_wqe_av)
};

size_t abi_rows(const struct abi_row **out)
{
	*out = rows;
	return sizeof(rows) / sizeof(rows[0]);
}

struct abi_const {
	const char *name;
	long long value;
};

#define C(n) { #n, (long long)(n) },
static const struct abi_const consts[] = {
	C(IBV_SRQT_TM) C(IBV_SRQ_INIT_ATTR_TYPE) C(IBV_SRQ_INIT_ATTR_PD) C(IBV_SRQ_INIT_ATTR_CQ)
	C(IBV_SRQ_INIT_ATTR_TM) C(IBV_TM_CAP_RC)
	C(IBV_QPS_RESET) C(IBV_QPS_INIT) C(IBV_QPS_RTR) C(IBV_QPS_RTS) C(IBV_QPS_ERR)
	C(IBV_QP_STATE) C(IBV_QP_ACCESS_FLAGS) C(IBV_QP_PKEY_INDEX) C(IBV_QP_PORT) C(IBV_QP_AV)
	C(IBV_QP_PATH_MTU) C(IBV_QP_TIMEOUT) C(IBV_QP_RETRY_CNT) C(IBV_QP_RNR_RETRY) C(IBV_QP_RQ_PSN)
	C(IBV_QP_MAX_QP_RD_ATOMIC) C(IBV_QP_MIN_RNR_TIMER) C(IBV_QP_SQ_PSN) C(IBV_QP_MAX_DEST_RD_ATOMIC)
	C(IBV_QP_DEST_QPN) C(IBV_QPT_RC) C(IBV_LINK_LAYER_INFINIBAND) C(IBV_LINK_LAYER_ETHERNET)
	C(IBV_PORT_ACTIVE) C(IBV_GID_TYPE_ROCE_V2)
	C(IBV_WR_RDMA_WRITE) C(IBV_WR_RDMA_WRITE_WITH_IMM) C(IBV_WR_SEND) C(IBV_WR_SEND_WITH_IMM) C(IBV_WR_RDMA_READ)
	C(IBV_WR_ATOMIC_CMP_AND_SWP) C(IBV_WR_ATOMIC_FETCH_AND_ADD)
	C(IBV_SEND_FENCE) C(IBV_SEND_SIGNALED) C(IBV_SEND_SOLICITED) C(IBV_SEND_INLINE)
	C(IBV_WC_SEND) C(IBV_WC_RDMA_WRITE) C(IBV_WC_RDMA_READ) C(IBV_WC_COMP_SWAP) C(IBV_WC_FETCH_ADD)
	C(IBV_WC_RECV) C(IBV_WC_RECV_RDMA_WITH_IMM) C(IBV_WC_WITH_IMM)
	C(IBV_WC_SUCCESS) C(IBV_WC_LOC_LEN_ERR) C(IBV_WC_LOC_QP_OP_ERR) C(IBV_WC_LOC_EEC_OP_ERR) C(IBV_WC_LOC_PROT_ERR) C(IBV_WC_WR_FLUSH_ERR) C(IBV_WC_MW_BIND_ERR) C(IBV_WC_BAD_RESP_ERR) C(IBV_WC_LOC_ACCESS_ERR) C(IBV_WC_REM_INV_REQ_ERR) C(IBV_WC_REM_ACCESS_ERR) C(IBV_WC_REM_OP_ERR) C(IBV_WC_RETRY_EXC_ERR) C(IBV_WC_RNR_RETRY_EXC_ERR) C(IBV_WC_LOC_RDD_VIOL_ERR) C(IBV_WC_REM_INV_RD_REQ_ERR) C(IBV_WC_REM_ABORT_ERR) C(IBV_WC_INV_EECN_ERR) C(IBV_WC_INV_EEC_STATE_ERR) C(IBV_WC_FATAL_ERR) C(IBV_WC_RESP_TIMEOUT_ERR) C(IBV_WC_GENERAL_ERR)
	C(IBV_ACCESS_LOCAL_WRITE) C(IBV_ACCESS_REMOTE_WRITE) C(IBV_ACCESS_REMOTE_READ) C(IBV_ACCESS_REMOTE_ATOMIC)
	C(MLX5DV_OBJ_QP) C(MLX5DV_OBJ_CQ) C(MLX5DV_OBJ_SRQ) C(MLX5DV_SRQ_MASK_SRQN)
	C(MLX5DV_CONTEXT_MASK_CQE_COMPRESION)
	C(MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE) C(MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE)
	C(IBV_QPT_DRIVER) C(IBV_QP_INIT_ATTR_PD) C(IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)
	C(IBV_QP_EX_WITH_RDMA_WRITE) C(IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM) C(IBV_QP_EX_WITH_RDMA_READ)
	C(MLX5DV_OBJ_AH) C(MLX5DV_CONTEXT_MASK_DCI_STREAMS) C(MLX5DV_QP_INIT_ATTR_MASK_DC)
	C(MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS) C(MLX5DV_DCTYPE_DCT) C(MLX5DV_DCTYPE_DCI)
};

size_t abi_consts(const struct abi_const **out)
{
	*out = consts;
	return sizeof(consts) / sizeof(consts[0]);
}
