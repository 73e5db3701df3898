//! FLUSH (IBTA 1.5, as rdma_rxe 6.12): the FLUSH extended transport header, which names what
//! to make durable (the placement type: global visibility, persistence) and over what (the
//! selectivity level: the RETH's range, or the whole memory region its R_Key names).
#![deny(clippy::arithmetic_side_effects)]

/// Placement type bit: what earlier WRITEs placed becomes visible to every agent of the host.
pub const PLACEMENT_GLOBAL: u8 = 1;
/// Placement type bit: ... and persistent (persistent memory).
pub const PLACEMENT_PERSISTENT: u8 = 2;

/// What a FLUSH covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushLevel {
    /// The RETH's range.
    Range,
    /// The whole memory region of the RETH's R_Key (its VA and length are ignored).
    Region,
}

/// The FLUSH extended transport header (4 bytes, before the RETH).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Feth {
    /// Placement type bits (`PLACEMENT_*`; the 4 low bits of the header).
    pub placement: u8,
    /// Selectivity level (bits 5-4).
    pub level: FlushLevel,
}

impl Feth {
    /// Parses the first 4 bytes of `b`; `None` if short, or for a reserved selectivity level.
    pub fn parse(b: &[u8]) -> Option<Self> {
        let bits = u32::from_be_bytes(b.get(..4)?.try_into().ok()?);
        let level = match (bits >> 4) & 0x3 {
            0 => FlushLevel::Range,
            1 => FlushLevel::Region,
            _ => return None,
        };
        Some(Self {
            placement: (bits & 0xf) as u8,
            level,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feth_fields_as_rdma_rxe_reads_them() {
        assert_eq!(
            Feth::parse(&[0, 0, 0, 0x01]),
            Some(Feth {
                placement: PLACEMENT_GLOBAL,
                level: FlushLevel::Range
            })
        );
        assert_eq!(
            Feth::parse(&[0xff, 0xff, 0xff, 0x13]),
            Some(Feth {
                placement: PLACEMENT_GLOBAL | PLACEMENT_PERSISTENT,
                level: FlushLevel::Region
            }),
            "reserved bits are ignored"
        );
        assert_eq!(Feth::parse(&[0, 0, 0, 0x21]), None, "reserved level");
        assert_eq!(Feth::parse(&[0, 0, 1]), None, "short");
    }
}
