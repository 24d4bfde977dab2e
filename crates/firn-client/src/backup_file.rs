//! Firn's backup file (`firn backup`, `firn restore`): its lines, how they are written and
//! how the whole file is checked before a restore changes anything. The file is lines of
//! JSON, each record's bytes right after its line: a header
//! (`{"firn_backup":2,"at":…,"keyspaces":[…]}`), keys, then each log's stream entries and
//! records, then consumer groups each followed by its pending entries, and an end line that
//! counts each kind and carries a CRC-32C of everything between the header and itself
//! (docs/api.md, "Backup and restore"). Its reader faces files from anywhere: any bytes get
//! an answer, an error for all but a complete, undamaged backup.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::path::Path;

use base64::Engine;
use bytes::Bytes;
use crc::{CRC_32_ISCSI, Crc, Digest};
use firn_model::{DeliveryPolicy, GroupKey, GroupOptions, Key, LogSeq, MaxDeliver};
use serde_json::{Value as Json, json};

/// The format this firn writes: keys, then logs and streams, then consumer groups.
pub const FORMAT: u64 = 2;
/// The first format, keys only: still read (its end line counts keys and bytes).
const FORMAT_KEYS: u64 = 1;
pub static CRC32C: Crc<u32> = Crc::<u32>::new(&CRC_32_ISCSI);

pub fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// Names `name` in `j` under `field` as text, or under `{field}_base64` when it is not UTF-8.
pub fn put_name(j: &mut Json, field: &str, name: &[u8]) {
    match std::str::from_utf8(name) {
        Ok(text) => j[field] = json!(text),
        Err(_) => j[format!("{field}_base64")] = json!(b64().encode(name)),
    }
}

/// The name [`put_name`] wrote (`None`: neither field is there).
fn name_in(j: &Json, field: &str) -> Result<Option<Vec<u8>>, String> {
    match (j[field].as_str(), j[format!("{field}_base64")].as_str()) {
        (Some(text), None) => Ok(Some(text.as_bytes().to_vec())),
        (None, Some(b)) => b64()
            .decode(b)
            .map(Some)
            .map_err(|e| format!("{field}_base64: {e}")),
        (None, None) => Ok(None),
        _ => Err(format!("both {field} and {field}_base64 in {j}")),
    }
}

fn name(j: &Json, field: &str) -> Result<Vec<u8>, String> {
    name_in(j, field)?.ok_or_else(|| format!("a line without its {field}: {j}"))
}

fn names_json(names: &[Vec<u8>]) -> Json {
    Json::Array(
        names
            .iter()
            .map(|n| {
                let mut j = json!({});
                put_name(&mut j, "name", n);
                j
            })
            .collect(),
    )
}

fn names(j: &Json, field: &str) -> Result<Vec<Vec<u8>>, String> {
    j[field]
        .as_array()
        .ok_or_else(|| format!("a line without its {field}: {j}"))?
        .iter()
        .map(|n| name(n, "name"))
        .collect()
}

fn seq(j: &Json, field: &str) -> Result<LogSeq, String> {
    j[field]
        .as_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("a line without a seq in {field}: {j}"))
}

fn number(j: &Json, field: &str) -> Result<u64, String> {
    j[field]
        .as_u64()
        .ok_or_else(|| format!("a line without its {field}: {j}"))
}

/// A key's live value at the cut; its value's bytes follow.
pub struct KeyHead {
    pub key: Vec<u8>,
    pub event_time_us: Option<u64>,
    pub size: u64,
}

/// A stream entry at the cut, restored with its id; its payload (its fields as XADD
/// encodes them) follows.
pub struct EntryHead {
    pub stream: Vec<u8>,
    pub id: LogSeq,
    pub size: u64,
}

