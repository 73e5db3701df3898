// SPDX-License-Identifier: GPL-2.0
/* Out-of-line wrappers for static inlines and macros: see helpers.h. */
#include <linux/if_vlan.h>
#include <linux/rtnetlink.h>
#include <linux/inetdevice.h>
#include <linux/mutex.h>
#include <linux/vmalloc.h>
#include <linux/highmem.h>
#include <linux/ioport.h>
#include <linux/libnvdimm.h>
#include <linux/scatterlist.h>
#include <linux/cpumask.h>
#include <linux/capability.h>
#include <net/net_namespace.h>
#include <net/netns/generic.h>
#include "helpers.h"

void rxe_rs_helper_dev_hold(struct net_device *ndev)
{
	dev_hold(ndev);
}

void rxe_rs_helper_dev_put(struct net_device *ndev)
{
	dev_put(ndev);
}

bool rxe_rs_helper_netif_running(const struct net_device *ndev)
{
	return netif_running(ndev);
}

bool rxe_rs_helper_netif_carrier_ok(const struct net_device *ndev)
{
	return netif_carrier_ok(ndev);
}

bool rxe_rs_helper_is_vlan_dev(const struct net_device *ndev)
{
	return is_vlan_dev(ndev);
}

/* The device under a VLAN device (no reference taken: the VLAN device holds one). */
struct net_device *rxe_rs_helper_vlan_real_dev(const struct net_device *ndev)
{
	return vlan_dev_real_dev(ndev);
}

/*
 * A reference on the namespace of `ndev`, if it is registered there and the namespace is not
 * dying; NULL otherwise. Under RTNL, so that the netdev cannot move meanwhile.
 */
struct net *rxe_rs_helper_get_dev_net(struct net_device *ndev)
{
	struct net *net = NULL;

	rtnl_lock();
	if (ndev->reg_state == NETREG_REGISTERED)
		net = maybe_get_net(dev_net(ndev));
	rtnl_unlock();
	return net;
}

struct net *rxe_rs_helper_get_init_net(void)
{
	return get_net(&init_net);
}

void rxe_rs_helper_put_net(struct net *net)
{
	put_net(net);
}

void *rxe_rs_helper_net_generic(const struct net *net, unsigned int id)
{
	return net_generic(net, id);
}

struct net_device *rxe_rs_helper_notifier_info_to_dev(void *info)
{
	return netdev_notifier_info_to_dev(info);
}

int rxe_rs_helper_udp_sock_create(struct net *net, bool ipv6, __be16 port, struct socket **sockp)
{
	struct udp_port_cfg cfg = {
		.family = ipv6 ? AF_INET6 : AF_INET,
		.local_udp_port = port,
		.ipv6_v6only = ipv6,
	};

	return udp_sock_create(net, &cfg, sockp);
}

void rxe_rs_helper_setup_udp_tunnel(struct net *net, struct socket *sock,
				    int (*encap_rcv)(struct sock *sk, struct sk_buff *skb))
{
	struct udp_tunnel_sock_cfg cfg = {
		.encap_type = 1,
		.encap_rcv = encap_rcv,
	};

	setup_udp_tunnel_sock(net, sock, &cfg);
}

void rxe_rs_helper_kfree_skb(struct sk_buff *skb)
{
	kfree_skb(skb);
}

int rxe_rs_helper_skb_linearize(struct sk_buff *skb)
{
	return skb_linearize(skb);
}

/*
 * Readies a received skb to be read where it lies: the first `pull` bytes from data on (or all
 * of them, if fewer) in its linear head, each page fragment addressable and not changing
 * under us. An skb that cannot be read so (a frag list, unreadable, shared or highmem
 * fragments) is made linear instead.
 */
int rxe_rs_helper_skb_prepare_rx(struct sk_buff *skb, unsigned int pull)
{
	int i;

	/* Shared frags (spliced page cache looped back) may change while we read them. */
	if (skb_has_frag_list(skb) || !skb_frags_readable(skb) || skb_has_shared_frag(skb))
		return skb_linearize(skb);
	for (i = 0; i < skb_shinfo(skb)->nr_frags; i++)
		if (PageHighMem(skb_frag_page(&skb_shinfo(skb)->frags[i])))
			return skb_linearize(skb);
	return pskb_may_pull(skb, min(pull, skb->len)) ? 0 : -ENOMEM;
}

