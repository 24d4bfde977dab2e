//! A state machine's whole contents as a byte stream, for Raft snapshots. A backend writes
//! it pair by pair while it walks a consistent cut of its tables ([`DumpWriter`]) and loads
//! it pair by pair ([`DumpReader`]), so neither end holds more than one pair and its
//! buffers, whatever the shard's size.
//!
//! The stream: `FIRNDUMP` · version (u32 LE); then one record per pair: table (u8) · key
//! length (u32 LE) · value length (u32 LE) · key · value; then the end record: [`END`] · pair
//! count (u64 LE) · CRC-32C of every byte before the end record (u32 LE). A stream that
//! stops before its end record, or whose count or checksum differs, is refused with
//! [`io::ErrorKind::InvalidData`] (never a panic); the caller checks a whole stream with
//! [`verify`] before it loads any of it.
//!
//! This module never touches a table: it only encodes and decodes.

use std::io::{self, Read, Write};

use crc::{CRC_32_ISCSI, Crc, Digest};

use crate::backend::{Table, TablePair};

const MAGIC: &[u8; 8] = b"FIRNDUMP";
const VERSION: u32 = 1;
/// The tag of the end record (a table's tag is its index, below [`crate::backend::TABLES`]).
const END: u8 = 0xFF;
/// Longest key or value a stream may hold: four times the largest value a node accepts
/// (`VALUE_BYTES_MAX_CEILING`), far above any stored pair, so that a damaged length is
/// refused before it is allocated.
pub const DUMP_FIELD_BYTES_MAX: usize = 64 * 1024 * 1024;

const CRC32C: Crc<u32> = Crc::<u32>::new(&CRC_32_ISCSI);

fn invalid(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}

/// What a finished stream holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DumpSummary {
    pub pairs: u64,
    /// The stream's length, end record included.
    pub bytes: u64,
}

/// Encodes pairs onto `out` as they come. Give it a buffered writer: each pair is a few
/// small writes.
pub struct DumpWriter<W: Write> {
    out: W,
    digest: Digest<'static, u32>,
    pairs: u64,
    bytes: u64,
}

impl<W: Write> DumpWriter<W> {
    /// Writes the stream's header.
    pub fn new(out: W) -> io::Result<Self> {
        let mut w = DumpWriter {
            out,
            digest: CRC32C.digest(),
            pairs: 0,
            bytes: 0,
        };
        w.put(MAGIC)?;
        w.put(&VERSION.to_le_bytes())?;
        Ok(w)
    }

    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)?;
        self.digest.update(bytes);
        self.bytes += bytes.len() as u64;
        Ok(())
    }

    pub fn pair(&mut self, table: Table, key: &[u8], value: &[u8]) -> io::Result<()> {
        for field in [key, value] {
            if field.len() > DUMP_FIELD_BYTES_MAX {
                return Err(invalid(format!(
                    "a pair of table {table:?} has a field of {} bytes; a dump holds at most \
                     {DUMP_FIELD_BYTES_MAX}",
                    field.len()
                )));
            }
        }
        self.put(&[table.tag()])?;
        self.put(&(key.len() as u32).to_le_bytes())?;
        self.put(&(value.len() as u32).to_le_bytes())?;
        self.put(key)?;
        self.put(value)?;
        self.pairs += 1;
        Ok(())
    }

    /// Writes the end record and hands back the writer (still to be flushed and synced).
    pub fn finish(mut self) -> io::Result<(W, DumpSummary)> {
        let crc = self.digest.finalize();
        let mut end = [0u8; 13];
        end[0] = END;
        end[1..9].copy_from_slice(&self.pairs.to_le_bytes());
        end[9..13].copy_from_slice(&crc.to_le_bytes());
        self.out.write_all(&end)?;
        let summary = DumpSummary {
            pairs: self.pairs,
            bytes: self.bytes + end.len() as u64,
        };
        Ok((self.out, summary))
    }
}

/// Decodes pairs from `input` one at a time. Give it a buffered reader.
pub struct DumpReader<R: Read> {
    input: R,
    digest: Digest<'static, u32>,
    pairs: u64,
    bytes: u64,
    ended: bool,
}

impl<R: Read> DumpReader<R> {
    /// Reads and checks the stream's header.
    pub fn new(input: R) -> io::Result<Self> {
        let mut r = DumpReader {
            input,
            digest: CRC32C.digest(),
            pairs: 0,
            bytes: 0,
            ended: false,
        };
        let mut header = [0u8; 12];
        r.take(&mut header, "header")?;
        if &header[..8] != MAGIC {
            return Err(invalid("not a Firn dump: its magic is wrong".into()));
        }
        let version = u32::from_le_bytes(header[8..].try_into().expect("4 bytes"));
        if version != VERSION {
            return Err(invalid(format!(
                "a dump of version {version}; this node reads version {VERSION}"
            )));
        }
        Ok(r)
    }

    fn take(&mut self, buf: &mut [u8], what: &str) -> io::Result<()> {
        self.read_raw(buf, what)?;
        self.digest.update(buf);
        Ok(())
    }

