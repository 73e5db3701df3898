//! Golden packets: everything here was put on the wire by the in-tree C rdma_rxe (two VMs,
//! `ibv_rc_pingpong -s 2500` and perftest WRITE/READ, captured by tools/capture-rdma-rxe.sh).
//! Our parser, opcode table, ICRC, segmentation and header writer must agree with every packet.

use rxe_rs_proto::{
    headers::{Aeth, Bth, Deth, Reth},
    icrc::{icrc, SoftCrc32},
    mtu::IbMtu,
    opcode::{Opcode, ICRC_BYTES},
    segment::{packet_count, read_response_opcode, segment, MessageKind},
};

const PCAP: &[u8] = include_bytes!("data/rdma_rxe.pcap");

/// The RoCEv2 datagrams of the capture: (IP packet from the IP header on, incl. ICRC).
fn roce_packets() -> Vec<&'static [u8]> {
    let magic = u32::from_le_bytes(PCAP[0..4].try_into().unwrap());
    assert!(
        magic == 0xa1b2c3d4 || magic == 0xa1b23c4d,
        "little-endian pcap"
    );
    let linktype = u32::from_le_bytes(PCAP[20..24].try_into().unwrap());
    assert_eq!(linktype, 1, "Ethernet");
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= PCAP.len() {
        let caplen = u32::from_le_bytes(PCAP[at + 8..at + 12].try_into().unwrap()) as usize;
        let frame = &PCAP[at + 16..at + 16 + caplen];
        at += 16 + caplen;
        let ethertype = u16::from_be_bytes([frame[12], frame[13]]);
        let ip = &frame[14..];
        let (ip_len, proto, total) = match ethertype {
            0x0800 => (20, ip[9], u16::from_be_bytes([ip[2], ip[3]]) as usize),
            0x86dd => (40, ip[6], 40 + u16::from_be_bytes([ip[4], ip[5]]) as usize),
            _ => continue,
        };
        let udp = &ip[ip_len..];
        if proto != 17 || u16::from_be_bytes([udp[2], udp[3]]) != 4791 {
            continue;
        }
        out.push(&ip[..total]);
    }
    out
}

struct Packet {
    bth: Bth,
    /// Transport headers after the BTH, then payload, then pad.
    rest: &'static [u8],
    payload: usize,
}

fn parse(pkt: &'static [u8]) -> Packet {
    let ip_len = if pkt[0] >> 4 == 4 { 20 } else { 40 };
    let transport = &pkt[ip_len + 8..pkt.len() - ICRC_BYTES];
    let bth = Bth::parse(transport).expect("BTH");
    let info = bth
        .op()
        .info()
        .unwrap_or_else(|| panic!("unknown opcode {:#x}", bth.opcode));
    let hdr = info.header_len();
    assert!(transport.len() >= hdr + bth.pad as usize);
    Packet {
        bth,
        rest: &transport[12..],
        payload: transport.len() - hdr - bth.pad as usize,
    }
}

#[test]
fn the_capture_has_sends_writes_reads_and_acks() {
    let ops: Vec<Opcode> = roce_packets().iter().map(|p| parse(p).bth.op()).collect();
    assert!(ops.len() > 20, "{} packets", ops.len());
    for op in [
        Opcode::RC_SEND_FIRST,
        Opcode::RC_SEND_LAST,
        Opcode::RC_WRITE_FIRST,
        Opcode::RC_READ_REQUEST,
        Opcode::RC_READ_RESPONSE_FIRST,
        Opcode::RC_READ_RESPONSE_LAST,
        Opcode::RC_ACK,
    ] {
        assert!(ops.contains(&op), "no {op:?} in the capture");
    }
}

#[test]
fn our_icrc_matches_every_packet() {
    for pkt in roce_packets() {
        let (body, crc) = pkt.split_at(pkt.len() - ICRC_BYTES);
        let want = u32::from_le_bytes(crc.try_into().unwrap());
        assert_eq!(
            icrc(&SoftCrc32, body),
            Some(want),
            "ICRC of {:02x?}",
            &body[..48.min(body.len())]
        );
    }
}

