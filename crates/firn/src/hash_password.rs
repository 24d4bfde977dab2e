//! `firn hash-password`: a password or bearer token, read from standard input, written out as
//! the argon2id hash a users file holds (`password = "…"`, `tokens = ["…"]`).

use std::io::Read as _;

/// Longest secret read: a password or token is tens of bytes; more is the wrong input.
const SECRET_BYTES_MAX: u64 = 4_096;

/// The secret on standard input: its first line, without the line's end.
fn read_secret(mut input: impl std::io::Read) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    (&mut input)
        .take(SECRET_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("reading the secret from standard input: {e}"))?;
    if bytes.len() as u64 > SECRET_BYTES_MAX {
        return Err(format!(
            "the secret is over {SECRET_BYTES_MAX} bytes; give one line (a password or token)"
        ));
    }
    let line = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.is_empty() {
        return Err("no secret on standard input: `printf %s SECRET | firn hash-password`".into());
    }
    Ok(line.to_vec())
}

pub fn hash_password() -> Result<(), String> {
    let secret = read_secret(std::io::stdin().lock())?;
    println!("{}", firn_node::auth::hash_secret(&secret)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::read_secret;

    #[test]
    fn the_secret_is_the_first_line_without_its_end() {
        assert_eq!(read_secret(&b"hunter2\n"[..]).unwrap(), b"hunter2");
        assert_eq!(read_secret(&b"hunter2\r\nmore"[..]).unwrap(), b"hunter2");
        assert_eq!(read_secret(&b"hunter2"[..]).unwrap(), b"hunter2");
        assert!(read_secret(&b"\n"[..]).unwrap_err().contains("no secret"));
        let long = vec![b'x'; 5_000];
        assert!(
            read_secret(&long[..])
                .unwrap_err()
                .contains("over 4096 bytes")
        );
    }
}
