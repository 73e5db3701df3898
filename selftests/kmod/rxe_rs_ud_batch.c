// SPDX-License-Identifier: GPL-2.0
/*
 * A kernel UD consumer for the selftests: on load, post `count` UD SENDs to
 * ourselves in one ib_post_send() chain on device `dev`, as a ULP would, and
 * wait for every send and receive completion. The load fails with -EIO
 * unless all of them complete successfully and every payload arrives intact
 * behind its GRH; the kernel log says how many did.
 *
 * It checks what no in-tree ULP exercises: a batch larger than one requester
 * run is sent in full, from the kernel's post_send path (not the provider's
 * rings) and with nothing else posted after it to move the QP along.
 */
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/bitmap.h>
#include <linux/delay.h>
#include <linux/etherdevice.h>
#include <linux/unaligned.h>
#include <net/ipv6.h>
#include <rdma/ib_verbs.h>
#include <rdma/ib_cache.h>

static char *dev_name_param = "rxers0";
module_param_named(dev, dev_name_param, charp, 0444);
MODULE_PARM_DESC(dev, "RDMA device to test");

static unsigned int count = 1000;
module_param(count, uint, 0444);
MODULE_PARM_DESC(count, "UD SENDs in the one post (1-4096)");

static unsigned int timeout_ms = 120000;
module_param(timeout_ms, uint, 0444);
MODULE_PARM_DESC(timeout_ms, "how long to wait for the completions");

#define PORT		1
#define QKEY		0x11111111
#define PAYLOAD		64
#define GRH_LEN		40
#define RECV_LEN	(GRH_LEN + PAYLOAD)

struct ud_batch {
	struct ib_device *dev;
	const struct ib_gid_attr *sgid;
	u8 dmac[ETH_ALEN];
	struct ib_pd *pd;
	struct ib_cq *send_cq;
	struct ib_cq *recv_cq;
	struct ib_qp *tx;
	struct ib_qp *rx;
	struct ib_ah *ah;
	u8 *send_buf;
	u8 *recv_buf;
	u64 send_dma;
	u64 recv_dma;
	struct ib_ud_wr *send_wrs;
	struct ib_sge *send_sges;
	struct ib_recv_wr *recv_wrs;
	struct ib_sge *recv_sges;
	unsigned long *received;
};

/* The first RoCEv2 GID with an IPv4 address, and its netdev's MAC. */
static int find_ipv4_gid(struct ud_batch *t)
{
	u32 len = t->dev->port_data[PORT].immutable.gid_tbl_len;
	u32 i;

	for (i = 0; i < len; i++) {
		const struct ib_gid_attr *attr = rdma_get_gid_attr(t->dev, PORT, i);
		struct net_device *ndev;
		bool usable;

		if (IS_ERR(attr))
			continue;
		usable = attr->gid_type == IB_GID_TYPE_ROCE_UDP_ENCAP &&
			 ipv6_addr_v4mapped((struct in6_addr *)attr->gid.raw);
		if (usable) {
			rcu_read_lock();
			ndev = rdma_read_gid_attr_ndev_rcu(attr);
			usable = !IS_ERR(ndev);
			if (usable)
				ether_addr_copy(t->dmac, ndev->dev_addr);
			rcu_read_unlock();
		}
		if (usable) {
			t->sgid = attr;
			return 0;
		}
		rdma_put_gid_attr(attr);
	}
	return -ENODEV;
}

static struct ib_qp *create_ud_qp(struct ud_batch *t, u32 depth)
{
	struct ib_qp_init_attr init = {
		.send_cq = t->send_cq,
		.recv_cq = t->recv_cq,
		.cap = {
			.max_send_wr = depth,
			.max_recv_wr = depth,
			.max_send_sge = 1,
			.max_recv_sge = 1,
		},
		.sq_sig_type = IB_SIGNAL_ALL_WR,
		.qp_type = IB_QPT_UD,
	};
	struct ib_qp_attr attr = {
		.qp_state = IB_QPS_INIT,
		.pkey_index = 0,
		.port_num = PORT,
		.qkey = QKEY,
	};
	struct ib_qp *qp;
	int ret;

	qp = ib_create_qp(t->pd, &init);
	if (IS_ERR(qp))
		return qp;
	ret = ib_modify_qp(qp, &attr, IB_QP_STATE | IB_QP_PKEY_INDEX |
				      IB_QP_PORT | IB_QP_QKEY);
	if (!ret) {
		attr.qp_state = IB_QPS_RTR;
		ret = ib_modify_qp(qp, &attr, IB_QP_STATE);
	}
	if (!ret) {
		attr.qp_state = IB_QPS_RTS;
		attr.sq_psn = 0;
		ret = ib_modify_qp(qp, &attr, IB_QP_STATE | IB_QP_SQ_PSN);
	}
	if (ret) {
		ib_destroy_qp(qp);
		return ERR_PTR(ret);
	}
	return qp;
}