unsigned int rxe_rs_helper_skb_headlen(const struct sk_buff *skb)
{
	return skb_headlen(skb);
}

unsigned int rxe_rs_helper_skb_nr_frags(const struct sk_buff *skb)
{
	return skb_shinfo(skb)->nr_frags;
}

/* Where page fragment `i` of a prepared skb is mapped, and its size. */
void *rxe_rs_helper_skb_frag(const struct sk_buff *skb, unsigned int i, unsigned int *size)
{
	const skb_frag_t *frag = &skb_shinfo(skb)->frags[i];

	*size = skb_frag_size(frag);
	return skb_frag_address(frag);
}

unsigned char *rxe_rs_helper_skb_network_header(const struct sk_buff *skb)
{
	return skb_network_header(skb);
}

struct net_device *rxe_rs_helper_skb_dev(const struct sk_buff *skb)
{
	return skb->dev;
}

/* pkt_type is a bitfield. */
bool rxe_rs_helper_skb_is_looped_back(const struct sk_buff *skb)
{
	return skb->pkt_type == PACKET_LOOPBACK;
}

struct ib_device *rxe_rs_helper_ib_alloc_device(size_t size)
{
	return _ib_alloc_device(size);
}

/*
 * A BH-safe lock taken with interrupts off (a kernel consumer that polls or queries under its
 * own spin_lock_irq): no softirq runs on this CPU until they are on again, so the plain lock
 * excludes the receive path there, where spin_unlock_bh would warn and run softirqs inside the
 * caller's section. Returns whether bottom halves were disabled.
 */
bool rxe_rs_helper_spin_lock_bh(spinlock_t *lock)
{
	if (irqs_disabled()) {
		spin_lock(lock);
		return false;
	}
	spin_lock_bh(lock);
	return true;
}

void rxe_rs_helper_spin_unlock_bh(spinlock_t *lock, bool bh)
{
	if (bh)
		spin_unlock_bh(lock);
	else
		spin_unlock(lock);
}

unsigned long rxe_rs_helper_spin_lock_irqsave(spinlock_t *lock)
{
	unsigned long flags;

	spin_lock_irqsave(lock, flags);
	return flags;
}

void rxe_rs_helper_spin_unlock_irqrestore(spinlock_t *lock, unsigned long flags)
{
	spin_unlock_irqrestore(lock, flags);
}

/* Serialises newlink: "is this netdev or name taken?" and the registration are one step. */
static DEFINE_MUTEX(rxe_rs_link_lock);

void rxe_rs_helper_link_lock(void)
{
	mutex_lock(&rxe_rs_link_lock);
}

void rxe_rs_helper_link_unlock(void)
{
	mutex_unlock(&rxe_rs_link_lock);
}

bool rxe_rs_helper_ib_device_try_get(struct ib_device *dev)
{
	return ib_device_try_get(dev);
}

struct ib_ucontext *rxe_rs_helper_udata_to_ucontext(struct ib_udata *udata)
{
	return udata ? container_of(udata, struct uverbs_attr_bundle, driver_udata)->context : NULL;
}

struct ib_udata *rxe_rs_helper_bundle_udata(struct uverbs_attr_bundle *attrs)
{
	return attrs ? &attrs->driver_udata : NULL;
}

/*
 * A ring's VMA: it cannot grow by mremap, and stays out of core dumps (remap_vmalloc_range's
 * flags, which the page-by-page mapping does not set).
 */
void rxe_rs_helper_vma_set_ring_flags(struct vm_area_struct *vma)
{
	vm_flags_set(vma, VM_DONTEXPAND | VM_DONTDUMP);
}

/*
 * Zeroed and charged to the caller's memory cgroup (vmalloc_user cannot charge); the size is
 * the process's choice, so a failure is its ENOMEM and not a warning in the log.
 */
void *rxe_rs_helper_vzalloc_account(unsigned long size)
{
	return __vmalloc(size, GFP_KERNEL_ACCOUNT | __GFP_ZERO | __GFP_NOWARN);
}

