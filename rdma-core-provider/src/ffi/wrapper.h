#include <infiniband/verbs.h>
#include <rdma/ib_user_verbs.h>