#[test]
fn our_bth_writer_reproduces_every_header() {
    for pkt in roce_packets() {
        let ip_len = if pkt[0] >> 4 == 4 { 20 } else { 40 };
        let wire = &pkt[ip_len + 8..ip_len + 20];
        let mut ours = [0u8; 12];
        Bth::parse(wire).unwrap().write(&mut ours);
        assert_eq!(&ours, wire);
    }
}

#[test]
fn padding_keeps_payloads_word_aligned() {
    for pkt in roce_packets() {
        let p = parse(pkt);
        assert_eq!((p.payload + p.bth.pad as usize) % 4, 0);
    }
}

#[test]
fn acks_carry_valid_syndromes() {
    for pkt in roce_packets() {
        let p = parse(pkt);
        if p.bth.op().info().unwrap().aeth {
            Aeth::parse(p.rest).expect("valid AETH");
        }
    }
}

/// The request packet of `qp` with `psn` (retransmissions, e.g. after an RNR NAK, are identical).
fn request_at(packets: &[Packet], qp: u32, psn: rxe_rs_proto::psn::Psn) -> Option<&Packet> {
    packets
        .iter()
        .find(|p| p.bth.dest_qp == qp && p.bth.psn == psn && p.bth.op().info().unwrap().is_request)
}

/// Every multi-packet request message in the capture is cut exactly as `segment` cuts it.
#[test]
fn messages_are_segmented_as_we_segment_them() {
    let mtu = IbMtu::Mtu1024;
    let packets: Vec<Packet> = roce_packets().into_iter().map(parse).collect();
    let mut checked = 0;
    for first in &packets {
        let qp = first.bth.dest_qp;
        let (kind, len) = match first.bth.op() {
            Opcode::RC_WRITE_FIRST => (
                MessageKind::Write { imm: false },
                Reth::parse(first.rest).unwrap().dma_len,
            ),
            Opcode::RC_SEND_FIRST => {
                // The length of a SEND is the sum of its packets' payloads.
                let mut len = 0;
                for index in 0.. {
                    let p = request_at(&packets, qp, first.bth.psn.add(index))
                        .expect("whole message captured");
                    len += p.payload as u32;
                    if p.bth.op().info().unwrap().is_last {
                        break;
                    }
                }
                (
                    MessageKind::Send {
                        imm: false,
                        inv: false,
                    },
                    len,
                )
            }
            _ => continue,
        };
        for index in 0..packet_count(len, mtu) {
            let want = segment(kind, len, mtu, first.bth.psn, index);
            let got = request_at(&packets, qp, want.psn).expect("packet of the message");
            assert_eq!((got.bth.op(), got.payload as u32), (want.opcode, want.len));
        }
        checked += 1;
    }
    assert!(checked >= 2, "{checked} messages checked");
}

/// READ responses: one PSN per packet from the request's PSN, opcodes as we number them.
#[test]
fn read_responses_follow_the_request() {
    let mtu = IbMtu::Mtu1024;
    let packets: Vec<Packet> = roce_packets().into_iter().map(parse).collect();
    let mut checked = 0;
    for req in packets
        .iter()
        .filter(|p| p.bth.op() == Opcode::RC_READ_REQUEST)
    {
        let reth = Reth::parse(req.rest).unwrap();
        let count = packet_count(reth.dma_len, mtu);
        for index in 0..count {
            let psn = req.bth.psn.add(index);
            let resp = packets
                .iter()
                .find(|p| {
                    p.bth.psn == psn
                        && p.bth
                            .op()
                            .info()
                            .is_some_and(|i| i.is_read && !i.is_request)
                })
                .expect("a response for each PSN");
            assert_eq!(resp.bth.op(), read_response_opcode(index, count));
        }
        checked += 1;
    }
    assert!(checked >= 1);
}

/// Our receive-side validation accepts every packet rdma_rxe sends, and finds the payload.
#[test]
fn our_validation_accepts_every_packet() {
    for pkt in roce_packets() {
        let d = rxe_rs_proto::packet::parse(pkt, &SoftCrc32).expect("rdma_rxe packet rejected");
        assert_eq!(d.payload.len(), parse(pkt).payload);
    }
}