/// A log record at the cut, in its log's seq order; its payload follows. `held`: the tags
/// it was still held under at the cut, when a trim took it from some of its tags.
pub struct RecordHead {
    pub log: Vec<u8>,
    pub seq: LogSeq,
    pub tags: Vec<Vec<u8>>,
    pub held: Option<Vec<Vec<u8>>>,
    pub size: u64,
}

impl RecordHead {
    /// The tags a restore appends it with: those it was held under.
    pub fn restored_tags(&self) -> &[Vec<u8>] {
        self.held.as_deref().unwrap_or(&self.tags)
    }
}

/// A consumer group of a stream, as the backup found it.
pub struct GroupLine {
    pub stream: Vec<u8>,
    pub name: Vec<u8>,
    pub last_delivered: LogSeq,
    pub options: GroupOptions,
    pub consumers: Vec<Vec<u8>>,
}

/// One entry of the pending list of the group on the line before.
pub struct PendingLine {
    pub id: LogSeq,
    pub consumer: Vec<u8>,
    pub deliveries: u64,
    /// The last delivery, in milliseconds since the epoch.
    pub delivered_ms: u64,
}

/// One line between the header and the end line.
pub enum Line {
    Key(KeyHead),
    Entry(EntryHead),
    Record(RecordHead),
    Group(GroupLine),
    Pending(PendingLine),
}

impl Line {
    pub fn text(&self) -> String {
        let mut j = json!({});
        match self {
            Line::Key(k) => {
                put_name(&mut j, "key", &k.key);
                j["event_time"] = json!(k.event_time_us);
                j["size"] = json!(k.size);
            }
            Line::Entry(e) => {
                put_name(&mut j, "stream", &e.stream);
                j["id"] = json!(e.id.to_string());
                j["size"] = json!(e.size);
            }
            Line::Record(r) => {
                put_name(&mut j, "log", &r.log);
                j["seq"] = json!(r.seq.to_string());
                j["tags"] = names_json(&r.tags);
                if let Some(held) = &r.held {
                    j["held"] = names_json(held);
                }
                j["size"] = json!(r.size);
            }
            Line::Group(g) => {
                put_name(&mut j, "group", &g.name);
                put_name(&mut j, "stream", &g.stream);
                j["last_delivered"] = json!(g.last_delivered.to_string());
                j["options"] = options_json(&g.options);
                j["consumers"] = names_json(&g.consumers);
            }
            Line::Pending(p) => {
                j["pending"] = json!(p.id.to_string());
                put_name(&mut j, "consumer", &p.consumer);
                j["deliveries"] = json!(p.deliveries);
                j["delivered_ms"] = json!(p.delivered_ms);
            }
        }
        j.to_string()
    }

    pub fn parse(text: &str) -> Result<Line, String> {
        let j: Json = serde_json::from_str(text).map_err(|e| format!("a line: {e}"))?;
        Self::of(&j)
    }

    fn of(j: &Json) -> Result<Line, String> {
        if let Some(key) = name_in(j, "key")? {
            return Ok(Line::Key(KeyHead {
                key,
                event_time_us: j["event_time"].as_u64(),
                size: number(j, "size")?,
            }));
        }
        if let Some(group) = name_in(j, "group")? {
            return Ok(Line::Group(GroupLine {
                stream: name(j, "stream")?,
                name: group,
                last_delivered: seq(j, "last_delivered")?,
                options: options_of(&j["options"])?,
                consumers: names(j, "consumers")?,
            }));
        }
        if let Some(stream) = name_in(j, "stream")? {
            return Ok(Line::Entry(EntryHead {
                stream,
                id: seq(j, "id")?,
                size: number(j, "size")?,
            }));
        }
        if let Some(log) = name_in(j, "log")? {
            let held = match j.get("held") {
                Some(_) => Some(names(j, "held")?),
                None => None,
            };
            return Ok(Line::Record(RecordHead {
                log,
                seq: seq(j, "seq")?,
                tags: names(j, "tags")?,
                held,
                size: number(j, "size")?,
            }));
        }
        if j.get("pending").is_some() {
            return Ok(Line::Pending(PendingLine {
                id: seq(j, "pending")?,
                consumer: name(j, "consumer")?,
                deliveries: number(j, "deliveries")?,
                delivered_ms: number(j, "delivered_ms")?,
            }));
        }
        Err(format!("a line of no kind this firn knows: {j}"))
    }

