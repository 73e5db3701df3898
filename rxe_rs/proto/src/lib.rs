//! The rxe_rs protocol engine: pure `core` Rust with no kernel dependency.
//!
//! The kernel module compiles this crate's files into itself (Kbuild, `--cfg MODULE`); on the
//! host `cargo test` runs the unit tests. Nothing here allocates, locks or touches a pointer.
#![cfg_attr(not(MODULE), no_std)]

pub mod ack_request;
pub mod addr;
pub mod admit;
pub mod atomic;
pub mod av;
pub mod chunks;
pub mod completer;
pub mod doorbell;
pub mod flush;
pub mod grh;
pub mod headers;
pub mod icrc;
pub mod mtu;
pub mod opcode;
pub mod packet;
pub mod psn;
pub mod read_reply;
pub mod read_requests;
pub mod responder;
pub mod rtt;
pub mod segment;
pub mod send_queue;
pub mod timers;
pub mod window;
pub mod wire;
