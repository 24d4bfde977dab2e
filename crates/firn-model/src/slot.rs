//! Redis Cluster's key → slot mapping: CRC16 (XMODEM) of the key, or of its `{hash tag}`,
//! modulo 16384. Keys that must live together share a tag.

use crc::{CRC_16_XMODEM, Crc};

pub const SLOT_COUNT: u16 = 16_384;

/// A hash slot, 0..16384.
pub type Slot = u16;

const CRC16: Crc<u16> = Crc::<u16>::new(&CRC_16_XMODEM);

/// The part of the key that is hashed: the first non-empty `{…}` section, else the whole key.
fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{')
        && let Some(len) = key[open + 1..].iter().position(|&b| b == b'}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

pub fn slot_of(key: &[u8]) -> Slot {
    CRC16.checksum(hash_tag(key)) % SLOT_COUNT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis_cluster() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(CRC16.checksum(b"123456789"), 0x31C3);
        assert_eq!(slot_of(b"foo"), 12182);
        assert_eq!(
            slot_of(b"{user1000}.following"),
            slot_of(b"{user1000}.followers")
        );
        assert_eq!(slot_of(b"foo{}{bar}"), slot_of(b"foo{}{bar}"));
        assert_eq!(slot_of(b"{}foo"), CRC16.checksum(b"{}foo") % SLOT_COUNT);
    }
}
