//! Building RoCEv2 datagrams: IP and UDP headers, the transport headers, room for the payload,
//! its pad and the ICRC. The caller allocates the buffer ([`Frame::len`]), fills the payload
//! in place (no intermediate copy) and seals the frame with [`seal`].
// Lengths come from WQEs (payload) and the caller's buffer: nothing overflows unchecked.
#![deny(clippy::arithmetic_side_effects)]

use super::{
    atomic::{write_ack, AtomicEth},
    av::{AddressVector, Family},
    headers::{Aeth, Bth, Deth, Reth},
    icrc::{icrc, Crc32, IPV4_HDR_BYTES, IPV6_HDR_BYTES, UDP_HDR_BYTES},
    opcode::{
        AETH_BYTES, ATOMIC_ACK_ETH_BYTES, ATOMIC_ETH_BYTES, BTH_BYTES, DETH_BYTES, ICRC_BYTES,
        IMMDT_BYTES, RETH_BYTES,
    },
    packet::ROCE_V2_PORT,
    segment::pad_of,
};

/// IPv4 "don't fragment", set by rdma_rxe and RoCE NICs.
const IPV4_DF: u16 = 0x4000;
/// IP protocol number of UDP.
const IPPROTO_UDP: u8 = 17;

/// Everything before the payload of one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Source and destination (from the QP's address vector).
    pub av: AddressVector,
    /// UDP source port (spreads flows across ECMP paths and receive queues).
    pub sport: u16,
    /// The BTH; its `pad` is computed from the payload length.
    pub bth: Bth,
    /// Datagram extended header (UD: Q_Key and source QP).
    pub deth: Option<Deth>,
    /// RDMA extended header (first packet of a WRITE, READ request).
    pub reth: Option<Reth>,
    /// Atomic extended header (COMPARE SWAP and FETCH ADD requests).
    pub atomic_eth: Option<AtomicEth>,
    /// ACK extended header (ACKs, READ responses, atomic acknowledges).
    pub aeth: Option<Aeth>,
    /// The original value an atomic acknowledge returns (its AtomicAckETH).
    pub atomic_ack: Option<u64>,
    /// Immediate data, as the 4 bytes go on the wire.
    pub immdt: Option<[u8; 4]>,
    /// Payload bytes.
    pub payload_len: u32,
}

impl Frame {
    const fn ip_header_len(&self) -> Option<usize> {
        match self.av.families() {
            Some((Family::Ipv4(_), _)) => Some(IPV4_HDR_BYTES),
            Some((Family::Ipv6(_), _)) => Some(IPV6_HDR_BYTES),
            None => None,
        }
    }

    /// Bytes of the transport headers (BTH and extended headers).
    // At most the sum of the header sizes, constants.
    #[allow(clippy::arithmetic_side_effects)]
    fn transport_header_len(&self) -> usize {
        BTH_BYTES
            + if self.deth.is_some() { DETH_BYTES } else { 0 }
            + if self.reth.is_some() { RETH_BYTES } else { 0 }
            + if self.atomic_eth.is_some() {
                ATOMIC_ETH_BYTES
            } else {
                0
            }
            + if self.aeth.is_some() { AETH_BYTES } else { 0 }
            + if self.atomic_ack.is_some() {
                ATOMIC_ACK_ETH_BYTES
            } else {
                0
            }
            + if self.immdt.is_some() { IMMDT_BYTES } else { 0 }
    }

    /// Offset of the payload in the datagram.
    pub fn payload_offset(&self) -> Option<usize> {
        self.ip_header_len()?
            .checked_add(UDP_HDR_BYTES)?
            .checked_add(self.transport_header_len())
    }

