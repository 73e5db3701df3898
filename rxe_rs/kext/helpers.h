/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Out-of-line wrappers for the static inlines and macros rxe_rs needs: bindgen cannot see
 * those. Nothing else belongs here; logic stays in Rust.
 */
#ifndef RXE_RS_HELPERS_H
#define RXE_RS_HELPERS_H

#include <linux/netdevice.h>
#include <linux/if_vlan.h>
#include <linux/skbuff.h>
#include <net/udp_tunnel.h>
#include <net/route.h>
#include <net/ip.h>
#include <net/ipv6.h>
#include <net/ipv6_stubs.h>
#include <linux/timer.h>
#include <rdma/ib_verbs.h>
#include <rdma/uverbs_ioctl.h>
#include <rdma/ib_umem.h>
#include <rdma/restrack.h>
#include <rdma/rdma_netlink.h>
#include <net/netlink.h>
#include <crypto/hash.h>

void rxe_rs_helper_dev_hold(struct net_device *ndev);
void rxe_rs_helper_dev_put(struct net_device *ndev);
bool rxe_rs_helper_netif_running(const struct net_device *ndev);
bool rxe_rs_helper_netif_carrier_ok(const struct net_device *ndev);
bool rxe_rs_helper_is_vlan_dev(const struct net_device *ndev);
struct net_device *rxe_rs_helper_vlan_real_dev(const struct net_device *ndev);
struct net *rxe_rs_helper_get_dev_net(struct net_device *ndev);
struct net *rxe_rs_helper_get_init_net(void);
void rxe_rs_helper_put_net(struct net *net);
void *rxe_rs_helper_net_generic(const struct net *net, unsigned int id);
struct net_device *rxe_rs_helper_notifier_info_to_dev(void *info);

int rxe_rs_helper_udp_sock_create(struct net *net, bool ipv6, __be16 port, struct socket **sockp);
void rxe_rs_helper_setup_udp_tunnel(struct net *net, struct socket *sock,
				    int (*encap_rcv)(struct sock *sk, struct sk_buff *skb));
void rxe_rs_helper_kfree_skb(struct sk_buff *skb);
int rxe_rs_helper_skb_linearize(struct sk_buff *skb);
int rxe_rs_helper_skb_prepare_rx(struct sk_buff *skb, unsigned int pull);
unsigned int rxe_rs_helper_skb_headlen(const struct sk_buff *skb);
unsigned int rxe_rs_helper_skb_nr_frags(const struct sk_buff *skb);
void *rxe_rs_helper_skb_frag(const struct sk_buff *skb, unsigned int i, unsigned int *size);
unsigned char *rxe_rs_helper_skb_network_header(const struct sk_buff *skb);
struct net_device *rxe_rs_helper_skb_dev(const struct sk_buff *skb);
bool rxe_rs_helper_skb_is_looped_back(const struct sk_buff *skb);

struct sk_buff *rxe_rs_helper_alloc_tx_skb(struct net_device *ndev, unsigned int len);
unsigned char *rxe_rs_helper_skb_data(const struct sk_buff *skb);
struct dst_entry *rxe_rs_helper_route_v4(struct net_device *ndev, const u8 *saddr, const u8 *daddr);
struct dst_entry *rxe_rs_helper_route_v6(struct net_device *ndev, const u8 *saddr, const u8 *daddr);
struct net_device *rxe_rs_helper_dev_by_local_addr_v4(const struct net_device *in, const u8 *addr);
struct net_device *rxe_rs_helper_dev_by_local_addr_v6(const struct net_device *in, const u8 *addr);
void rxe_rs_helper_dst_hold(struct dst_entry *dst);
void rxe_rs_helper_batch_link(struct sk_buff *head, struct sk_buff *tail, struct sk_buff *skb,
			      bool ipv6);
int rxe_rs_helper_ip_local_out(struct sk_buff *skb, struct dst_entry *dst, bool ipv6,
			       unsigned int segs);
