//! Bindgen output for `infiniband/verbs.h` and `rdma/ib_user_verbs.h`.
#![allow(
    dead_code,
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    clippy::all,
    unsafe_op_in_unsafe_fn,
    rustdoc::all
)]

include!(concat!(env!("OUT_DIR"), "/verbs.rs"));