    /// Bytes of the whole IP datagram, ICRC included; `None` for an address vector mixing
    /// families, or a datagram past 65535 bytes (IPv4's total length field; for IPv6, 40 bytes
    /// stricter than its fields need, far above any path MTU).
    // A frame is never empty (it has headers at least): no `is_empty` to go with this.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> Option<usize> {
        self.payload_offset()?
            .checked_add(usize::try_from(self.payload_len).ok()?)?
            .checked_add(usize::from(pad_of(self.payload_len)))?
            .checked_add(ICRC_BYTES)
            .filter(|&total| total <= usize::from(u16::MAX))
    }

    /// Writes the headers (everything before the payload) and zeroes the pad into `buf`, which
    /// must be [`Frame::len`] bytes. Returns the payload's range for the caller to fill.
    pub fn write_headers(&self, buf: &mut [u8]) -> Option<core::ops::Range<usize>> {
        let total = self.len()?;
        if buf.len() != total {
            return None;
        }
        // (`len` keeps it within the IP and UDP length fields.)
        let total_field = u16::try_from(total).ok()?;
        let mut rest = Unwritten(buf);
        let ip_len = match self.av.families()? {
            (Family::Ipv4(src), Family::Ipv4(dst)) => {
                let h = rest.take(IPV4_HDR_BYTES)?;
                h[0] = 0x45;
                h[1] = self.av.traffic_class;
                h[2..4].copy_from_slice(&total_field.to_be_bytes());
                // ID 0: unused with DF. A batch's later datagrams get their index
                // ([`set_ipv4_id`]).
                h[4..6].copy_from_slice(&0u16.to_be_bytes());
                h[6..8].copy_from_slice(&IPV4_DF.to_be_bytes());
                h[8] = self.av.hop_limit;
                h[9] = IPPROTO_UDP;
                h[12..16].copy_from_slice(&src);
                h[16..20].copy_from_slice(&dst);
                let sum = ipv4_checksum(h);
                h[10..12].copy_from_slice(&sum.to_be_bytes());
                IPV4_HDR_BYTES
            }
            (Family::Ipv6(src), Family::Ipv6(dst)) => {
                let h = rest.take(IPV6_HDR_BYTES)?;
                let word = (6u32 << 28)
                    | (u32::from(self.av.traffic_class) << 20)
                    | (self.av.flow_label & 0xf_ffff);
                h[0..4].copy_from_slice(&word.to_be_bytes());
                let payload_field = u16::try_from(total.checked_sub(IPV6_HDR_BYTES)?).ok()?;
                h[4..6].copy_from_slice(&payload_field.to_be_bytes());
                h[6] = IPPROTO_UDP;
                h[7] = self.av.hop_limit;
                h[8..24].copy_from_slice(&src);
                h[24..40].copy_from_slice(&dst);
                IPV6_HDR_BYTES
            }
            _ => return None,
        };
        let udp = rest.take(UDP_HDR_BYTES)?;
        let udp_len = u16::try_from(total.checked_sub(ip_len)?).ok()?;
        udp[0..2].copy_from_slice(&self.sport.to_be_bytes());
        udp[2..4].copy_from_slice(&ROCE_V2_PORT.to_be_bytes());
        udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
        udp[6..8].copy_from_slice(&[0, 0]); // no UDP checksum: the ICRC covers the packet
        let bth = Bth {
            pad: pad_of(self.payload_len),
            ..self.bth
        };
        bth.write(rest.take(BTH_BYTES)?);
        if let Some(deth) = &self.deth {
            deth.write(rest.take(DETH_BYTES)?);
        }
        if let Some(reth) = &self.reth {
            reth.write(rest.take(RETH_BYTES)?);
        }
        if let Some(eth) = &self.atomic_eth {
            eth.write(rest.take(ATOMIC_ETH_BYTES)?);
        }
        if let Some(aeth) = &self.aeth {
            aeth.write(rest.take(AETH_BYTES)?);
        }
        if let Some(orig) = self.atomic_ack {
            write_ack(orig, rest.take(ATOMIC_ACK_ETH_BYTES)?);
        }
        if let Some(imm) = &self.immdt {
            rest.take(IMMDT_BYTES)?.copy_from_slice(imm);
        }
        // What is left is the payload, its pad and the ICRC.
        let start = total.checked_sub(rest.len())?;
        let payload_len = usize::try_from(self.payload_len).ok()?;
        rest.take(payload_len)?;
        rest.take(usize::from(pad_of(self.payload_len)))?.fill(0);
        Some(start..start.checked_add(payload_len)?)
    }
}

