//! Raw IPv4 sockets: one that sends datagrams we build header and all, one that sees every UDP
//! datagram reaching this namespace. All of the program's `unsafe` is here.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

fn raw_socket(protocol: libc::c_int, flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: socket(2) takes no pointers; a negative return is an error.
    let fd = unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC | flags,
            protocol,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sends complete IPv4 datagrams (IPPROTO_RAW implies IP_HDRINCL): the kernel fills in the
/// header checksum and total length, and keeps our (zero) ID since DF is set.
pub struct Sender(OwnedFd);

impl Sender {
    pub fn new() -> io::Result<Self> {
        raw_socket(libc::IPPROTO_RAW, 0).map(Sender)
    }

    pub fn send(&self, datagram: &[u8], dst: Ipv4Addr) -> io::Result<()> {
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from(dst).to_be(),
            },
            sin_zero: [0; 8],
        };
        // SAFETY: `datagram` and `addr` are valid for the lengths given, for the whole call.
        let n = unsafe {
            libc::sendto(
                self.0.as_raw_fd(),
                datagram.as_ptr().cast(),
                datagram.len(),
                0,
                (&addr as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
}

/// Receives, without blocking, every UDP datagram (IP header included) reaching this namespace.
pub struct Sniffer(OwnedFd);

impl Sniffer {
    pub fn new() -> io::Result<Self> {
        raw_socket(libc::IPPROTO_UDP, libc::SOCK_NONBLOCK).map(Sniffer)
    }

    /// The next datagram's length in `buf`, or `None` when none is waiting.
    pub fn recv(&self, buf: &mut [u8]) -> Option<usize> {
        // SAFETY: `buf` is valid for writes of its length for the whole call.
        let n = unsafe { libc::recv(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        usize::try_from(n).ok()
    }
}
