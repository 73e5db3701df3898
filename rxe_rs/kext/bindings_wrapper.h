/* SPDX-License-Identifier: GPL-2.0 */
/* The C API rxe_rs binds to: bindgen input. */
#include <linux/netdevice.h>
#include <linux/if_vlan.h>
#include <linux/crc32.h>
#include <crypto/hash.h>
#include <linux/vmalloc.h>
#include <net/udp_tunnel.h>
#include <net/net_namespace.h>
#include <net/netns/generic.h>
#include <rdma/ib_verbs.h>
#include <rdma/ib_umem.h>
#include <rdma/ib_cache.h>
#include <rdma/ib_mad.h>
#include <rdma/rdma_netlink.h>
#include <rdma/uverbs_ioctl.h>
#include <uapi/rdma/ib_user_verbs.h>
#include "helpers.h"