/// The same packets held in pieces as an skb holds them (a head with the headers, then
/// fragments, cut anywhere after the headers, in the ICRC too): the same payload, and a
/// flipped bit in any piece is still caught.
#[test]
fn packets_in_pieces_parse_as_whole_ones() {
    use rxe_rs_proto::{chunks::Chunks, packet::parse_chunks};
    for pkt in roce_packets() {
        let whole = rxe_rs_proto::packet::parse(pkt, &SoftCrc32).unwrap();
        let mut flat = vec![0u8; whole.payload.len()];
        whole.payload.copy_to(&mut flat).unwrap();
        let headers = 20 + 8 + whole.info.header_len();
        for cut in headers..pkt.len() {
            for second_cut in [cut, (cut + pkt.len()) / 2, pkt.len() - 1] {
                let rest: [&[u8]; 2] = [&pkt[cut..second_cut], &pkt[second_cut..]];
                let d = parse_chunks(Chunks::new(&pkt[..cut], &rest), &SoftCrc32)
                    .expect("cut packet rejected");
                assert!(d.payload == flat[..], "cut at {cut}/{second_cut}");
                assert_eq!(d.bth, whole.bth);
            }
            let mut damaged = pkt.to_vec();
            let at = cut + (pkt.len() - cut) / 2;
            damaged[at] ^= 0x10;
            let rest: [&[u8]; 1] = [&damaged[cut..]];
            assert!(
                parse_chunks(Chunks::new(&damaged[..cut], &rest), &SoftCrc32).is_err(),
                "bit flip at {at} (cut at {cut})"
            );
        }
    }
}

/// Rebuilding every packet from its parsed fields with our frame writer gives rdma_rxe's bytes:
/// IP and UDP headers (the IP ID aside, which is free with DF), transport headers, pad and ICRC.
#[test]
fn our_frame_writer_reproduces_every_packet() {
    use rxe_rs_proto::{
        av::AddressVector,
        wire::{seal, Frame},
    };
    for pkt in roce_packets() {
        assert_eq!(pkt[0], 0x45, "the capture is IPv4");
        let d = rxe_rs_proto::packet::parse(pkt, &SoftCrc32).unwrap();
        let gid = |a: &[u8]| {
            let mut g = [0u8; 16];
            g[10] = 0xff;
            g[11] = 0xff;
            g[12..].copy_from_slice(a);
            g
        };
        let av = AddressVector {
            sgid: gid(&pkt[12..16]),
            dgid: gid(&pkt[16..20]),
            flow_label: 0,
            hop_limit: pkt[8],
            traffic_class: pkt[1],
        };
        let ext = d.ext_headers;
        let frame = Frame {
            av,
            sport: u16::from_be_bytes([pkt[20], pkt[21]]),
            bth: d.bth,
            deth: d.info.deth.then(|| Deth::parse(ext).unwrap()),
            reth: d.info.reth.then(|| Reth::parse(ext).unwrap()),
            atomic_eth: None,
            aeth: d
                .info
                .aeth
                .then(|| Aeth::parse(&ext[if d.info.reth { 16 } else { 0 }..]).unwrap()),
            atomic_ack: None,
            immdt: d
                .info
                .immdt
                .then(|| ext[ext.len() - 4..].try_into().unwrap()),
            payload_len: d.payload.len() as u32,
        };
        let mut buf = vec![0u8; frame.len().unwrap()];
        let range = frame.write_headers(&mut buf).unwrap();
        d.payload.copy_to(&mut buf[range]).unwrap();
        // rdma_rxe picks an IP ID; ours is 0. Adopt theirs (and fix the checksum) to compare.
        buf[4..6].copy_from_slice(&pkt[4..6]);
        buf[10..12].copy_from_slice(&pkt[10..12]);
        seal(&mut buf, &SoftCrc32).unwrap();
        assert_eq!(
            &buf[..],
            pkt,
            "opcode {:#x} psn {}",
            d.bth.opcode,
            d.bth.psn.get()
        );
    }
}