/// What is left of a buffer being written front to back.
struct Unwritten<'b>(&'b mut [u8]);

impl<'b> Unwritten<'b> {
    /// Its next `n` bytes; `None` if fewer are left.
    fn take(&mut self, n: usize) -> Option<&'b mut [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = core::mem::take(&mut self.0).split_at_mut(n);
        self.0 = tail;
        Some(head)
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

/// Computes the ICRC of a datagram whose headers and payload are written and stores it in its
/// last four bytes.
pub fn seal(buf: &mut [u8], crc: &impl Crc32) -> Option<()> {
    let body_len = buf.len().checked_sub(ICRC_BYTES)?;
    let value = icrc(crc, &buf[..body_len])?;
    buf[body_len..].copy_from_slice(&value.to_le_bytes());
    Some(())
}

/// Gives an IPv4 datagram that [`Frame::write_headers`] wrote the ID `id`, and its header
/// checksum to match; before [`seal`], as the ICRC covers the ID. The kernel's segmentation of
/// a batch of datagrams sent as one sets each one's ID to its index in the batch, so that is
/// the ID its ICRC must be computed with. An IPv6 datagram has no ID: left as it is.
pub fn set_ipv4_id(buf: &mut [u8], id: u16) {
    if buf.len() >= IPV4_HDR_BYTES && buf[0] >> 4 == 4 {
        buf[4..6].copy_from_slice(&id.to_be_bytes());
        let sum = ipv4_checksum(&buf[..IPV4_HDR_BYTES]);
        buf[10..12].copy_from_slice(&sum.to_be_bytes());
    }
}

/// The IPv4 header checksum of `h` (20 bytes, checksum field included as it is).
fn ipv4_checksum(h: &[u8]) -> u16 {
    // Ten 16-bit words (the header is 20 bytes): the sum cannot wrap.
    let mut sum = 0u32;
    for (i, pair) in h.chunks_exact(2).enumerate() {
        if i != 5 {
            sum = sum.wrapping_add(u32::from(u16::from_be_bytes([pair[0], pair[1]])));
        }
    }
    while sum > 0xffff {
        sum = (sum & 0xffff).wrapping_add(sum >> 16);
    }
    !(sum as u16)
}

/// The UDP source port of a QP, as rdma_rxe picks it: 0xC000 plus a 14-bit hash of the QPN.
pub const fn qp_source_port(qpn: u32) -> u16 {
    // hash_32(qpn, 14): the kernel's golden-ratio multiplicative hash.
    let hash = qpn.wrapping_mul(0x61c8_8647) >> (32 - 14);
    0xc000 | hash as u16
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::{
        headers::{NakCode, Syndrome},
        icrc::SoftCrc32,
        opcode::Opcode,
        packet::parse,
        psn::Psn,
    };
    use std::vec;

    fn v4(a: [u8; 4]) -> [u8; 16] {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&a);
        g
    }

    fn frame(av: AddressVector, opcode: Opcode, payload_len: u32) -> Frame {
        Frame {
            av,
            sport: qp_source_port(17),
            bth: Bth {
                opcode: opcode.0,
                pkey: 0xffff,
                dest_qp: 0x11,
                psn: Psn::new(7),
                ack_req: true,
                ..Default::default()
            },
            deth: None,
            reth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack: None,
            immdt: None,
            payload_len,
        }
    }

    fn build(f: &Frame, fill: u8) -> std::vec::Vec<u8> {
        let mut buf = vec![0xaau8; f.len().unwrap()];
        let payload = f.write_headers(&mut buf).unwrap();
        buf[payload].fill(fill);
        seal(&mut buf, &SoftCrc32).unwrap();
        buf
    }