    /// The bytes that follow the line (then a newline); lines without any have none.
    pub fn size(&self) -> Option<u64> {
        match self {
            Line::Key(k) => Some(k.size),
            Line::Entry(e) => Some(e.size),
            Line::Record(r) => Some(r.size),
            Line::Group(_) | Line::Pending(_) => None,
        }
    }

    /// Keys come first, then logs and streams, then groups: a restore needs a stream's
    /// entries before its groups' pending entries.
    fn section(&self) -> u8 {
        match self {
            Line::Key(_) => 0,
            Line::Entry(_) | Line::Record(_) => 1,
            Line::Group(_) | Line::Pending(_) => 2,
        }
    }

    /// What the line names, for an error.
    pub fn describe(&self) -> String {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        match self {
            Line::Key(k) => text(&k.key),
            Line::Entry(e) => format!("stream {} entry {}", text(&e.stream), e.id),
            Line::Record(r) => format!("log {} record {}", text(&r.log), r.seq),
            Line::Group(g) => format!("stream {} group {}", text(&g.stream), text(&g.name)),
            Line::Pending(p) => format!("pending entry {}", p.id),
        }
    }
}

fn options_json(o: &GroupOptions) -> Json {
    let mut j = json!({
        "ack_wait_ms": o.ack_wait_ms,
        "liveness_ms": o.liveness_ms,
        "max_deliver": o.max_deliver.as_ref().map(|m| m.deliveries),
    });
    j["policy"] = json!(match &o.policy {
        DeliveryPolicy::First => "first",
        DeliveryPolicy::RoundRobin => "roundrobin",
        DeliveryPolicy::Hrw(_) => "hrw",
    });
    match &o.policy {
        DeliveryPolicy::Hrw(GroupKey::Field(f)) => put_name(&mut j, "key_field", f),
        DeliveryPolicy::Hrw(GroupKey::Tag) => j["key_tag"] = json!(true),
        _ => {}
    }
    if let Some(m) = &o.max_deliver {
        put_name(&mut j, "dead_letter", m.dead_letter.as_bytes());
    }
    j
}

fn options_of(j: &Json) -> Result<GroupOptions, String> {
    let policy = match (j["policy"].as_str(), j["key_tag"].as_bool()) {
        (Some("first"), None) => DeliveryPolicy::First,
        (Some("roundrobin"), None) => DeliveryPolicy::RoundRobin,
        (Some("hrw"), Some(true)) => DeliveryPolicy::Hrw(GroupKey::Tag),
        (Some("hrw"), None) => {
            DeliveryPolicy::Hrw(GroupKey::Field(Bytes::from(name(j, "key_field")?)))
        }
        _ => return Err(format!("group options of no known policy: {j}")),
    };
    let max_deliver = match j["max_deliver"].as_u64() {
        None => None,
        Some(deliveries) => Some(MaxDeliver {
            deliveries,
            dead_letter: Key::new(name(j, "dead_letter")?).map_err(|e| e.to_string())?,
        }),
    };
    Ok(GroupOptions {
        policy,
        ack_wait_ms: j["ack_wait_ms"].as_u64(),
        max_deliver,
        liveness_ms: number(j, "liveness_ms")?,
    })
}

/// What a backup holds, by kind; its end line states them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub keys: u64,
    /// Bytes of the keys' values.
    pub bytes: u64,
    pub stream_entries: u64,
    pub log_records: u64,
    /// Bytes of the entries' and records' payloads.
    pub log_bytes: u64,
    pub groups: u64,
    pub pending: u64,
}