    fn read_raw(&mut self, buf: &mut [u8], what: &str) -> io::Result<()> {
        self.input.read_exact(buf).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => invalid(format!(
                "the dump ends inside its {what} after {} bytes: it is truncated",
                self.bytes
            )),
            _ => e,
        })?;
        self.bytes += buf.len() as u64;
        Ok(())
    }

    /// The next pair, or `None` after a complete stream's end record (its count and
    /// checksum checked).
    pub fn next_pair(&mut self) -> io::Result<Option<TablePair>> {
        if self.ended {
            return Ok(None);
        }
        let mut tag = [0u8; 1];
        self.read_raw(&mut tag, "record tag")?;
        if tag[0] == END {
            return self.end().map(|()| None);
        }
        self.digest.update(&tag);
        let table = Table::from_tag(tag[0])
            .ok_or_else(|| invalid(format!("the dump names table {}, which is none", tag[0])))?;
        let mut lens = [0u8; 8];
        self.take(&mut lens, "record lengths")?;
        let key_len = u32::from_le_bytes(lens[..4].try_into().expect("4 bytes")) as usize;
        let value_len = u32::from_le_bytes(lens[4..].try_into().expect("4 bytes")) as usize;
        if key_len.max(value_len) > DUMP_FIELD_BYTES_MAX {
            return Err(invalid(format!(
                "a record of {key_len}+{value_len} bytes; a dump's fields are at most \
                 {DUMP_FIELD_BYTES_MAX}: the dump is damaged"
            )));
        }
        let mut key = vec![0u8; key_len];
        self.take(&mut key, "key")?;
        let mut value = vec![0u8; value_len];
        self.take(&mut value, "value")?;
        self.pairs += 1;
        Ok(Some((table, key, value)))
    }

    fn end(&mut self) -> io::Result<()> {
        let mut end = [0u8; 12];
        self.read_raw(&mut end, "end record")?;
        let pairs = u64::from_le_bytes(end[..8].try_into().expect("8 bytes"));
        let crc = u32::from_le_bytes(end[8..].try_into().expect("4 bytes"));
        if pairs != self.pairs {
            return Err(invalid(format!(
                "the dump says it holds {pairs} pairs but {} were read",
                self.pairs
            )));
        }
        let computed = std::mem::replace(&mut self.digest, CRC32C.digest()).finalize();
        if crc != computed {
            return Err(invalid(format!(
                "the dump's checksum is {crc:08x} but its contents sum to {computed:08x}: it \
                 is damaged"
            )));
        }
        self.ended = true;
        Ok(())
    }

    /// Bytes read so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// Reads a whole stream, checking its every record, its count and its checksum, without
/// keeping any of it: what a receiver does before it lets the stream replace its tables.
pub fn verify<R: Read>(input: R) -> io::Result<DumpSummary> {
    let mut reader = DumpReader::new(input)?;
    while reader.next_pair()?.is_some() {}
    Ok(DumpSummary {
        pairs: reader.pairs,
        bytes: reader.bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<TablePair> {
        let mut pairs = Vec::new();
        for (i, table) in Table::ALL.into_iter().enumerate() {
            for j in 0..(i * 2) {
                pairs.push((table, vec![i as u8, j as u8], vec![j as u8; j * 10]));
            }
        }
        pairs.push((Table::Versions, Vec::new(), Vec::new()));
        pairs
    }

    fn encode(pairs: &[TablePair]) -> Vec<u8> {
        let mut w = DumpWriter::new(Vec::new()).unwrap();
        for (t, k, v) in pairs {
            w.pair(*t, k, v).unwrap();
        }
        let (bytes, summary) = w.finish().unwrap();
        assert_eq!(summary.bytes, bytes.len() as u64);
        assert_eq!(summary.pairs, pairs.len() as u64);
        bytes
    }

    fn decode(bytes: &[u8]) -> io::Result<Vec<TablePair>> {
        let mut r = DumpReader::new(bytes)?;
        let mut pairs = Vec::new();
        while let Some(p) = r.next_pair()? {
            pairs.push(p);
        }
        Ok(pairs)
    }

    #[test]
    fn a_dump_decodes_to_the_pairs_it_was_written_with() {
        let pairs = sample();
        let bytes = encode(&pairs);
        assert_eq!(decode(&bytes).unwrap(), pairs);
        assert_eq!(verify(&bytes[..]).unwrap().pairs, pairs.len() as u64);
    }

    #[test]
    fn an_empty_dump_round_trips() {
        let bytes = encode(&[]);
        assert_eq!(decode(&bytes).unwrap(), Vec::new());
    }

    #[test]
    fn a_dump_cut_short_anywhere_is_refused_as_invalid_data() {
        let bytes = encode(&sample());
        for len in 0..bytes.len() {
            let err = verify(&bytes[..len]).unwrap_err();
            assert_eq!(
                err.kind(),
                io::ErrorKind::InvalidData,
                "cut at {len}: {err}"
            );
        }
    }

    #[test]
    fn a_dump_with_any_byte_changed_is_refused_as_invalid_data() {
        let bytes = encode(&sample());
        // Every byte of a small dump, flipped in turn: header, tags, lengths, data, end.
        for i in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[i] ^= 0x5A;
            let err = verify(&damaged[..]).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidData, "byte {i}: {err}");
        }
    }

    #[test]
    fn a_damaged_length_is_refused_before_it_is_allocated() {
        let mut bytes = encode(&[(Table::KeyMeta, b"k".to_vec(), b"v".to_vec())]);
        // The first record's value length, after the 12-byte header, tag and key length.
        bytes[17..21].copy_from_slice(&u32::MAX.to_le_bytes());
        let err = verify(&bytes[..]).unwrap_err();
        assert!(err.to_string().contains("damaged"), "{err}");
    }
}
