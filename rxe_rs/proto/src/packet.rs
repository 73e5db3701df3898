//! Validating a received RoCEv2 datagram before anything is looked up from it: lengths, BTH
//! version, known opcode, header room, ICRC (rdma_rxe once computed lengths from an unknown
//! opcode and read out of bounds: here nothing is trusted before it is checked).
// Values from the wire: no arithmetic that can overflow, wrap or divide by zero unchecked.
#![deny(clippy::arithmetic_side_effects)]

use super::{
    chunks::Chunks,
    headers::Bth,
    icrc::{icrc_of_chunks, Crc32, IPV4_HDR_BYTES, IPV6_HDR_BYTES, UDP_HDR_BYTES},
    opcode::{OpInfo, BTH_BYTES, ICRC_BYTES},
};

/// RoCEv2's UDP destination port.
pub const ROCE_V2_PORT: u16 = 4791;

/// Why a datagram was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// Not a well-formed RoCEv2 packet (lengths, version, unknown opcode, IP options...).
    Malformed,
    /// The invariant CRC does not match.
    BadIcrc,
}

/// A datagram that passed every check.
#[derive(Debug)]
pub struct Datagram<'a> {
    /// Its IP header (20 bytes for IPv4, 40 for IPv6): a UD receive buffer gets it as the GRH.
    pub ip_header: &'a [u8],
    /// The IP source address, as a GID (IPv4 addresses are IPv4-mapped).
    pub src_gid: [u8; 16],
    /// The IP destination address, as a GID (likewise).
    pub dst_gid: [u8; 16],
    /// Its base transport header.
    pub bth: Bth,
    /// What its opcode carries.
    pub info: OpInfo,
    /// The extended transport headers (after the BTH, before the payload).
    pub ext_headers: &'a [u8],
    /// The payload, without pad (where the receiver's buffers hold it: maybe in pieces).
    pub payload: Chunks<'a>,
    /// The QP of this host that sent it, when it came by local delivery, which knows (BTH has
    /// no source QP); `None` for a datagram from the wire.
    pub sender_qpn: Option<u32>,
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

/// The destination address of the IP datagram `ip` (4 bytes for IPv4, 16 for IPv6), or `None`
/// if `ip` does not start with a whole IPv4 or IPv6 header.
/// `::ffff:a.b.c.d` for IPv4 address `a`.
fn v4_mapped(a: &[u8]) -> [u8; 16] {
    let mut gid = [0u8; 16];
    gid[10] = 0xff;
    gid[11] = 0xff;
    gid[12..].copy_from_slice(a);
    gid
}

fn gid_of(a: &[u8]) -> [u8; 16] {
    let mut gid = [0u8; 16];
    gid.copy_from_slice(a);
    gid
}

/// The source address of an IP datagram (4 or 16 bytes), if it has an IP header.
pub fn source_address(ip: &[u8]) -> Option<&[u8]> {
    match ip.first().map(|b| b >> 4) {
        Some(4) if ip.len() >= IPV4_HDR_BYTES => Some(&ip[12..16]),
        Some(6) if ip.len() >= IPV6_HDR_BYTES => Some(&ip[8..24]),
        _ => None,
    }
}

pub fn destination_address(ip: &[u8]) -> Option<&[u8]> {
    match ip.first().map(|b| b >> 4) {
        Some(4) if ip.len() >= IPV4_HDR_BYTES => Some(&ip[16..20]),
        Some(6) if ip.len() >= IPV6_HDR_BYTES => Some(&ip[24..40]),
        _ => None,
    }
}

/// Bytes of a datagram a receiver must hold in its first piece for [`parse_chunks`]: the
/// largest IPv6, UDP and transport headers (or the whole datagram, if shorter).
pub const HEADER_BYTES_MAX: usize = 128;
const _: () =
    assert!(IPV6_HDR_BYTES + UDP_HDR_BYTES + super::opcode::MAX_HEADER_BYTES <= HEADER_BYTES_MAX);

/// Checks the IP datagram `ip` (from the IP header to the end of the buffer, which may be longer
/// than the datagram) and returns its parts.
pub fn parse<'a>(ip: &'a [u8], crc: &impl Crc32) -> Result<Datagram<'a>, DropReason> {
    parse_chunks(Chunks::of(ip), crc)
}