/* Lists the pinned pages of a umem in order; returns how many there are. */
size_t rxe_rs_helper_umem_pages(struct ib_umem *umem, struct page **pages, size_t max)
{
	struct sg_page_iter iter;
	size_t n = 0;

	for_each_sgtable_page(&umem->sgt_append.sgt, &iter, 0) {
		if (n < max)
			pages[n] = sg_page_iter_page(&iter);
		n++;
	}
	return n;
}

/*
 * The page of kernel virtual address `addr` (an SGE of a DMA MR: ib_virt_dma_to_page), or NULL
 * if it is not in the linear map (vmalloc, user or bogus addresses).
 */
struct page *rxe_rs_helper_kva_page(u64 addr)
{
	if (!virt_addr_valid((void *)(uintptr_t)addr))
		return NULL;
	return ib_virt_dma_to_page(addr);
}

/*
 * Copies len bytes between buf and page at offset (within one page): how 0 out of the page, 1
 * into it, 2 into it bypassing the CPU caches (persistent memory: memcpy_flushcache, so that a
 * FLUSH for persistence only has to order what was placed).
 */
void rxe_rs_helper_page_copy(struct page *page, size_t offset, void *buf, size_t len, int how)
{
	void *va = kmap_local_page(page);

	if (how == 2)
		memcpy_flushcache(va + offset, buf, len);
	else if (how == 1)
		memcpy(va + offset, buf, len);
	else
		memcpy(buf, va + offset, len);
	kunmap_local(va);
}

/*
 * Whether page is persistent memory, as the platform describes it (ACPI NFIT, or an e820
 * persistent-memory range); page_to_phys is a macro.
 */
bool rxe_rs_helper_page_is_pmem(struct page *page)
{
	return region_intersects(page_to_phys(page), PAGE_SIZE, IORESOURCE_MEM,
				 IORES_DESC_PERSISTENT_MEMORY) == REGION_INTERSECTS;
}

/*
 * Writes back the CPU cache lines over len bytes at offset of page (within one page), so that
 * stores there reach persistent memory (a FLUSH for persistence).
 */
void rxe_rs_helper_page_write_back(struct page *page, size_t offset, size_t len)
{
	void *va = kmap_local_page(page);

	arch_wb_cache_pmem(va + offset, len);
	kunmap_local(va);
}

/*
 * Orders and completes this CPU's stores around the caches and cache write-backs (sfence on
 * x86), as the pmem driver does before it calls data durable; a macro.
 */
void rxe_rs_helper_pmem_wmb(void)
{
	pmem_wmb();
}

/*
 * Whether this architecture can write CPU caches back to persistent memory at all (without
 * it, arch_wb_cache_pmem does nothing and memcpy_flushcache is a plain memcpy).
 */
bool rxe_rs_helper_has_pmem_api(void)
{
	return IS_ENABLED(CONFIG_ARCH_HAS_PMEM_API);
}

/* cond_resched is a macro. */
void rxe_rs_helper_cond_resched(void)
{
	cond_resched();
}

/* preempt_disable and preempt_enable are macros. */
void rxe_rs_helper_preempt_disable(void)
{
	preempt_disable();
}

void rxe_rs_helper_preempt_enable(void)
{
	preempt_enable();
}

/* local_bh_disable and local_bh_enable are static inlines. */
void rxe_rs_helper_local_bh_disable(void)
{
	local_bh_disable();
}

void rxe_rs_helper_local_bh_enable(void)
{
	local_bh_enable();
}

/* smp_processor_id is a macro (the caller has preemption off). */
unsigned int rxe_rs_helper_this_cpu(void)
{
	return smp_processor_id();
}

/*
 * CAP_NET_ADMIN is a macro. Without an audit record: a user listing QPs is not a denial to log,
 * once per QP.
 */
bool rxe_rs_helper_capable_net_admin(void)
{
	return ns_capable_noaudit(&init_user_ns, CAP_NET_ADMIN);
}

/* nr_cpu_ids is a macro when NR_CPUS is 1. */
unsigned int rxe_rs_helper_nr_cpu_ids(void)
{
	return nr_cpu_ids;
}