impl Counts {
    fn add(&mut self, line: &Line) {
        match line {
            Line::Key(k) => {
                self.keys += 1;
                self.bytes += k.size;
            }
            Line::Entry(e) => {
                self.stream_entries += 1;
                self.log_bytes += e.size;
            }
            Line::Record(r) => {
                self.log_records += 1;
                self.log_bytes += r.size;
            }
            Line::Group(_) => self.groups += 1,
            Line::Pending(_) => self.pending += 1,
        }
    }

    fn fields(&self) -> [(&'static str, u64); 7] {
        [
            ("keys", self.keys),
            ("bytes", self.bytes),
            ("stream_entries", self.stream_entries),
            ("log_records", self.log_records),
            ("log_bytes", self.log_bytes),
            ("groups", self.groups),
            ("pending", self.pending),
        ]
    }

    /// The end line (outside the CRC, which it carries).
    fn end_line(&self, crc: u32) -> Json {
        let mut j = json!({ "end": true, "crc32c": crc });
        for (field, n) in self.fields() {
            j[field] = json!(n);
        }
        j
    }

    /// Whether the end line states these counts: a format 1 file's states keys and bytes
    /// only (and holds nothing else).
    fn check(&self, format: u64, end: &Json) -> Result<(), String> {
        for (field, n) in self.fields() {
            let stated = match end[field].as_u64() {
                None if format == FORMAT_KEYS && !["keys", "bytes"].contains(&field) => 0,
                stated => stated.unwrap_or(u64::MAX),
            };
            if stated != n {
                return Err(format!("it holds {n} {field} but its end line says {end}"));
            }
        }
        Ok(())
    }
}

/// Writes through to the file and into the CRC.
pub struct Summing<W> {
    pub out: W,
    pub digest: Digest<'static, u32>,
}

impl<W: Write> Write for Summing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.out.write(buf)?;
        self.digest.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// A backup being written: the header first (outside the CRC: it is checked by being
/// parsed), then lines and their bytes into the CRC, counted, then the end line.
pub struct Writer {
    pub body: Summing<BufWriter<File>>,
    pub counts: Counts,
}

impl Writer {
    pub fn start(file: File, header: &Json) -> io::Result<Writer> {
        let mut out = BufWriter::with_capacity(1 << 20, file);
        writeln!(out, "{header}")?;
        Ok(Writer {
            body: Summing {
                out,
                digest: CRC32C.digest(),
            },
            counts: Counts::default(),
        })
    }

    /// A line; a line with bytes is followed by them ([`Self::payload`] or the body
    /// written through) and [`Self::end_bytes`].
    pub fn line(&mut self, line: &Line) -> io::Result<()> {
        writeln!(self.body, "{}", line.text())?;
        self.counts.add(line);
        Ok(())
    }

    pub fn end_bytes(&mut self) -> io::Result<()> {
        self.body.write_all(b"\n")
    }

    /// A line with its bytes.
    pub fn with_payload(&mut self, line: &Line, payload: &[u8]) -> io::Result<()> {
        self.line(line)?;
        self.body.write_all(payload)?;
        self.end_bytes()
    }

