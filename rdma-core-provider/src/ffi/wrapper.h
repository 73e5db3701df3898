/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* What bindgen reads for the provider: libibverbs and the kernel's uverbs ABI. */
#include <infiniband/verbs.h>
#include <rdma/ib_user_verbs.h>
