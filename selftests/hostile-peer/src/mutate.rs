//! What a hostile peer sends: RoCEv2 datagrams of random, structure-aware shapes with valid
//! ICRCs, aimed at QPs whose state it learns from their own traffic.

use std::net::Ipv4Addr;

use rxe_rs_proto::icrc::{icrc, SoftCrc32};

use crate::rng::Rng;

const ROCE_PORT: u16 = 4791;
/// The targets' path MTU.
const MTU: usize = 1024;
/// What fits in one IPv4 datagram on a 1500-byte link with the headers.
const MAX_PAYLOAD: usize = 1400;
const IP_UDP: usize = 28;
const BTH: usize = 12;
const PSN_MASK: u32 = 0xff_ffff;

const SEND_FIRST: u8 = 0x00;
const SEND_MIDDLE: u8 = 0x01;
const SEND_LAST_IMM: u8 = 0x03;
const SEND_ONLY_IMM: u8 = 0x05;
const WRITE_FIRST: u8 = 0x06;
const WRITE_MIDDLE: u8 = 0x07;
const WRITE_LAST_IMM: u8 = 0x09;
const WRITE_ONLY: u8 = 0x0a;
const WRITE_ONLY_IMM: u8 = 0x0b;
const READ_REQ: u8 = 0x0c;
const READ_FIRST: u8 = 0x0d;
const READ_MIDDLE: u8 = 0x0e;
const READ_LAST: u8 = 0x0f;
const READ_ONLY: u8 = 0x10;
const ACK: u8 = 0x11;
const ATOMIC_ACK: u8 = 0x12;
const CMP_SWAP: u8 = 0x13;
const FETCH_ADD: u8 = 0x14;
const SEND_LAST_INV: u8 = 0x16;
const SEND_ONLY_INV: u8 = 0x17;
const FLUSH: u8 = 0x1c;
const ATOMIC_WRITE: u8 = 0x1d;

/// RC requests: every SEND and WRITE form, READ, the atomics, SEND with invalidate, FLUSH,
/// ATOMIC WRITE.
const REQUESTS: [u8; 19] = [
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x13, 0x14, 0x16,
    0x17, 0x1c, 0x1d,
];
const RESPONSES: [u8; 6] = [
    READ_FIRST,
    READ_MIDDLE,
    READ_LAST,
    READ_ONLY,
    ACK,
    ATOMIC_ACK,
];
/// UC, UD, CNP, reserved RC codes, and an all-ones one.
const OTHER_OPCODES: [u8; 10] = [0x20, 0x24, 0x2a, 0x64, 0x65, 0x81, 0x15, 0x18, 0x1f, 0xff];

/// A QP that believes we are its peer.
pub struct Target {
    pub qpn: u32,
    pub peer_qpn: u32,
    pub rkey: u32,
    pub va: u64,
    pub size: u64,
    /// The PSN it expects next (from its ACKs and NAKs).
    epsn: u32,
    /// The PSN after its latest request to us (what our ACKs would acknowledge).
    sent_psn: u32,
}

impl Target {
    /// From `QPN:PEER_QPN:RKEY:VA:SIZE` (decimal).
    pub fn parse(s: &str) -> Option<Self> {
        let mut f = s.split(':').map(|x| x.parse::<u64>().ok());
        let mut next = || f.next().flatten();
        let (qpn, peer_qpn, rkey, va, size) = (next()?, next()?, next()?, next()?, next()?);
        Some(Target {
            qpn: u32::try_from(qpn).ok()?,
            peer_qpn: u32::try_from(peer_qpn).ok()?,
            rkey: u32::try_from(rkey).ok()?,
            va,
            size,
            epsn: 0,
            sent_psn: 0,
        })
    }
}