    /// fd00::1 and fd00::2.
    fn v6_pair() -> ([u8; 16], [u8; 16]) {
        let mut s = [0u8; 16];
        s[0] = 0xfd;
        s[15] = 1;
        let mut d = s;
        d[15] = 2;
        (s, d)
    }

    /// 10.0.0.1 to 10.0.0.2, hop limit 64.
    fn v4_av() -> AddressVector {
        AddressVector {
            sgid: v4([10, 0, 0, 1]),
            dgid: v4([10, 0, 0, 2]),
            hop_limit: 64,
            ..Default::default()
        }
    }

    #[test]
    fn a_built_ipv4_write_parses_back() {
        let av = v4_av();
        let mut f = frame(av, Opcode::RC_WRITE_ONLY_IMM, 13);
        f.reth = Some(Reth {
            va: 0x1000,
            rkey: 0x1234,
            dma_len: 13,
        });
        f.immdt = Some([1, 2, 3, 4]);
        let buf = build(&f, 0x5a);
        assert_eq!(buf.len(), 20 + 8 + 12 + 16 + 4 + 13 + 3 + 4);
        assert_eq!(
            ipv4_checksum(&buf[..20]),
            u16::from_be_bytes([buf[10], buf[11]]),
            "header checksum"
        );
        let d = parse(&buf, &SoftCrc32).unwrap();
        assert_eq!(d.bth.op(), Opcode::RC_WRITE_ONLY_IMM);
        assert_eq!((d.bth.pad, d.bth.psn.get(), d.bth.dest_qp), (3, 7, 0x11));
        assert_eq!(Reth::parse(d.ext_headers), f.reth);
        assert_eq!(&d.ext_headers[16..], &[1, 2, 3, 4]);
        assert!(d.payload == [0x5a; 13][..]);
    }

    #[test]
    fn the_id_a_batch_gives_is_covered_by_the_icrc_and_the_header_checksum() {
        let av = v4_av();
        let f = frame(av, Opcode::RC_SEND_MIDDLE, 64);
        let mut buf = vec![0u8; f.len().unwrap()];
        let payload = f.write_headers(&mut buf).unwrap();
        buf[payload].fill(3);
        set_ipv4_id(&mut buf, 9);
        seal(&mut buf, &SoftCrc32).unwrap();
        assert_eq!(&buf[4..6], &[0, 9]);
        assert_eq!(
            ipv4_checksum(&buf[..20]),
            u16::from_be_bytes([buf[10], buf[11]])
        );
        assert!(parse(&buf, &SoftCrc32).is_ok());
        // Segmentation giving it another ID than the one sealed would break its ICRC.
        let mut other = buf.clone();
        other[4..6].copy_from_slice(&8u16.to_be_bytes());
        assert!(parse(&other, &SoftCrc32).is_err());
        // IPv6 has no ID: nothing changes.
        let av6 = AddressVector {
            sgid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            dgid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
            hop_limit: 64,
            ..Default::default()
        };
        let f6 = frame(av6, Opcode::RC_SEND_MIDDLE, 64);
        let mut buf6 = vec![0u8; f6.len().unwrap()];
        f6.write_headers(&mut buf6).unwrap();
        let before = buf6.clone();
        set_ipv4_id(&mut buf6, 9);
        assert_eq!(buf6, before);
    }

    #[test]
    fn a_built_ud_send_carries_its_deth_before_the_immediate() {
        let av = AddressVector {
            sgid: v4([10, 0, 0, 1]),
            dgid: v4([10, 0, 0, 2]),
            hop_limit: 64,
            ..Default::default()
        };
        let mut f = frame(av, Opcode::UD_SEND_ONLY_IMM, 5);
        f.bth = Bth::ud(Opcode::UD_SEND_ONLY_IMM.0, 0x12_3456, Psn::new(9), true);
        f.deth = Some(Deth {
            qkey: 0x0123_4567,
            src_qp: 0xab_cdef,
        });
        f.immdt = Some([9, 8, 7, 6]);
        let buf = build(&f, 0x11);
        assert_eq!(buf.len(), 20 + 8 + 12 + 8 + 4 + 5 + 3 + 4);
        // DETH on the wire: Q_Key, a reserved byte, the source QPN.
        assert_eq!(&buf[40..48], &[0x01, 0x23, 0x45, 0x67, 0, 0xab, 0xcd, 0xef]);
        let d = parse(&buf, &SoftCrc32).unwrap();
        assert!(d.info.deth && d.info.immdt && !d.bth.ack_req && d.bth.solicited);
        assert_eq!(d.bth.dest_qp, 0x12_3456);
        assert_eq!(Deth::parse(d.ext_headers), f.deth);
        assert_eq!(&d.ext_headers[8..], &[9, 8, 7, 6]);
        assert!(d.payload == [0x11; 5][..]);
        assert_eq!(d.ip_header, &buf[..20]);
    }

