//! The RoCEv2 invariant CRC (IBA annex A17.3.3).
//!
//! CRC-32 (reflected, polynomial 0xEDB88320) over: 8 bytes of 0xFF standing for a masked LRH,
//! the IP header, the UDP header and the BTH with their variant fields set to all ones, the rest
//! of the transport headers, the payload and its pad. The result is inverted and sent
//! little-endian after the payload. `crc` here is the raw register, without the inversions
//! (as the kernel's `crc32_le`), so the kernel can plug its own implementation in.
#![deny(clippy::arithmetic_side_effects)]

use super::chunks::Chunks;

/// A raw CRC-32 (LE, reflected) register update: `crc32_le` in the kernel.
pub trait Crc32 {
    /// Runs `data` through the register `crc`.
    fn update(&self, crc: u32, data: &[u8]) -> u32;
}

/// The register after eight 0xFF bytes (the masked LRH) from an all-ones start.
pub const ICRC_SEED: u32 = 0xdebb_20e3;

// Evaluated at compile time, over constant bounds.
#[allow(clippy::arithmetic_side_effects)]
const fn make_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xedb8_8320
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
}

static TABLE: [u32; 256] = make_table();

/// A portable table-driven CRC-32, for the host and as a reference.
pub struct SoftCrc32;

impl Crc32 for SoftCrc32 {
    fn update(&self, mut crc: u32, data: &[u8]) -> u32 {
        for &b in data {
            crc = TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
        }
        crc
    }
}

/// IPv4 header bytes, 20 (no options: we neither send nor accept them).
pub const IPV4_HDR_BYTES: usize = 20;
/// IPv6 header bytes.
pub const IPV6_HDR_BYTES: usize = 40;
/// UDP header bytes.
pub const UDP_HDR_BYTES: usize = 8;
/// The headers the ICRC covers masked: IP, UDP and BTH.
const MASKED_V4: usize = IPV4_HDR_BYTES + UDP_HDR_BYTES + super::opcode::BTH_BYTES;
const MASKED_V6: usize = IPV6_HDR_BYTES + UDP_HDR_BYTES + super::opcode::BTH_BYTES;

/// Computes the ICRC of a RoCEv2 packet given as its IP header onwards: `packet` is the IP
/// header, UDP header, transport headers, payload and pad, *without* the 4 ICRC bytes.
/// Returns the value whose little-endian bytes go on the wire. `None` if `packet` is not an
/// IPv4 (20-byte header) or IPv6 datagram long enough to hold a BTH.
pub fn icrc(crc: &impl Crc32, packet: &[u8]) -> Option<u32> {
    icrc_of_chunks(crc, Chunks::of(packet))
}

/// [`icrc`] of a packet held in pieces, whose IP, UDP and base transport headers are all in
/// the first (`None` if they are not).
pub fn icrc_of_chunks(crc: &impl Crc32, packet: Chunks<'_>) -> Option<u32> {
    let head = packet.head();
    // Where the UDP header starts, and the masked headers' length (IP, UDP, BTH).
    let (udp_at, masked_len) = match head.first()? >> 4 {
        4 => (IPV4_HDR_BYTES, MASKED_V4),
        6 => (IPV6_HDR_BYTES, MASKED_V6),
        _ => return None,
    };
    let head = head.get(..masked_len)?;
    let mut masked = [0u8; MASKED_V6];
    let m = &mut masked[..masked_len];
    m.copy_from_slice(head);
    let (ip, udp_bth) = m.split_at_mut(udp_at);
    if udp_at == IPV4_HDR_BYTES {
        ip[1] = 0xff; // TOS
        ip[8] = 0xff; // TTL
        ip[10] = 0xff; // header checksum
        ip[11] = 0xff;
    } else {
        ip[0] |= 0x0f; // traffic class (high nibble)
        ip[1] = 0xff; // traffic class (low nibble), flow label
        ip[2] = 0xff;
        ip[3] = 0xff;
        ip[7] = 0xff; // hop limit
    }
    udp_bth[6] = 0xff; // UDP checksum
    udp_bth[7] = 0xff;
    udp_bth[UDP_HDR_BYTES + 4] = 0xff; // BTH resv8a (FECN, BECN, reserved)
    let rest = packet.sub(masked_len, packet.len().checked_sub(masked_len)?)?;
    let reg = rest.pieces().fold(crc.update(ICRC_SEED, m), |reg, piece| {
        crc.update(reg, piece)
    });
    Some(!reg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soft_crc_matches_the_standard_check_value() {
        // CRC-32 of "123456789" is 0xcbf43926 with the usual inversions; the kernel's
        // crc32_le(~0, ...) without the final one gives 0x340bc6d9.
        assert_eq!(SoftCrc32.update(!0, b"123456789"), 0x340b_c6d9);
        assert_eq!(!SoftCrc32.update(!0, b"123456789"), 0xcbf4_3926);
    }

    #[test]
    fn seed_is_the_masked_lrh() {
        assert_eq!(SoftCrc32.update(!0, &[0xff; 8]), ICRC_SEED);
    }

    #[test]
    fn variant_fields_do_not_change_the_icrc() {
        // IPv4/UDP/BTH(SEND ONLY)/4 payload bytes.
        let mut pkt = [0u8; 20 + 8 + 12 + 4];
        pkt[0] = 0x45;
        pkt[9] = 17;
        pkt[20 + 2..20 + 4].copy_from_slice(&4791u16.to_be_bytes());
        pkt[28] = 0x04;
        pkt[40..44].copy_from_slice(b"abcd");
        let base = icrc(&SoftCrc32, &pkt).unwrap();
        for (offset, value) in [
            (1, 0x20),
            (8, 63),
            (10, 0x12),
            (11, 0x34),
            (26, 0x99),
            (32, 0xc0),
        ] {
            let mut p = pkt;
            p[offset] = value;
            assert_eq!(icrc(&SoftCrc32, &p), Some(base), "byte {offset}");
        }
        for offset in [12, 20, 28, 33, 41] {
            let mut p = pkt;
            p[offset] ^= 1;
            assert_ne!(icrc(&SoftCrc32, &p), Some(base), "byte {offset}");
        }
        // The same packet in pieces, cut anywhere after the masked headers.
        for cut in 40..pkt.len() {
            let rest: [&[u8]; 1] = [&pkt[cut..]];
            assert_eq!(
                icrc_of_chunks(&SoftCrc32, Chunks::new(&pkt[..cut], &rest)),
                Some(base),
                "cut at {cut}"
            );
        }
        // Headers not all in the first piece.
        let rest: [&[u8]; 1] = [&pkt[39..]];
        assert_eq!(
            icrc_of_chunks(&SoftCrc32, Chunks::new(&pkt[..39], &rest)),
            None
        );
        assert_eq!(icrc(&SoftCrc32, &pkt[..39]), None);
        let mut p = pkt;
        p[0] = 0x55;
        assert_eq!(icrc(&SoftCrc32, &p), None);
    }
}