/// What was sent, by kind; printed as one JSON line at the end.
#[derive(Default)]
pub struct Stats {
    pub sent: u64,
    pub send_errors: u64,
    pub bad_icrc: u64,
    pub truncated: u64,
    pub to_targets: u64,
    pub to_victims: u64,
    pub random_qpn: u64,
    pub forged_source: u64,
    pub foreign_pkey: u64,
    pub learned: u64,
}

impl Stats {
    pub fn json(&self) -> String {
        format!(
            "{{\"sent\": {}, \"send_errors\": {}, \"bad_icrc\": {}, \"truncated\": {}, \"to_targets\": {}, \
             \"to_victims\": {}, \"random_qpn\": {}, \"forged_source\": {}, \"foreign_pkey\": {}, \"learned\": {}}}",
            self.sent,
            self.send_errors,
            self.bad_icrc,
            self.truncated,
            self.to_targets,
            self.to_victims,
            self.random_qpn,
            self.forged_source,
            self.foreign_pkey,
            self.learned
        )
    }
}

pub struct Mutator {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub targets: Vec<Target>,
    pub victims: Vec<u32>,
    pub rng: Rng,
    pub stats: Stats,
}

fn be16(buf: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(
        buf.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}

fn be32(buf: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(
        buf.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

impl Mutator {
    /// Tracks what a target expects from a datagram it sent us (IP header onwards).
    pub fn learn(&mut self, pkt: &[u8]) {
        let Some(&first) = pkt.first() else { return };
        let ihl = usize::from(first & 0x0f) * 4;
        let bth = ihl + 8;
        if be16(pkt, ihl + 2) != Some(ROCE_PORT) || pkt.len() < bth + BTH {
            return;
        }
        let op = pkt[bth];
        let (Some(dqpn), Some(psn)) = (be32(pkt, bth + 4), be32(pkt, bth + 8)) else {
            return;
        };
        let (dqpn, psn) = (dqpn & PSN_MASK, psn & PSN_MASK);
        let Some(t) = self.targets.iter_mut().find(|t| t.peer_qpn == dqpn) else {
            return;
        };
        if op == ACK && pkt.len() >= bth + BTH + 4 {
            // An ACK acknowledges through its PSN; a NAK names the PSN expected.
            let syndrome = pkt[bth + BTH];
            t.epsn = psn.wrapping_add(u32::from(syndrome >> 5 == 0)) & PSN_MASK;
            self.stats.learned += 1;
        } else if REQUESTS.contains(&op) {
            t.sent_psn = psn.wrapping_add(1) & PSN_MASK;
        }
    }

    fn psn(&mut self, epsn: u32) -> u32 {
        let r = &mut self.rng;
        let x = r.below(100);
        let psn = if x < 60 {
            epsn
        } else if x < 75 {
            epsn.wrapping_add(r.pick(&[u32::MAX, 1, 2]))
        } else if x < 90 {
            let behind = r.range(1, 4096) as u32;
            epsn.wrapping_add(r.pick(&[
                (1u32 << 23).wrapping_neg(),
                (1 << 23) - 1,
                1 << 23,
                behind.wrapping_neg(),
            ]))
        } else {
            r.u32()
        };
        psn & PSN_MASK
    }

    fn va(&mut self, t: usize) -> u64 {
        let (va, size) = (self.targets[t].va, self.targets[t].size);
        let inside = va.wrapping_add(self.rng.below(size.max(1)));
        let random = self.rng.u64();
        self.rng.pick(&[
            va,
            va.wrapping_add(size).wrapping_sub(1),
            va.wrapping_add(size),
            va.wrapping_sub(1),
            u64::MAX,
            u64::MAX - 4095,
            1 << 63,
            0,
            inside,
            random,
        ])
    }

    fn dma_len(&mut self, t: usize) -> u32 {
        let size = u32::try_from(self.targets[t].size).unwrap_or(u32::MAX);
        let small = self.rng.below(1 << 20) as u32;
        let random = self.rng.u32();
        self.rng.pick(&[
            0,
            1,
            8,
            MTU as u32,
            MTU as u32 + 1,
            size,
            size.wrapping_add(1),
            1 << 31,
            u32::MAX,
            small,
            random,
        ])
    }

    fn rkey(&mut self, t: usize) -> u32 {
        if self.rng.chance(0.8) {
            self.targets[t].rkey
        } else {
            self.rng.u32()
        }
    }

    fn payload_len(&mut self, op: u8) -> usize {
        let r = self.rng.range(0, MAX_PAYLOAD);
        match op {
            SEND_FIRST | SEND_MIDDLE | WRITE_FIRST | WRITE_MIDDLE | READ_FIRST | READ_MIDDLE => {
                self.rng.pick(&[MTU, MTU, MTU - 1, MTU + 1, 0, r])
            }
            READ_REQ | CMP_SWAP | FETCH_ADD | ACK | ATOMIC_ACK | FLUSH => {
                self.rng.pick(&[0, 0, 0, 4, 16])
            }
            ATOMIC_WRITE => self.rng.pick(&[8, 8, 8, 0, 4, 16]),
            _ => self.rng.pick(&[0, 1, 4, 100, MTU, MTU + 4, r]),
        }
    }

    /// Appends the extension headers `op` carries, with hostile field values.
    fn extension_headers(&mut self, op: u8, t: usize, out: &mut Vec<u8>) {
        let syndrome = {
            let random = self.rng.bits(8) as u32;
            self.rng
                .pick(&[0x00, 0x1f, 0x20, 0x60, 0x61, 0x62, 0x63, 0x64, random])
        };
        let aeth = (syndrome << 24 | self.rng.bits(24) as u32).to_be_bytes();
        let reth = |m: &mut Self, out: &mut Vec<u8>| {
            let (va, rkey, len) = (m.va(t), m.rkey(t), m.dma_len(t));
            out.extend_from_slice(&va.to_be_bytes());
            out.extend_from_slice(&rkey.to_be_bytes());
            out.extend_from_slice(&len.to_be_bytes());
        };
        let imm = self.rng.u32().to_be_bytes();
        match op {
            WRITE_FIRST | WRITE_ONLY | READ_REQ | ATOMIC_WRITE => reth(self, out),
            FLUSH => {
                // FETH: mostly global visibility over the range or the region, sometimes any
                // bits (persistence, reserved levels).
                let feth = if self.rng.chance(0.8) {
                    self.rng.pick(&[0x01u32, 0x11])
                } else {
                    self.rng.u32()
                };
                out.extend_from_slice(&feth.to_be_bytes());
                reth(self, out);
            }
            WRITE_ONLY_IMM => {
                reth(self, out);
                out.extend_from_slice(&imm);
            }
            SEND_LAST_IMM | SEND_ONLY_IMM | WRITE_LAST_IMM | SEND_LAST_INV | SEND_ONLY_INV => {
                out.extend_from_slice(&imm)
            }
            READ_FIRST | READ_LAST | READ_ONLY | ACK => out.extend_from_slice(&aeth),
            ATOMIC_ACK => {
                out.extend_from_slice(&aeth);
                out.extend_from_slice(&self.rng.u64().to_be_bytes());
            }
            CMP_SWAP | FETCH_ADD => {
                let va = self.va(t);
                let va = if self.rng.chance(0.7) { va & !7 } else { va };
                let rkey = self.rkey(t);
                out.extend_from_slice(&va.to_be_bytes());
                out.extend_from_slice(&rkey.to_be_bytes());
                out.extend_from_slice(&self.rng.u64().to_be_bytes());
                out.extend_from_slice(&self.rng.u64().to_be_bytes());
            }
            _ => {}
        }
    }

    /// Builds the next datagram (IPv4 header onwards, ICRC included) into `pkt`; returns where
    /// to send it.
    pub fn next(&mut self, pkt: &mut Vec<u8>) -> Ipv4Addr {
        let t = self.rng.range(0, self.targets.len());
        let (mut src, mut qpn, mut pkey) = (self.src, self.targets[t].qpn, 0xffffu16);
        let x = self.rng.below(100);
        if x < 5 {
            qpn = self.rng.pick(&self.victims);
            self.stats.to_victims += 1;
        } else if x < 8 {
            qpn = self.rng.bits(24) as u32;
            self.stats.random_qpn += 1;
        } else {
            self.stats.to_targets += 1;
        }
        if self.rng.chance(0.03) {
            src = self.dst; // claims to be the device itself, arriving from outside
            self.stats.forged_source += 1;
        } else if self.rng.chance(0.02) {
            src = Ipv4Addr::new(10, 11, 0, self.rng.range(3, 250) as u8);
            self.stats.forged_source += 1;
        }
        if self.rng.chance(0.02) {
            pkey = self.rng.bits(16) as u16;
            self.stats.foreign_pkey += 1;
        }
        let x = self.rng.below(100);
        let op = if x < 55 {
            self.rng.pick(&REQUESTS)
        } else if x < 90 {
            self.rng.pick(&RESPONSES)
        } else if self.rng.chance(0.9) {
            self.rng.pick(&OTHER_OPCODES)
        } else {
            self.rng.bits(8) as u8
        };
        let psn = if RESPONSES.contains(&op) && self.rng.chance(0.3) {
            self.targets[t].sent_psn.wrapping_sub(1) & PSN_MASK
        } else {
            self.psn(self.targets[t].epsn)
        };
        let mut flags = 0x40u8; // transport header version 0, migration state
        if self.rng.chance(0.1) {
            flags |= (self.rng.bits(2) as u8) << 4; // pad count
        }
        if self.rng.chance(0.03) {
            flags |= self.rng.bits(4) as u8; // header version
        }
        if self.rng.chance(0.1) {
            flags |= 0x80; // solicited event
        }
        let ackreq = if self.rng.chance(0.5) {
            0x8000_0000u32
        } else {
            0
        };

        pkt.clear();
        pkt.resize(IP_UDP, 0);
        pkt.push(op);
        pkt.push(flags);
        pkt.extend_from_slice(&pkey.to_be_bytes());
        pkt.extend_from_slice(&(qpn & PSN_MASK).to_be_bytes());
        pkt.extend_from_slice(&(ackreq | psn).to_be_bytes());
        self.extension_headers(op, t, pkt);
        let payload = self.payload_len(op);
        let at = pkt.len();
        pkt.resize(at + payload, 0);
        self.rng.fill(&mut pkt[at..]);
        pkt.truncate(1500 - 4);
        self.envelope(src, pkt);
        let crc = icrc(&SoftCrc32, pkt).unwrap_or(0);
        pkt.extend_from_slice(&crc.to_le_bytes());

        let x = self.rng.below(100);
        if x < 1 {
            let i = pkt.len() - 1 - self.rng.range(0, 4);
            pkt[i] ^= 1 << self.rng.range(0, 8);
            self.stats.bad_icrc += 1;
        } else if x < 3 {
            // Cut inside the transport headers; the lengths say so, the ICRC (sometimes) is
            // over what is left.
            let cut = self
                .rng
                .range(IP_UDP + 1, pkt.len().min(IP_UDP + BTH + 28 + 4));
            pkt.truncate(cut);
            self.set_lengths(pkt);
            if pkt.len() >= IP_UDP + BTH + 4 && self.rng.chance(0.5) {
                let body = pkt.len() - 4;
                let crc = icrc(&SoftCrc32, &pkt[..body]).unwrap_or(0);
                pkt[body..].copy_from_slice(&crc.to_le_bytes());
            }
            self.stats.truncated += 1;
        }
        self.dst
    }

    /// Writes the IPv4 and UDP headers in front of the transport bytes already in `pkt`
    /// (which starts with `IP_UDP` bytes of room); the lengths count the ICRC to come.
    fn envelope(&mut self, src: Ipv4Addr, pkt: &mut [u8]) {
        let sport = 0xc000 | self.rng.bits(14) as u16;
        pkt[0] = 0x45;
        pkt[1] = 0;
        pkt[4..6].copy_from_slice(&0u16.to_be_bytes()); // ID: kept 0 (DF set)
        pkt[6..8].copy_from_slice(&0x4000u16.to_be_bytes());
        pkt[8] = 64;
        pkt[9] = 17;
        pkt[10..12].fill(0); // the kernel computes the checksum
        pkt[12..16].copy_from_slice(&src.octets());
        pkt[16..20].copy_from_slice(&self.dst.octets());
        pkt[20..22].copy_from_slice(&sport.to_be_bytes());
        pkt[22..24].copy_from_slice(&ROCE_PORT.to_be_bytes());
        pkt[26..28].fill(0); // no UDP checksum
        let len = pkt.len() + 4;
        Self::write_lengths(pkt, len);
    }

    fn set_lengths(&self, pkt: &mut [u8]) {
        let len = pkt.len();
        Self::write_lengths(pkt, len);
    }

    fn write_lengths(pkt: &mut [u8], ip_len: usize) {
        let ip_len = ip_len as u16;
        pkt[2..4].copy_from_slice(&ip_len.to_be_bytes());
        pkt[24..26].copy_from_slice(&(ip_len - 20).to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mutator() -> Mutator {
        Mutator {
            src: Ipv4Addr::new(10, 11, 0, 2),
            dst: Ipv4Addr::new(10, 11, 0, 1),
            targets: vec![Target::parse("17:256:4660:140000000:65536").unwrap()],
            victims: vec![18, 19],
            rng: Rng::new(1),
            stats: Stats::default(),
        }
    }

    #[test]
    fn untouched_datagrams_carry_a_valid_icrc_and_consistent_lengths() {
        let mut m = mutator();
        let mut pkt = Vec::new();
        let mut checked = 0;
        for _ in 0..20000 {
            let (bad, cut) = (m.stats.bad_icrc, m.stats.truncated);
            m.next(&mut pkt);
            assert!(pkt.len() <= 1500);
            assert_eq!(usize::from(be16(&pkt, 2).unwrap()), pkt.len());
            assert_eq!(usize::from(be16(&pkt, 24).unwrap()), pkt.len() - 20);
            if m.stats.bad_icrc == bad && m.stats.truncated == cut {
                let body = pkt.len() - 4;
                assert_eq!(
                    icrc(&SoftCrc32, &pkt[..body]).unwrap().to_le_bytes(),
                    pkt[body..]
                );
                checked += 1;
            }
        }
        assert!(checked > 19000 && m.stats.bad_icrc > 100 && m.stats.truncated > 200);
        assert!(m.stats.to_victims > 0 && m.stats.forged_source > 0 && m.stats.foreign_pkey > 0);
    }

    #[test]
    fn learns_the_expected_psn_from_acks_and_naks() {
        let mut m = mutator();
        let mut ack = vec![0x45u8; 20];
        ack.extend_from_slice(&[0xc0, 0x00, 0x12, 0xb7, 0, 0, 0, 0]);
        ack.extend_from_slice(&[
            ACK, 0x40, 0xff, 0xff, 0, 0, 1, 0, 0, 0, 0, 41, 0x00, 0, 0, 0,
        ]);
        m.learn(&ack);
        assert_eq!(m.targets[0].epsn, 42);
        ack[40] = 0x60; // a sequence NAK names the PSN it expects
        m.learn(&ack);
        assert_eq!(m.targets[0].epsn, 41);
        assert_eq!(m.stats.learned, 2);
        ack[20 + 8 + 7] = 0x02; // another QP's: ignored
        m.learn(&ack);
        assert_eq!(m.stats.learned, 2);
    }
}
