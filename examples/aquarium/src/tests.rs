//! The checker's verdicts on made-up reports, the frame codec and the picture.
use super::*;

fn f(seq: u64, saw: u64) -> Option<Frame> {
    Some(Frame {
        seq,
        phase: (seq * 37 % 1000) as u16,
        saw,
    })
}

fn ts(wall: u64) -> CommitTs {
    CommitTs::new(wall, 0)
}

/// Two cameras (camera 1 looks at camera 0): camera 0 wrote frames at 10 and 30,
/// camera 1 (having seen frame 1) at 20 and (having seen frame 2) at 40.
fn history() -> Report {
    Report {
        cameras: vec!["cam/0".into(), "cam/1".into()],
        written: vec![
            vec![(ts(10), f(1, 0).unwrap()), (ts(30), f(2, 0).unwrap())],
            vec![(ts(20), f(1, 1).unwrap()), (ts(40), f(2, 2).unwrap())],
        ],
        ..Report::default()
    }
}

fn snap(reader: usize, at: u64, frames: Frames) -> Snapshot {
    Snapshot {
        reader,
        node: 0,
        at: ts(at),
        frames,
        again: None,
        lag_us: 0,
    }
}

#[test]
fn frames_round_trip_and_bad_ones_are_refused() {
    let frame = Frame {
        seq: 7,
        phase: 250,
        saw: 3,
    };
    assert_eq!(Frame::decode(frame.encode().as_bytes()).unwrap(), frame);
    for bad in [&b"7 250"[..], b"seven 1 2", b"1 70000 0", b"\xff"] {
        assert!(Frame::decode(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn consistent_cuts_pass() {
    let mut r = history();
    r.snapshots = vec![
        snap(0, 5, vec![None, None]),
        snap(0, 25, vec![f(1, 0), f(1, 1)]),
        snap(0, 45, vec![f(2, 0), f(2, 2)]),
    ];
    r.snapshots[1].again = Some((1, ts(25), vec![f(1, 0), f(1, 1)]));
    assert_eq!(check(&r), Vec::new());
}

#[test]
fn a_torn_snapshot_is_caught() {
    let mut r = history();
    // At 35 camera 0's newest frame is 2; showing frame 1 is a stale, torn cut.
    r.snapshots = vec![snap(0, 35, vec![f(1, 0), f(1, 1)])];
    let v = check(&r);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].what.contains("camera 0 shows frame Some(1)"), "{v:?}");
    // A frame from after T is caught too.
    r.snapshots = vec![snap(0, 25, vec![f(1, 0), f(2, 2)])];
    assert!(
        check(&r)
            .iter()
            .any(|v| v.what.contains("camera 1 shows frame Some(2)"))
    );
}

#[test]
fn a_frame_without_what_it_saw_is_caught() {
    let mut r = history();
    // Camera 1's frame 2 saw camera 0's frame 2, which this snapshot lacks.
    r.written[1][1].0 = ts(25);
    r.snapshots = vec![snap(0, 27, vec![f(1, 0), f(2, 2)])];
    let v = check(&r);
    assert!(
        v.iter().any(|v| v.what.contains("saw frame 2 of camera 0")),
        "{v:?}"
    );
}

#[test]
fn disagreeing_replicas_and_going_back_are_caught() {
    let mut r = history();
    r.snapshots = vec![
        snap(0, 25, vec![f(1, 0), f(1, 1)]),
        snap(0, 15, vec![f(1, 0), None]),
    ];
    r.snapshots[0].again = Some((2, ts(25), vec![f(1, 0), None]));
    let v = check(&r);
    assert!(
        v.iter()
            .any(|v| v.snapshot == 0 && v.what.contains("disagree")),
        "{v:?}"
    );
    assert!(
        v.iter()
            .any(|v| v.snapshot == 1 && v.what.contains("went back")),
        "{v:?}"
    );
}

#[test]
fn the_image_has_a_row_per_snapshot_and_marks_broken_ones() {
    let mut r = history();
    r.snapshots = vec![
        snap(0, 45, vec![f(2, 0), f(2, 2)]),
        snap(1, 35, vec![f(1, 0), f(1, 1)]),
    ];
    let violations = check(&r);
    assert_eq!(
        violations.iter().map(|v| v.snapshot).collect::<Vec<_>>(),
        [1]
    );
    let mut png_bytes = Vec::new();
    render_png(&r, &violations, &mut png_bytes).unwrap();
    let mut decoder = png::Decoder::new(std::io::Cursor::new(png_bytes))
        .read_info()
        .unwrap();
    let mut buf = vec![0; decoder.output_buffer_size().unwrap()];
    let info = decoder.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), image_size(&r));
    assert_eq!((info.width, info.height), ((MARGIN + 2 * BAND) as u32, 2));
    let row = info.width as usize * 3;
    // Rows go by time: the broken snapshot (T = 35) first, red; then the good one, green.
    assert_eq!(&buf[..3], &[220, 30, 30]);
    assert_eq!(&buf[row..row + 3], &[30, 180, 60]);
    // The torn camera (0) is red in the broken row; the others hold the wave's colour.
    assert_eq!(&buf[MARGIN * 3..MARGIN * 3 + 3], &TORN);
    let band = |row_start: usize, c: usize| {
        let at = row_start + (MARGIN + c * BAND) * 3;
        buf[at..at + 3].to_vec()
    };
    for (start, c) in [(0, 1), (row, 0), (row, 1)] {
        assert!(band(start, c) != TORN && band(start, c) != [0, 0, 0]);
    }
}
