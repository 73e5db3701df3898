//! Bytes in order across several buffers: a received packet as its skb holds it (the linear
//! head, then page fragments), read where it lies instead of being copied into one buffer
//! first. The receive path checks the ICRC over the pieces and copies the payload straight
//! from them into the memory it is for.
// Values from the wire: no arithmetic that can overflow, wrap or divide by zero unchecked.
#![deny(clippy::arithmetic_side_effects)]

/// `len` bytes: the start of `first`, then as much of `rest`, in order, as they make up.
#[derive(Clone, Copy, Debug)]
pub struct Chunks<'a> {
    first: &'a [u8],
    rest: &'a [&'a [u8]],
    len: usize,
}

impl<'a> Chunks<'a> {
    /// All of `first` and then all of each of `rest`.
    pub fn new(first: &'a [u8], rest: &'a [&'a [u8]]) -> Self {
        let len = rest
            .iter()
            .fold(first.len(), |sum, part| sum.saturating_add(part.len()));
        Self { first, rest, len }
    }

    /// The bytes of one buffer.
    pub fn of(bytes: &'a [u8]) -> Self {
        Self::new(bytes, &[])
    }

    /// How many bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// No bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes of the first buffer that belong to these (where a packet's headers are).
    pub fn head(&self) -> &'a [u8] {
        &self.first[..self.first.len().min(self.len)]
    }

    /// The pieces, in order, each non-empty, together `len` bytes.
    pub fn pieces(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let mut left = self.len;
        core::iter::once(self.first)
            .chain(self.rest.iter().copied())
            .map_while(move |part| {
                if left == 0 {
                    return None;
                }
                let n = part.len().min(left);
                left = left.saturating_sub(n);
                Some(&part[..n])
            })
            .filter(|piece| !piece.is_empty())
    }

    /// The `len` bytes from byte `start` on; `None` if they are not all here.
    pub fn sub(&self, start: usize, len: usize) -> Option<Self> {
        if start.checked_add(len)? > self.len {
            return None;
        }
        // The first buffer of the result is the one byte `start` is in.
        if start < self.first.len() {
            return Some(Self {
                first: &self.first[start..],
                rest: self.rest,
                len,
            });
        }
        let mut skip = start.saturating_sub(self.first.len());
        for (i, part) in self.rest.iter().enumerate() {
            if skip < part.len() {
                return Some(Self {
                    first: &part[skip..],
                    rest: self.rest.get(i.saturating_add(1)..).unwrap_or(&[]),
                    len,
                });
            }
            skip = skip.saturating_sub(part.len());
        }
        // `start` is the end: nothing.
        Some(Self::of(&[]))
    }

    /// Copies the bytes into `out`, which must be exactly as long; `None` if it is not.
    pub fn copy_to(&self, out: &mut [u8]) -> Option<()> {
        if out.len() != self.len {
            return None;
        }
        let mut at = 0usize;
        for piece in self.pieces() {
            let end = at.checked_add(piece.len())?;
            out.get_mut(at..end)?.copy_from_slice(piece);
            at = end;
        }
        Some(())
    }

    /// The bytes as an array of `N`; `None` unless there are exactly `N`.
    pub fn to_array<const N: usize>(self) -> Option<[u8; N]> {
        let mut out = [0u8; N];
        self.copy_to(&mut out)?;
        Some(out)
    }
}

impl PartialEq<[u8]> for Chunks<'_> {
    fn eq(&self, other: &[u8]) -> bool {
        if self.len != other.len() {
            return false;
        }
        let mut at = 0usize;
        self.pieces().all(|piece| {
            let end = at.saturating_add(piece.len());
            let same = other.get(at..end) == Some(piece);
            at = end;
            same
        })
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)] // test data, built from small constants
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    fn bytes(c: &Chunks<'_>) -> Vec<u8> {
        c.pieces().flatten().copied().collect()
    }

    #[test]
    fn one_buffer() {
        let c = Chunks::of(b"hello");
        assert_eq!(c.len(), 5);
        assert_eq!(c.head(), b"hello");
        assert!(c == b"hello"[..]);
        assert!(c != b"hellO"[..]);
        assert!(c != b"hell"[..]);
        assert_eq!(c.to_array::<5>(), Some(*b"hello"));
        assert_eq!(c.to_array::<4>(), None);
        assert!(Chunks::of(&[]).is_empty());
        assert_eq!(Chunks::of(&[]).pieces().count(), 0);
    }

    #[test]
    fn pieces_across_buffers_and_subranges() {
        let rest: [&[u8]; 3] = [b"cde", b"", b"fghij"];
        let c = Chunks::new(b"ab", &rest);
        assert_eq!(c.len(), 10);
        assert_eq!(bytes(&c), b"abcdefghij");
        assert!(c == b"abcdefghij"[..]);
        assert_eq!(c.pieces().count(), 3, "empty parts are skipped");
        // Every subrange of every length, against the flat copy.
        let flat = b"abcdefghij";
        for start in 0..=10 {
            for len in 0..=10 - start {
                let s = c.sub(start, len).unwrap();
                assert_eq!(bytes(&s), &flat[start..start + len], "{start}+{len}");
                assert_eq!(s.len(), len);
                let mut out = std::vec![0u8; len];
                s.copy_to(&mut out).unwrap();
                assert_eq!(out, &flat[start..start + len]);
                // A subrange of a subrange.
                if len >= 2 {
                    assert_eq!(
                        bytes(&s.sub(1, len - 2).unwrap()),
                        &flat[start + 1..start + len - 1]
                    );
                }
            }
            assert!(c.sub(start, 11 - start).is_none(), "past the end");
        }
        assert!(c.sub(usize::MAX, 2).is_none(), "overflow");
        assert_eq!(
            c.sub(4, 3).unwrap().head(),
            b"e",
            "head is the first buffer's share"
        );
        assert_eq!(c.sub(5, 3).unwrap().head(), b"fgh");
    }

    #[test]
    fn trailing_bytes_past_len_are_not_seen() {
        let rest: [&[u8]; 1] = [b"cdef"];
        let c = Chunks::new(b"ab", &rest).sub(0, 3).unwrap();
        assert_eq!(bytes(&c), b"abc");
        assert!(c == b"abc"[..]);
        let short = Chunks::new(b"abcdef", &rest).sub(0, 2).unwrap();
        assert_eq!(short.head(), b"ab");
        assert_eq!(short.pieces().count(), 1);
    }
}