    /// Writes the end line; the file, flushed (not yet synced).
    pub fn finish(self) -> io::Result<(File, Counts)> {
        let Summing { mut out, digest } = self.body;
        writeln!(out, "{}", self.counts.end_line(digest.finalize()))?;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        Ok((file, self.counts))
    }
}

/// What a backup file holds, checked whole.
pub struct Checked {
    pub header: Json,
    pub counts: Counts,
}

/// Reads the whole file: its first line, every line and its bytes, the end line and the
/// CRC; refuses lines out of their section's order and pending entries without a group.
pub fn check_file(path: &Path) -> Result<Checked, String> {
    let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut input = BufReader::with_capacity(1 << 20, file);
    check(&path.display().to_string(), &mut input)
}

/// [`check_file`] of what `input` holds, named `name` in errors.
pub fn check(name: &str, mut input: &mut impl BufRead) -> Result<Checked, String> {
    let bad = |why: String| format!("{name}: not a complete Firn backup: {why}");
    let header = read_header(&mut input).map_err(bad)?;
    let format = header["firn_backup"].as_u64().unwrap_or(FORMAT);
    let mut sum = Summing {
        out: io::sink(),
        digest: CRC32C.digest(),
    };
    let mut counts = Counts::default();
    let (mut section, mut in_group) = (0, false);
    let mut text = String::new();
    loop {
        text.clear();
        input.read_line(&mut text).map_err(|e| bad(e.to_string()))?;
        if text.is_empty() {
            return Err(bad("it ends without its end line (cut short?)".into()));
        }
        let j: Json =
            serde_json::from_str(text.trim_end()).map_err(|e| bad(format!("a line: {e}")))?;
        if j["end"] == Json::Bool(true) {
            counts.check(format, &j).map_err(bad)?;
            let crc = sum.digest.finalize();
            if j["crc32c"].as_u64() != Some(u64::from(crc)) {
                return Err(bad(format!(
                    "its CRC-32C is {crc}, its end line says {}",
                    j["crc32c"]
                )));
            }
            return Ok(Checked { header, counts });
        }
        sum.digest.update(text.as_bytes());
        let line = Line::of(&j).map_err(bad)?;
        if line.section() < section || (format == FORMAT_KEYS && line.section() > 0) {
            return Err(bad(format!("{} is out of its place", line.describe())));
        }
        section = line.section();
        match &line {
            Line::Group(_) => in_group = true,
            Line::Pending(p) if !in_group => {
                return Err(bad(format!("pending entry {} without its group", p.id)));
            }
            _ => {}
        }
        if let Some(size) = line.size() {
            let copied =
                io::copy(&mut (&mut input).take(size), &mut sum).map_err(|e| bad(e.to_string()))?;
            let mut newline = [0u8; 1];
            if copied != size || input.read_exact(&mut newline).is_err() || newline != *b"\n" {
                return Err(bad(format!("{}: its bytes are cut short", line.describe())));
            }
            sum.digest.update(&newline);
        }
        counts.add(&line);
    }
}

pub fn read_header(input: &mut impl BufRead) -> Result<Json, String> {
    let mut line = String::new();
    input.read_line(&mut line).map_err(|e| e.to_string())?;
    let header: Json =
        serde_json::from_str(line.trim_end()).map_err(|e| format!("its first line: {e}"))?;
    match header["firn_backup"].as_u64() {
        Some(FORMAT_KEYS | FORMAT) => Ok(header),
        Some(other) => Err(format!(
            "format {other}; this firn reads formats {FORMAT_KEYS} and {FORMAT}"
        )),
        None => Err("its first line is not a Firn backup's".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(line: Line) -> Line {
        Line::parse(&line.text()).unwrap()
    }

    #[test]
    fn every_kind_of_line_reads_back_names_that_are_not_utf8_included() {
        for key in [b"sensor/1".to_vec(), vec![0xff, 0x00, b'a']] {
            let Line::Key(back) = round_trip(Line::Key(KeyHead {
                key: key.clone(),
                event_time_us: Some(7),
                size: 3,
            })) else {
                panic!("not a key line")
            };
            assert_eq!((back.key, back.event_time_us, back.size), (key, Some(7), 3));
        }
        let Line::Record(r) = round_trip(Line::Record(RecordHead {
            log: b"orders".to_vec(),
            seq: LogSeq::new(5, 9),
            tags: vec![b"a".to_vec(), vec![0xfe]],
            held: Some(vec![vec![0xfe]]),
            size: 2,
        })) else {
            panic!("not a record line")
        };
        assert_eq!(
            (r.log.as_slice(), r.seq, r.size),
            (&b"orders"[..], LogSeq::new(5, 9), 2)
        );
        assert_eq!(r.restored_tags(), &[vec![0xfe]]);
        let Line::Entry(e) = round_trip(Line::Entry(EntryHead {
            stream: b"s".to_vec(),
            id: LogSeq::new(1, 2),
            size: 4,
        })) else {
            panic!("not an entry line")
        };
        assert_eq!(
            (e.stream, e.id, e.size),
            (b"s".to_vec(), LogSeq::new(1, 2), 4)
        );
        assert!(Line::parse(r#"{"size":1}"#).is_err());
        assert!(Line::parse(r#"{"key":"a"}"#).is_err());
        assert!(Line::parse(r#"{"log":"l","seq":"x-1","tags":[],"size":0}"#).is_err());
    }

    #[test]
    fn group_options_read_back_as_they_were() {
        let dead = Key::new(Bytes::from("{s}dead")).unwrap();
        for options in [
            GroupOptions::default(),
            GroupOptions {
                policy: DeliveryPolicy::Hrw(GroupKey::Field(Bytes::from_static(b"\xffk"))),
                ack_wait_ms: Some(500),
                max_deliver: Some(MaxDeliver {
                    deliveries: 3,
                    dead_letter: dead,
                }),
                liveness_ms: 1_000,
            },
            GroupOptions {
                policy: DeliveryPolicy::Hrw(GroupKey::Tag),
                ..GroupOptions::default()
            },
            GroupOptions {
                policy: DeliveryPolicy::RoundRobin,
                ..GroupOptions::default()
            },
        ] {
            let Line::Group(g) = round_trip(Line::Group(GroupLine {
                stream: b"{s}".to_vec(),
                name: b"g".to_vec(),
                last_delivered: LogSeq::new(3, 0),
                options: options.clone(),
                consumers: vec![b"c1".to_vec()],
            })) else {
                panic!("not a group line")
            };
            assert_eq!(g.options, options);
            assert_eq!(g.consumers, vec![b"c1".to_vec()]);
        }
    }

    #[test]
    fn a_format_1_file_still_checks_and_one_with_logs_in_it_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = |body: &str, end: Json| {
            let path = dir.path().join("v1.backup");
            let header = r#"{"firn_backup":1,"at":"1-0","at_time":"","keyspaces":[]}"#;
            let mut end = end;
            end["crc32c"] = json!(CRC32C.checksum(body.as_bytes()));
            std::fs::write(&path, format!("{header}\n{body}{end}\n")).unwrap();
            check_file(&path)
        };
        let key = "{\"key\":\"k\",\"event_time\":null,\"size\":2}\nv1\n";
        let checked = file(key, json!({"end": true, "keys": 1, "bytes": 2})).unwrap();
        assert_eq!((checked.counts.keys, checked.counts.bytes), (1, 2));
        let record = "{\"log\":\"l\",\"seq\":\"1-0\",\"tags\":[{\"name\":\"t\"}],\"size\":1}\nx\n";
        let end = json!({"end": true, "keys": 0, "bytes": 0});
        let refused = file(record, end).err().unwrap();
        assert!(refused.contains("out of its place"), "{refused}");
    }

    #[test]
    fn an_end_line_states_every_count_and_a_format_1_one_only_keys_and_bytes() {
        let counts = Counts {
            keys: 2,
            bytes: 9,
            log_records: 1,
            ..Counts::default()
        };
        assert!(counts.check(FORMAT, &counts.end_line(1)).is_ok());
        let other = Counts {
            log_records: 2,
            ..counts
        };
        assert!(other.check(FORMAT, &counts.end_line(1)).is_err());
        let keys_only = Counts {
            keys: 2,
            bytes: 9,
            ..Counts::default()
        };
        let v1 = json!({"end": true, "keys": 2, "bytes": 9, "crc32c": 1});
        assert!(keys_only.check(FORMAT_KEYS, &v1).is_ok());
        assert!(keys_only.check(FORMAT, &v1).is_err());
    }
}
