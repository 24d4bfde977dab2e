//! A backup file as `firn restore` reads it before it changes anything: the first line, every
//! line and the bytes after it, the end line's counts and CRC (`firn_client::backup_file::
//! check`); and each line parsed on its own, as the restore then reads them.

use firn_client::backup_file::{Line, check};

pub fn backup_file(data: &[u8]) {
    let _ = check("fuzz input", &mut &data[..]);
    for line in data.split(|b| *b == b'\n') {
        if let Ok(text) = std::str::from_utf8(line) {
            let _ = Line::parse(text);
        }
    }
}