    #[test]
    fn a_built_ipv6_nak_parses_back() {
        let (s, d6) = v6_pair();
        let av = AddressVector {
            sgid: s,
            dgid: d6,
            hop_limit: 255,
            flow_label: 0x12345,
            traffic_class: 3,
        };
        let mut f = frame(av, Opcode::RC_ACK, 0);
        f.aeth = Some(Aeth {
            syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
            msn: 5,
        });
        let buf = build(&f, 0);
        assert_eq!(buf.len(), 40 + 8 + 12 + 4 + 4);
        assert_eq!(&buf[4..6], &28u16.to_be_bytes(), "payload length");
        assert_eq!(&buf[44..46], &28u16.to_be_bytes(), "UDP length");
        assert_eq!(
            &buf[..4],
            &[0x60, 0x31, 0x23, 0x45],
            "version, class, flow label"
        );
        let d = parse(&buf, &SoftCrc32).unwrap();
        assert_eq!(Aeth::parse(d.ext_headers), f.aeth);
        assert!(d.payload.is_empty());
    }

    #[test]
    fn built_atomics_and_their_acknowledges_parse_back() {
        use crate::atomic::{parse_ack, AtomicEth, AtomicOp};
        let av = AddressVector {
            sgid: v4([10, 0, 0, 1]),
            dgid: v4([10, 0, 0, 2]),
            hop_limit: 64,
            ..Default::default()
        };
        let op = AtomicOp::FetchAdd { add: 7 };
        let mut f = frame(av, op.opcode(), 0);
        f.atomic_eth = Some(AtomicEth::of(op, 0x1000, 0x0abc));
        let buf = build(&f, 0);
        assert_eq!(buf.len(), 20 + 8 + 12 + 28 + 4);
        let d = parse(&buf, &SoftCrc32).unwrap();
        assert!(d.info.atomic_eth && d.payload.is_empty());
        let eth = AtomicEth::parse(d.ext_headers).unwrap();
        assert_eq!(eth.op(d.bth.op()), Some(op));
        assert_eq!((eth.va, eth.rkey), (0x1000, 0x0abc));

        let mut f = frame(av, Opcode::RC_ATOMIC_ACK, 0);
        f.aeth = Some(Aeth {
            syndrome: Syndrome::Ack { credits: 31 },
            msn: 3,
        });
        f.atomic_ack = Some(0x0102_0304_0506_0708);
        let buf = build(&f, 0);
        assert_eq!(buf.len(), 20 + 8 + 12 + 4 + 8 + 4);
        let d = parse(&buf, &SoftCrc32).unwrap();
        assert!(d.info.aeth && d.info.atomic_ack_eth);
        assert_eq!(Aeth::parse(d.ext_headers), f.aeth);
        assert_eq!(parse_ack(&d.ext_headers[4..]), f.atomic_ack);
    }

    #[test]
    fn mixed_families_and_wrong_buffers_are_refused() {
        let mut s = [0u8; 16];
        s[0] = 0xfd;
        let av = AddressVector {
            sgid: s,
            dgid: v4([10, 0, 0, 2]),
            ..Default::default()
        };
        assert_eq!(frame(av, Opcode::RC_SEND_ONLY, 1).len(), None);
        let ok = AddressVector {
            sgid: v4([1, 1, 1, 1]),
            dgid: v4([2, 2, 2, 2]),
            ..Default::default()
        };
        assert_eq!(
            frame(ok, Opcode::RC_SEND_ONLY, 1).write_headers(&mut [0u8; 10]),
            None
        );
    }