/*
 * The CPU to run the work of lane @lane (< nr_cpu_ids, one per possible CPU) on: its own CPU
 * while that is online, else one of the online CPUs. With preemption off (the caller's), the
 * CPU returned stays online until the caller enables it again. Never more than
 * nr_cpu_ids - 1.
 */
unsigned int rxe_rs_helper_online_cpu_of_lane(unsigned int lane)
{
	unsigned int cpu;

	if (lane < nr_cpu_ids && cpu_online(lane))
		return lane;
	cpu = cpumask_nth(lane % num_online_cpus(), cpu_online_mask);
	return cpu < nr_cpu_ids ? cpu : raw_smp_processor_id();
}

/*
 * An RC atomic on the 8 bytes at offset (8-byte aligned) of page: op 0 compare-and-swap of a
 * with b, 1 fetch-and-add of a, 2 a store of a after everything before it (IBTA 1.5's ATOMIC
 * WRITE). Returns the original value (0 for a store). The CPU's own atomics, so each is atomic
 * against every other atomic on these bytes: ours on any QP or CPU, and a process's own on
 * its memory (cmpxchg64, atomic64_fetch_add and smp_store_release are static inlines).
 */
u64 rxe_rs_helper_page_atomic64(struct page *page, size_t offset, int op, u64 a, u64 b)
{
	void *va = kmap_local_page(page);
	u64 *p = va + offset;
	u64 orig = 0;

	switch (op) {
	case 0:
		orig = cmpxchg64(p, a, b);
		break;
	case 1:
		orig = atomic64_fetch_add(a, (atomic64_t *)p);
		break;
	default:
		/* ATOMIC WRITE: visible only after every write the QP executed before it. */
		smp_store_release(p, a);
		break;
	}
	kunmap_local(va);
	return orig;
}

/* Transmit: an skb with room for the link-layer header, `len` bytes of datagram put. */
/*
 * Headroom for any link header and tunnel encapsulation (MAX_HEADER), not only ndev's: a
 * datagram may go in a batch, whose later members are segmented off at whatever device splits
 * it (a VLAN tag pushed in software, a tunnel's underlay), which pushes its link header, and
 * the tunnel's, into each one's own headroom without expanding it.
 */
struct sk_buff *rxe_rs_helper_alloc_tx_skb(struct net_device *ndev, unsigned int len)
{
	unsigned int headroom = LL_RESERVED_SPACE(ndev) + MAX_HEADER;
	struct sk_buff *skb = alloc_skb(headroom + len, GFP_ATOMIC);

	if (!skb)
		return NULL;
	skb_reserve(skb, headroom);
	skb_put(skb, len);
	return skb;
}

unsigned char *rxe_rs_helper_skb_data(const struct sk_buff *skb)
{
	return skb->data;
}

struct dst_entry *rxe_rs_helper_route_v4(struct net_device *ndev, const u8 *saddr, const u8 *daddr)
{
	struct flowi4 fl = {
		.flowi4_oif = ndev->ifindex,
		.flowi4_proto = IPPROTO_UDP,
	};
	struct rtable *rt;

	memcpy(&fl.saddr, saddr, 4);
	memcpy(&fl.daddr, daddr, 4);
	/*
	 * The namespace read and used under RCU: a netdev moved to another namespace does not
	 * wait for its references, and the old namespace may go meanwhile.
	 */
	rcu_read_lock();
	rt = ip_route_output_key(dev_net(ndev), &fl);
	rcu_read_unlock();
	return IS_ERR(rt) ? NULL : &rt->dst;
}

struct dst_entry *rxe_rs_helper_route_v6(struct net_device *ndev, const u8 *saddr, const u8 *daddr)
{
#if IS_ENABLED(CONFIG_IPV6)
	struct flowi6 fl = {
		.flowi6_oif = ndev->ifindex,
		.flowi6_proto = IPPROTO_UDP,
	};
	struct dst_entry *dst;

	memcpy(&fl.saddr, saddr, 16);
	memcpy(&fl.daddr, daddr, 16);
	rcu_read_lock(); /* as for IPv4 */
	dst = ipv6_stub->ipv6_dst_lookup_flow(dev_net(ndev), NULL, &fl, NULL);
	rcu_read_unlock();
	return IS_ERR(dst) ? NULL : dst;
#else
	return NULL;
#endif
}