static int setup(struct ud_batch *t)
{
	struct rdma_ah_attr ah_attr = {};
	union ib_gid dgid;
	int ret;

	ret = find_ipv4_gid(t);
	if (ret) {
		pr_err("%s: %s has no RoCEv2 IPv4 GID\n", KBUILD_MODNAME,
		       dev_name_param);
		return ret;
	}
	t->pd = ib_alloc_pd(t->dev, 0);
	if (IS_ERR(t->pd))
		return PTR_ERR(t->pd);
	t->send_cq = ib_alloc_cq(t->dev, NULL, count, 0, IB_POLL_DIRECT);
	if (IS_ERR(t->send_cq))
		return PTR_ERR(t->send_cq);
	t->recv_cq = ib_alloc_cq(t->dev, NULL, count, 0, IB_POLL_DIRECT);
	if (IS_ERR(t->recv_cq))
		return PTR_ERR(t->recv_cq);
	t->tx = create_ud_qp(t, count);
	if (IS_ERR(t->tx))
		return PTR_ERR(t->tx);
	t->rx = create_ud_qp(t, count);
	if (IS_ERR(t->rx))
		return PTR_ERR(t->rx);

	ah_attr.type = rdma_ah_find_type(t->dev, PORT);
	rdma_ah_set_port_num(&ah_attr, PORT);
	dgid = t->sgid->gid;
	rdma_ah_set_grh(&ah_attr, &dgid, 0, t->sgid->index, 64, 0);
	ether_addr_copy(ah_attr.roce.dmac, t->dmac);
	t->ah = rdma_create_ah(t->pd, &ah_attr, RDMA_CREATE_AH_SLEEPABLE);
	if (IS_ERR(t->ah))
		return PTR_ERR(t->ah);

	t->send_buf = kcalloc(count, PAYLOAD, GFP_KERNEL);
	t->recv_buf = kcalloc(count, RECV_LEN, GFP_KERNEL);
	t->send_wrs = kcalloc(count, sizeof(*t->send_wrs), GFP_KERNEL);
	t->send_sges = kcalloc(count, sizeof(*t->send_sges), GFP_KERNEL);
	t->recv_wrs = kcalloc(count, sizeof(*t->recv_wrs), GFP_KERNEL);
	t->recv_sges = kcalloc(count, sizeof(*t->recv_sges), GFP_KERNEL);
	t->received = bitmap_zalloc(count, GFP_KERNEL);
	if (!t->send_buf || !t->recv_buf || !t->send_wrs || !t->send_sges ||
	    !t->recv_wrs || !t->recv_sges || !t->received)
		return -ENOMEM;

	t->send_dma = ib_dma_map_single(t->dev, t->send_buf, count * PAYLOAD,
					DMA_TO_DEVICE);
	if (ib_dma_mapping_error(t->dev, t->send_dma)) {
		t->send_dma = 0;
		return -ENOMEM;
	}
	t->recv_dma = ib_dma_map_single(t->dev, t->recv_buf, count * RECV_LEN,
					DMA_FROM_DEVICE);
	if (ib_dma_mapping_error(t->dev, t->recv_dma)) {
		t->recv_dma = 0;
		return -ENOMEM;
	}
	return 0;
}

/*
 * The QPs go first: after a failure, sends may still be queued and receives
 * posted into the buffers freed below.
 */
static void teardown(struct ud_batch *t)
{
	if (!IS_ERR_OR_NULL(t->rx))
		ib_destroy_qp(t->rx);
	if (!IS_ERR_OR_NULL(t->tx))
		ib_destroy_qp(t->tx);
	if (!IS_ERR_OR_NULL(t->ah))
		rdma_destroy_ah(t->ah, RDMA_DESTROY_AH_SLEEPABLE);
	if (t->recv_dma)
		ib_dma_unmap_single(t->dev, t->recv_dma, count * RECV_LEN,
				    DMA_FROM_DEVICE);
	if (t->send_dma)
		ib_dma_unmap_single(t->dev, t->send_dma, count * PAYLOAD,
				    DMA_TO_DEVICE);
	bitmap_free(t->received);
	kfree(t->recv_sges);
	kfree(t->recv_wrs);
	kfree(t->send_sges);
	kfree(t->send_wrs);
	kfree(t->recv_buf);
	kfree(t->send_buf);
	if (!IS_ERR_OR_NULL(t->recv_cq))
		ib_free_cq(t->recv_cq);
	if (!IS_ERR_OR_NULL(t->send_cq))
		ib_free_cq(t->send_cq);
	if (!IS_ERR_OR_NULL(t->pd))
		ib_dealloc_pd(t->pd);
	if (t->sgid)
		rdma_put_gid_attr(t->sgid);
}