/// [`parse`] of a datagram held in pieces (an skb's head and fragments), which may run past
/// its end. Its headers must lie in the first piece (a datagram whose first piece holds less
/// than [`HEADER_BYTES_MAX`] bytes of it, or all of it, may be dropped as malformed): only the
/// payload, pad and ICRC are read from the others.
pub fn parse_chunks<'a>(ip: Chunks<'a>, crc: &impl Crc32) -> Result<Datagram<'a>, DropReason> {
    use DropReason::Malformed;
    let head = ip.head();
    let (ip_len, total) = match head.first().map(|b| b >> 4) {
        Some(4) if head.len() >= IPV4_HDR_BYTES => {
            // No IP options: neither rdma_rxe nor RoCE NICs send them.
            if head[0] & 0xf != 5 || head[9] != 17 {
                return Err(Malformed);
            }
            (IPV4_HDR_BYTES, be16(&head[2..]) as usize)
        }
        Some(6) if head.len() >= IPV6_HDR_BYTES => {
            if head[6] != 17 {
                return Err(Malformed);
            }
            (
                IPV6_HDR_BYTES,
                IPV6_HDR_BYTES.saturating_add(be16(&head[4..]).into()),
            )
        }
        _ => return Err(Malformed),
    };
    let pkt = ip.sub(0, total).ok_or(Malformed)?;
    let head = pkt.head();
    // The UDP datagram's length, and its header from the first piece.
    let udp_len = total.checked_sub(ip_len).ok_or(Malformed)?;
    let udp = head.get(ip_len..).ok_or(Malformed)?;
    if udp_len < UDP_HDR_BYTES + BTH_BYTES + ICRC_BYTES
        || udp.len() < UDP_HDR_BYTES + BTH_BYTES
        || be16(&udp[4..]) as usize != udp_len
        || be16(&udp[2..]) != ROCE_V2_PORT
    {
        return Err(Malformed);
    }
    let transport = &udp[UDP_HDR_BYTES..];
    let transport_len = udp_len.saturating_sub(UDP_HDR_BYTES);
    let bth = Bth::parse(transport).ok_or(Malformed)?;
    let info = bth.op().info().ok_or(Malformed)?;
    let header_len = info.header_len();
    let ext_headers = transport.get(BTH_BYTES..header_len).ok_or(Malformed)?;
    let payload_end = transport_len
        .checked_sub(ICRC_BYTES.saturating_add(bth.pad.into()))
        .filter(|&end| end >= header_len)
        .ok_or(Malformed)?;
    let body_len = total.saturating_sub(ICRC_BYTES);
    let wire_icrc = pkt
        .sub(body_len, ICRC_BYTES)
        .and_then(|icrc| icrc.to_array())
        .map(u32::from_le_bytes)
        .ok_or(Malformed)?;
    let body = pkt.sub(0, body_len).ok_or(Malformed)?;
    if icrc_of_chunks(crc, body) != Some(wire_icrc) {
        return Err(DropReason::BadIcrc);
    }
    let (src_gid, dst_gid) = if ip_len == IPV4_HDR_BYTES {
        (v4_mapped(&head[12..16]), v4_mapped(&head[16..20]))
    } else {
        (gid_of(&head[8..24]), gid_of(&head[24..40]))
    };
    let payload_start = ip_len
        .saturating_add(UDP_HDR_BYTES)
        .saturating_add(header_len);
    let payload_len = payload_end.saturating_sub(header_len);
    Ok(Datagram {
        ip_header: &head[..ip_len],
        src_gid,
        dst_gid,
        bth,
        info,
        ext_headers,
        payload: pkt.sub(payload_start, payload_len).ok_or(Malformed)?,
        sender_qpn: None,
    })
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)] // test data, built from small constants
mod tests {
    extern crate std;
    use super::*;
    use crate::icrc::{icrc, SoftCrc32};
    use std::vec::Vec;