/*
 * The device holding local address `addr` in the namespace of `in` (traffic between QPs of
 * this host comes back through the loopback device), with a reference taken; NULL if no device
 * has it.
 */
struct net_device *rxe_rs_helper_dev_by_local_addr_v4(const struct net_device *in, const u8 *addr)
{
	struct net_device *ndev;
	__be32 a;

	memcpy(&a, addr, 4);
	/* The namespace read and used under RCU (see rxe_rs_helper_route_v4). */
	rcu_read_lock();
	ndev = __ip_dev_find(dev_net(in), a, false);
	if (ndev)
		dev_hold(ndev);
	rcu_read_unlock();
	return ndev;
}

struct net_device *rxe_rs_helper_dev_by_local_addr_v6(const struct net_device *in, const u8 *addr)
{
#if IS_ENABLED(CONFIG_IPV6)
	struct net_device *ndev;
	struct in6_addr a;

	memcpy(&a, addr, 16);
	rcu_read_lock();
	ndev = ipv6_stub->ipv6_dev_find(dev_net(in), &a, NULL);
	if (ndev)
		dev_hold(ndev);
	rcu_read_unlock();
	return ndev;
#else
	return NULL;
#endif
}

void rxe_rs_helper_dst_hold(struct dst_entry *dst)
{
	dst_hold(dst);
}

/*
 * Whether a route leads to an address of this host, in any namespace: a local route out of
 * its namespace's lo (not one the kernel swapped to the blackhole device, a loopback device
 * too), without IPsec.
 */
bool rxe_rs_helper_dst_is_local(struct dst_entry *dst, bool ipv6)
{
	if (dst_xfrm(dst) || dst->dev != dev_net(dst->dev)->loopback_dev)
		return false;
	if (ipv6) {
#if IS_ENABLED(CONFIG_IPV6)
		return container_of(dst, struct rt6_info, dst)->rt6i_flags & RTF_LOCAL;
#else
		return false;
#endif
	}
	return container_of(dst, struct rtable, dst)->rt_type == RTN_LOCAL;
}

/*
 * Makes skb (an IP datagram from data on) look as it does when it comes back through lo:
 * network and transport headers set, protocol, no route; its device is the sender's, dev (its
 * rxe_rs device holds it until the local delivery queues are drained), which names the
 * namespace whose addresses say which device receives it.
 */
void rxe_rs_helper_skb_as_looped_back(struct sk_buff *skb, struct net_device *dev, bool ipv6)
{
	skb_reset_network_header(skb);
	skb_set_transport_header(skb, ipv6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr));
	skb->protocol = htons(ipv6 ? ETH_P_IPV6 : ETH_P_IP);
	skb->pkt_type = PACKET_HOST;
	skb->dev = dev;
}

void rxe_rs_helper_skb_queue_head_init(struct sk_buff_head *list)
{
	skb_queue_head_init(list);
}

/* skb_queue_len_lockless is a static inline (READ_ONCE of the length). */
u32 rxe_rs_helper_skb_queue_len_lockless(const struct sk_buff_head *list)
{
	return skb_queue_len_lockless(list);
}

void rxe_rs_helper_rcu_read_lock(void)
{
	rcu_read_lock();
}

void rxe_rs_helper_rcu_read_unlock(void)
{
	rcu_read_unlock();
}

unsigned int rxe_rs_helper_num_possible_cpus(void)
{
	return num_possible_cpus();
}

/*
 * Links `skb`, a datagram built like `head` (data at its IP header), into the frag_list of the
 * batch `head` leads, after `tail` (NULL for the first). `head` then owns it.
 */
void rxe_rs_helper_batch_link(struct sk_buff *head, struct sk_buff *tail, struct sk_buff *skb,
			      bool ipv6)
{
	skb_reset_network_header(skb);
	skb_set_transport_header(skb, ipv6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr));
	skb->next = NULL;
	if (tail)
		tail->next = skb;
	else
		skb_shinfo(head)->frag_list = skb;
	head->len += skb->len;
	head->data_len += skb->len;
	head->truesize += skb->truesize;
}

