use crate::seed;

/// A backup file written by Firn's own writer, with these lines (and their bytes).
fn backup(lines: &[(firn_client::backup_file::Line, &[u8])]) -> Vec<u8> {
    use firn_client::backup_file::Writer;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seed.backup");
    let header = serde_json::json!({
        "firn_backup": 2, "at": "1795000000000000-0", "at_time": "2026-11-30T05:00:00Z",
        "keyspaces": [],
    });
    let mut writer = Writer::start(std::fs::File::create(&path).unwrap(), &header).unwrap();
    for (line, bytes) in lines {
        match line.size() {
            Some(_) => writer.with_payload(line, bytes).unwrap(),
            None => writer.line(line).unwrap(),
        }
    }
    writer.finish().unwrap();
    std::fs::read(&path).unwrap()
}

#[test]
#[ignore = "writes fuzz/corpus: run by hand"]
fn write_backup_file_seeds() {
    use firn_client::backup_file::{EntryHead, GroupLine, KeyHead, Line, PendingLine, RecordHead};
    use firn_model::{GroupOptions, LogSeq};
    seed("backup_file", "empty", &backup(&[]));
    let key = |k: &[u8], size| {
        Line::Key(KeyHead {
            key: k.to_vec(),
            event_time_us: Some(1_795_000_000_000_000),
            size,
        })
    };
    seed(
        "backup_file",
        "keys",
        &backup(&[(key(b"sensor/1", 4), b"21.5"), (key(&[0xff, 0], 0), b"")]),
    );
    let everything = backup(&[
        (key(b"k", 1), b"v"),
        (
            Line::Entry(EntryHead {
                stream: b"orders".to_vec(),
                id: LogSeq::new(1_795, 0),
                size: 3,
            }),
            b"f=v",
        ),
        (
            Line::Record(RecordHead {
                log: b"audit".to_vec(),
                seq: LogSeq::new(1_795, 65_536),
                tags: vec![b"a".to_vec(), vec![0xfe]],
                held: Some(vec![b"a".to_vec()]),
                size: 5,
            }),
            b"hello",
        ),
        (
            Line::Group(GroupLine {
                stream: b"orders".to_vec(),
                name: b"g".to_vec(),
                last_delivered: LogSeq::new(1_795, 0),
                options: GroupOptions::default(),
                consumers: vec![b"c".to_vec()],
            }),
            b"",
        ),
        (
            Line::Pending(PendingLine {
                id: LogSeq::new(1_795, 0),
                consumer: b"c".to_vec(),
                deliveries: 2,
                delivered_ms: 1_795_000,
            }),
            b"",
        ),
    ]);
    assert!(firn_client::backup_file::check("seed", &mut &everything[..]).is_ok());
    seed("backup_file", "every-line", &everything);
}
