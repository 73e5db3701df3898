// SPDX-License-Identifier: GPL-2.0
//! Kernel UDP sockets in encapsulation mode: every datagram for the port is handed to us.

use super::{bindings, netns::NetNs, skb::SkBuff};
use core::{marker::PhantomData, ptr::NonNull};
use kernel::{error::to_result, prelude::*};

/// Consumes the datagrams of a [`UdpTunnel`], in softirq context.
pub(crate) trait EncapReceiver {
    /// One datagram; `skb->data` points at the UDP header.
    fn receive(skb: SkBuff);
}

/// A kernel UDP socket bound to a port in one network namespace, released on drop (before the
/// namespace goes: see [`super::netns::PernetData`]).
pub(crate) struct UdpTunnel<T: EncapReceiver> {
    sock: NonNull<bindings::socket>,
    _receiver: PhantomData<T>,
}

impl<T: EncapReceiver> UdpTunnel<T> {
    /// Binds `port` in `net` (IPv4, or IPv6-only when `ipv6`) and routes its datagrams to
    /// `T`. Fails with `EADDRINUSE` when another socket (say, rdma_rxe's) holds the port.
    pub(crate) fn bind(net: &NetNs, ipv6: bool, port: u16) -> Result<Self> {
        let mut sock: *mut bindings::socket = core::ptr::null_mut();
        // SAFETY: `net` is held; `sock` is a valid out-pointer.
        to_result(unsafe {
            bindings::rxe_rs_helper_udp_sock_create(net.as_raw(), ipv6, port.to_be(), &mut sock)
        })?;
        let sock = NonNull::new(sock).ok_or(EINVAL)?;
        // SAFETY: `sock` was just created in `net` and is not yet receiving; `encap_recv`
        // matches the encap_rcv signature and lives as long as the module.
        unsafe {
            bindings::rxe_rs_helper_setup_udp_tunnel(
                net.as_raw(),
                sock.as_ptr(),
                Some(Self::encap_recv),
            )
        };
        Ok(Self {
            sock,
            _receiver: PhantomData,
        })
    }

    /// `encap_recv` callback.
    ///
    /// # Safety
    ///
    /// Called by the UDP stack as `encap_rcv` of a socket we set up, with a valid socket and an
    /// skb whose ownership passes to us.
    unsafe extern "C" fn encap_recv(
        _sk: *mut bindings::sock,
        skb: *mut bindings::sk_buff,
    ) -> kernel::ffi::c_int {
        if let Some(skb) = NonNull::new(skb) {
            // SAFETY: returning 0 from encap_rcv means we consumed the skb: it is ours.
            T::receive(unsafe { SkBuff::from_raw(skb) });
        }
        0
    }
}

impl<T: EncapReceiver> Drop for UdpTunnel<T> {
    fn drop(&mut self) {
        // SAFETY: the socket was created in `bind` and is released exactly once; the release
        // waits for in-flight receive callbacks (synchronize_rcu).
        unsafe { bindings::udp_tunnel_sock_release(self.sock.as_ptr()) }
    }
}

// SAFETY: the socket pointer is only used at drop, from any thread.
unsafe impl<T: EncapReceiver> Send for UdpTunnel<T> {}
// SAFETY: no `&self` methods touch the socket.
unsafe impl<T: EncapReceiver> Sync for UdpTunnel<T> {}