    #[test]
    fn destination_addresses() {
        let mut v4 = send_only(b"x");
        v4[16..20].copy_from_slice(&[10, 11, 0, 1]);
        assert_eq!(destination_address(&v4), Some(&[10u8, 11, 0, 1][..]));
        let mut v6 = std::vec![0u8; 40];
        v6[0] = 0x60;
        v6[24..40].copy_from_slice(&[0xfd; 16]);
        assert_eq!(destination_address(&v6), Some(&[0xfdu8; 16][..]));
        assert_eq!(destination_address(&v6[..39]), None, "truncated header");
        assert_eq!(destination_address(&[0x50; 40]), None, "not IP");
    }

    /// A valid IPv4 SEND ONLY of `payload`, with ICRC.
    fn send_only(payload: &[u8]) -> Vec<u8> {
        let pad = (4 - payload.len() % 4) % 4;
        let udp_len = 8 + 12 + payload.len() + pad + 4;
        let mut p = std::vec![0u8; 20 + udp_len];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&((20 + udp_len) as u16).to_be_bytes());
        p[8] = 64;
        p[9] = 17;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
        p[20..22].copy_from_slice(&0xc000u16.to_be_bytes());
        p[22..24].copy_from_slice(&4791u16.to_be_bytes());
        p[24..26].copy_from_slice(&(udp_len as u16).to_be_bytes());
        let bth = Bth {
            opcode: 0x04,
            pad: pad as u8,
            pkey: 0xffff,
            dest_qp: 0x11,
            psn: crate::psn::Psn::new(7),
            ..Default::default()
        };
        bth.write(&mut p[28..40]);
        p[40..40 + payload.len()].copy_from_slice(payload);
        let n = p.len();
        let crc = icrc(&SoftCrc32, &p[..n - 4]).unwrap();
        p[n - 4..].copy_from_slice(&crc.to_le_bytes());
        p
    }

    #[test]
    fn a_good_packet_parses() {
        let p = send_only(b"hello");
        let d = parse(&p, &SoftCrc32).unwrap();
        assert!(d.payload == b"hello"[..]);
        assert_eq!(d.bth.dest_qp, 0x11);
        assert!(d.ext_headers.is_empty());
        // Trailing bytes after the datagram (Ethernet padding) are ignored.
        let mut longer = p.clone();
        longer.extend_from_slice(&[0; 6]);
        assert!(parse(&longer, &SoftCrc32).is_ok());
    }

    #[test]
    fn every_kind_of_damage_is_dropped() {
        let good = send_only(b"hello");
        let damaged = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut p = good.clone();
            f(&mut p);
            parse(&p, &SoftCrc32).err()
        };
        assert_eq!(
            damaged(&|p| p[44] ^= 1),
            Some(DropReason::BadIcrc),
            "payload bit flip"
        );
        assert_eq!(
            damaged(&|p| p[28] = 0x1f),
            Some(DropReason::Malformed),
            "unknown opcode"
        );
        assert_eq!(
            damaged(&|p| p[29] |= 1),
            Some(DropReason::Malformed),
            "transport version"
        );
        assert_eq!(
            damaged(&|p| p[0] = 0x46),
            Some(DropReason::Malformed),
            "IP options"
        );
        assert_eq!(
            damaged(&|p| p[9] = 6),
            Some(DropReason::Malformed),
            "not UDP"
        );
        assert_eq!(
            damaged(&|p| p[22] = 0),
            Some(DropReason::Malformed),
            "other port"
        );
        assert_eq!(
            damaged(&|p| p[25] += 1),
            Some(DropReason::Malformed),
            "UDP length"
        );
        assert_eq!(
            damaged(&|p| p[3] += 4),
            Some(DropReason::Malformed),
            "IP length beyond the buffer"
        );
        assert_eq!(
            damaged(&|p| p[28] = 0x0a),
            Some(DropReason::Malformed),
            "RETH does not fit"
        );
        assert_eq!(
            damaged(&|p| p.truncate(30)),
            Some(DropReason::Malformed),
            "truncated"
        );
        assert_eq!(parse(&[], &SoftCrc32).err(), Some(DropReason::Malformed));
        assert_eq!(
            parse(&[0x45], &SoftCrc32).err(),
            Some(DropReason::Malformed)
        );
    }
}