static int post_all(struct ud_batch *t)
{
	const struct ib_recv_wr *bad_recv = NULL;
	const struct ib_send_wr *bad_send = NULL;
	u32 i;
	int ret;

	for (i = 0; i < count; i++) {
		t->recv_sges[i] = (struct ib_sge) {
			.addr = t->recv_dma + (u64)i * RECV_LEN,
			.length = RECV_LEN,
			.lkey = t->pd->local_dma_lkey,
		};
		t->recv_wrs[i] = (struct ib_recv_wr) {
			.next = i + 1 < count ? &t->recv_wrs[i + 1] : NULL,
			.wr_id = i,
			.sg_list = &t->recv_sges[i],
			.num_sge = 1,
		};
	}
	ret = ib_post_recv(t->rx, t->recv_wrs, &bad_recv);
	if (ret) {
		pr_err("%s: post_recv: %d\n", KBUILD_MODNAME, ret);
		return ret;
	}

	for (i = 0; i < count; i++) {
		u8 *payload = t->send_buf + (size_t)i * PAYLOAD;

		memset(payload, (u8)i, PAYLOAD);
		put_unaligned_be32(i, payload);
		t->send_sges[i] = (struct ib_sge) {
			.addr = t->send_dma + (u64)i * PAYLOAD,
			.length = PAYLOAD,
			.lkey = t->pd->local_dma_lkey,
		};
		t->send_wrs[i] = (struct ib_ud_wr) {
			.wr = {
				.next = i + 1 < count ? &t->send_wrs[i + 1].wr : NULL,
				.wr_id = i,
				.sg_list = &t->send_sges[i],
				.num_sge = 1,
				.opcode = IB_WR_SEND,
				.send_flags = IB_SEND_SIGNALED,
			},
			.ah = t->ah,
			.remote_qpn = t->rx->qp_num,
			.remote_qkey = QKEY,
		};
	}
	ib_dma_sync_single_for_device(t->dev, t->send_dma, count * PAYLOAD,
				      DMA_TO_DEVICE);
	ret = ib_post_send(t->tx, &t->send_wrs[0].wr, &bad_send);
	if (ret)
		pr_err("%s: post_send: %d\n", KBUILD_MODNAME, ret);
	return ret;
}

static bool payload_intact(struct ud_batch *t, u32 index)
{
	const u8 *payload = t->recv_buf + (size_t)index * RECV_LEN + GRH_LEN;
	u32 sent = get_unaligned_be32(payload);
	u32 k;

	if (sent >= count || test_and_set_bit(sent, t->received))
		return false;
	for (k = sizeof(u32); k < PAYLOAD; k++)
		if (payload[k] != (u8)sent)
			return false;
	return true;
}

static int wait_for_all(struct ud_batch *t, u32 *sent, u32 *received)
{
	unsigned long deadline = jiffies + msecs_to_jiffies(timeout_ms);
	struct ib_wc wcs[16];
	int n, k;

	while (*sent < count || *received < count) {
		bool idle = true;

		n = ib_poll_cq(t->send_cq, ARRAY_SIZE(wcs), wcs);
		for (k = 0; k < n; k++) {
			if (wcs[k].status != IB_WC_SUCCESS) {
				pr_err("%s: send %llu: %s\n", KBUILD_MODNAME,
				       wcs[k].wr_id,
				       ib_wc_status_msg(wcs[k].status));
				return -EIO;
			}
			(*sent)++;
			idle = false;
		}
		n = ib_poll_cq(t->recv_cq, ARRAY_SIZE(wcs), wcs);
		if (n > 0)
			ib_dma_sync_single_for_cpu(t->dev, t->recv_dma,
						   count * RECV_LEN,
						   DMA_FROM_DEVICE);
		for (k = 0; k < n; k++) {
			if (wcs[k].status != IB_WC_SUCCESS ||
			    wcs[k].byte_len != RECV_LEN ||
			    wcs[k].wr_id >= count ||
			    !payload_intact(t, wcs[k].wr_id)) {
				pr_err("%s: receive %llu: %s, %u bytes or payload wrong\n",
				       KBUILD_MODNAME, wcs[k].wr_id,
				       ib_wc_status_msg(wcs[k].status),
				       wcs[k].byte_len);
				return -EIO;
			}
			(*received)++;
			idle = false;
		}
		if (idle) {
			if (time_after(jiffies, deadline))
				return -ETIMEDOUT;
			usleep_range(1000, 2000);
		}
	}
	return 0;
}

static int __init ud_batch_init(void)
{
	struct ud_batch t = {};
	u32 sent = 0, received = 0;
	int ret;

	if (!count || count > 4096)
		return -EINVAL;
	t.dev = ib_device_get_by_name(dev_name_param, RDMA_DRIVER_UNKNOWN);
	if (!t.dev) {
		pr_err("%s: no device %s\n", KBUILD_MODNAME, dev_name_param);
		return -ENODEV;
	}
	ret = setup(&t);
	if (!ret)
		ret = post_all(&t);
	if (!ret)
		ret = wait_for_all(&t, &sent, &received);
	pr_info("%s: %s: %u of %u UD SENDs posted at once completed, %u received intact (%d)\n",
		KBUILD_MODNAME, dev_name_param, sent, count, received, ret);
	teardown(&t);
	ib_device_put(t.dev);
	return ret ? -EIO : 0;
}

static void __exit ud_batch_exit(void)
{
}

module_init(ud_batch_init);
module_exit(ud_batch_exit);
MODULE_DESCRIPTION("rxe_rs selftest: a kernel UD consumer's batch in one post");
MODULE_LICENSE("GPL");