bool rxe_rs_helper_dst_is_local(struct dst_entry *dst, bool ipv6);
void rxe_rs_helper_skb_as_looped_back(struct sk_buff *skb, struct net_device *dev, bool ipv6);
void rxe_rs_helper_skb_queue_head_init(struct sk_buff_head *list);
u32 rxe_rs_helper_skb_queue_len_lockless(const struct sk_buff_head *list);
void rxe_rs_helper_rcu_read_lock(void);
void rxe_rs_helper_rcu_read_unlock(void);
unsigned int rxe_rs_helper_num_possible_cpus(void);

void rxe_rs_helper_timer_setup(struct timer_list *timer, void (*func)(struct timer_list *));
unsigned long rxe_rs_helper_jiffies(void);

struct ib_device *rxe_rs_helper_ib_alloc_device(size_t size);
bool rxe_rs_helper_ib_device_try_get(struct ib_device *dev);

bool rxe_rs_helper_spin_lock_bh(spinlock_t *lock);
void rxe_rs_helper_spin_unlock_bh(spinlock_t *lock, bool bh);
unsigned long rxe_rs_helper_spin_lock_irqsave(spinlock_t *lock);
void rxe_rs_helper_spin_unlock_irqrestore(spinlock_t *lock, unsigned long flags);

void rxe_rs_helper_link_lock(void);
void rxe_rs_helper_link_unlock(void);

void *rxe_rs_helper_vzalloc_account(unsigned long size);
/*
 * The nest of driver attributes in an `rdma resource` netlink message (nla_nest_start/end are
 * static inline). Start returns NULL when the message is full.
 */
struct nlattr *rxe_rs_helper_driver_nest_start(struct sk_buff *msg);
void rxe_rs_helper_nest_end(struct sk_buff *msg, struct nlattr *nest);
void rxe_rs_helper_nest_cancel(struct sk_buff *msg, struct nlattr *nest);
struct vm_area_struct;
void rxe_rs_helper_vma_set_ring_flags(struct vm_area_struct *vma);

struct ib_ucontext *rxe_rs_helper_udata_to_ucontext(struct ib_udata *udata);
struct ib_udata *rxe_rs_helper_bundle_udata(struct uverbs_attr_bundle *attrs);

size_t rxe_rs_helper_umem_pages(struct ib_umem *umem, struct page **pages, size_t max);
struct page *rxe_rs_helper_kva_page(u64 addr);
void rxe_rs_helper_page_copy(struct page *page, size_t offset, void *buf, size_t len, int how);
bool rxe_rs_helper_page_is_pmem(struct page *page);
void rxe_rs_helper_page_write_back(struct page *page, size_t offset, size_t len);
void rxe_rs_helper_cond_resched(void);
void rxe_rs_helper_preempt_disable(void);
void rxe_rs_helper_preempt_enable(void);
void rxe_rs_helper_local_bh_disable(void);
void rxe_rs_helper_local_bh_enable(void);
unsigned int rxe_rs_helper_this_cpu(void);
bool rxe_rs_helper_capable_net_admin(void);
unsigned int rxe_rs_helper_nr_cpu_ids(void);
unsigned int rxe_rs_helper_online_cpu_of_lane(unsigned int lane);
void rxe_rs_helper_pmem_wmb(void);
bool rxe_rs_helper_has_pmem_api(void);
u64 rxe_rs_helper_page_atomic64(struct page *page, size_t offset, int op, u64 a, u64 b);
void rxe_rs_helper_crypto_free_shash(struct crypto_shash *tfm);
const char *rxe_rs_helper_crypto_shash_driver_name(struct crypto_shash *tfm);
unsigned int rxe_rs_helper_crypto_shash_descsize(struct crypto_shash *tfm);
int rxe_rs_helper_crc32_shash_update(struct crypto_shash *tfm, u32 *crc, const u8 *data,
				     unsigned int len);

#endif