/*
 * Sends a complete IP datagram (skb->data at the IP header) along `dst`, whose reference the
 * skb takes. With `segs` > 1 the skb leads a batch (rxe_rs_helper_batch_link): it goes as one
 * UDP GSO skb of the fraglist kind, so the IP layers, the qdisc and the driver's kick are
 * passed once; segmentation (in software, at the device) hands each datagram on as it was
 * built, but for the IPv4 ID (the head's plus its index) and the length and checksum fields,
 * which it sets. CHECKSUM_UNNECESSARY: UDP's checksum is 0, the ICRC covers the packet.
 */
int rxe_rs_helper_ip_local_out(struct sk_buff *skb, struct dst_entry *dst, bool ipv6,
			       unsigned int segs)
{
	struct net *net = dev_net(dst->dev);
	unsigned int l3 = ipv6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr);
	int err;

	skb_dst_set(skb, dst);
	skb_reset_network_header(skb);
	skb_set_transport_header(skb, l3);
	skb->dev = dst->dev;
	memset(IPCB(skb), 0, sizeof(*IPCB(skb)));
	if (segs > 1) {
		struct skb_shared_info *shinfo = skb_shinfo(skb);

		shinfo->gso_size = skb_headlen(skb) - l3 - sizeof(struct udphdr);
		shinfo->gso_segs = segs;
		shinfo->gso_type = SKB_GSO_UDP_L4 | SKB_GSO_FRAGLIST;
		skb->ip_summed = CHECKSUM_UNNECESSARY;
		/*
		 * The whole batch's UDP length, as GRO leaves its skbs: a device that passes GSO
		 * skbs on (veth, a bridge) may deliver it unsegmented to a UDP stack, which trims
		 * the skb to that length before it segments it. Segmentation puts the head's own
		 * back.
		 */
		udp_hdr(skb)->len = htons(skb->len - l3);
	}
	/* net_xmit_eval() evaluates its argument twice: call once, then map. */
	if (ipv6) {
		skb->protocol = htons(ETH_P_IPV6);
		err = ip6_local_out(net, NULL, skb);
	} else {
		skb->protocol = htons(ETH_P_IP);
		err = ip_local_out(net, NULL, skb);
	}
	return net_xmit_eval(err);
}

void rxe_rs_helper_timer_setup(struct timer_list *timer, void (*func)(struct timer_list *))
{
	timer_setup(timer, func, 0);
}

unsigned long rxe_rs_helper_jiffies(void)
{
	return jiffies;
}

struct nlattr *rxe_rs_helper_driver_nest_start(struct sk_buff *msg)
{
	return nla_nest_start_noflag(msg, RDMA_NLDEV_ATTR_DRIVER);
}

void rxe_rs_helper_nest_end(struct sk_buff *msg, struct nlattr *nest)
{
	nla_nest_end(msg, nest);
}

void rxe_rs_helper_nest_cancel(struct sk_buff *msg, struct nlattr *nest)
{
	nla_nest_cancel(msg, nest);
}

void rxe_rs_helper_crypto_free_shash(struct crypto_shash *tfm)
{
	crypto_free_shash(tfm);
}

const char *rxe_rs_helper_crypto_shash_driver_name(struct crypto_shash *tfm)
{
	return crypto_shash_driver_name(tfm);
}

unsigned int rxe_rs_helper_crypto_shash_descsize(struct crypto_shash *tfm)
{
	return crypto_shash_descsize(tfm);
}

/*
 * The descriptor lives on this frame (SHASH_DESC_ON_STACK); the "crc32" drivers keep the CRC
 * register in it as a native u32 (the caller checked its size).
 */
int rxe_rs_helper_crc32_shash_update(struct crypto_shash *tfm, u32 *crc, const u8 *data,
				     unsigned int len)
{
	SHASH_DESC_ON_STACK(desc, tfm);
	u32 *state = shash_desc_ctx(desc);
	int err;

	desc->tfm = tfm;
	*state = *crc;
	err = crypto_shash_update(desc, data, len);
	if (!err)
		*crc = *state;
	return err;
}