    #[test]
    fn a_datagram_past_the_ip_length_field_is_refused() {
        let av = AddressVector {
            sgid: v4([1, 1, 1, 1]),
            dgid: v4([2, 2, 2, 2]),
            ..Default::default()
        };
        // 20 + 8 + 12 bytes of headers and 4 of ICRC: 65488 bytes of payload (no pad) fill
        // 65532 bytes, the largest that fits; one more needs a pad of 3, 65536.
        let f = frame(av, Opcode::RC_SEND_ONLY, 65488);
        assert_eq!(f.len(), Some(65532));
        let buf = build(&f, 0x5a);
        assert_eq!(&buf[2..4], &65532u16.to_be_bytes(), "IP total length");
        assert_eq!(&buf[24..26], &65512u16.to_be_bytes(), "UDP length");
        assert_eq!(parse(&buf, &SoftCrc32).unwrap().payload.len(), 65488);
        for payload_len in [65489, u32::MAX] {
            let f = frame(av, Opcode::RC_SEND_ONLY, payload_len);
            assert_eq!(f.len(), None, "{payload_len}");
            assert_eq!(f.write_headers(&mut [0u8; 64]), None);
        }
    }

    #[test]
    fn an_ipv6_datagram_past_65535_bytes_is_refused() {
        let (s, d) = v6_pair();
        let av = AddressVector {
            sgid: s,
            dgid: d,
            hop_limit: 64,
            ..Default::default()
        };
        // 40 + 8 + 12 bytes of headers and 4 of ICRC: 65468 bytes of payload (no pad) fill
        // 65532 bytes; one more needs a pad of 3, 65536.
        let f = frame(av, Opcode::RC_SEND_ONLY, 65468);
        assert_eq!(f.len(), Some(65532));
        let buf = build(&f, 0x5a);
        assert_eq!(&buf[4..6], &65492u16.to_be_bytes(), "IPv6 payload length");
        assert_eq!(&buf[44..46], &65492u16.to_be_bytes(), "UDP length");
        assert_eq!(parse(&buf, &SoftCrc32).unwrap().payload.len(), 65468);
        let f = frame(av, Opcode::RC_SEND_ONLY, 65469);
        assert_eq!(f.len(), None);
        assert_eq!(f.write_headers(&mut [0u8; 64]), None);
    }

    #[test]
    fn the_pad_is_zeroed_whatever_the_buffer_held() {
        for payload_len in 1..=4u32 {
            let f = frame(v4_av(), Opcode::RC_SEND_ONLY, payload_len);
            let pad = usize::from(pad_of(payload_len));
            assert_eq!(pad, (4 - payload_len as usize % 4) % 4);
            let mut buf = vec![0xaau8; f.len().unwrap()];
            let payload = f.write_headers(&mut buf).unwrap();
            assert_eq!(payload.len(), payload_len as usize);
            let icrc_at = buf.len() - ICRC_BYTES;
            assert_eq!(
                payload.end + pad,
                icrc_at,
                "the pad ends where the ICRC starts"
            );
            assert!(
                buf[payload.end..icrc_at].iter().all(|&b| b == 0),
                "{payload_len}"
            );
            assert!(
                buf[payload].iter().all(|&b| b == 0xaa),
                "the payload is the caller's"
            );
            assert_eq!(buf[20 + 8 + 1] >> 4 & 3, pad as u8, "the BTH's pad count");
        }
    }

    #[test]
    fn source_ports_match_rdma_rxe() {
        // The sport rdma_rxe used for QPN 17 in the golden capture.
        assert_eq!(qp_source_port(17) & 0xc000, 0xc000);
        assert_ne!(qp_source_port(17), qp_source_port(18));
    }
}
