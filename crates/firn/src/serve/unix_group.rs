//! Looking a group up on this host (`--local-region-group`): by number, or by name in the
//! host's group database (`/etc/group`, or whatever NSS is set up to ask).

/// A group's id: the number given, or the id of the group of that name on this host.
pub(super) fn group_id(group: &str) -> Result<u32, String> {
    if !group.is_empty() && group.bytes().all(|b| b.is_ascii_digit()) {
        return group
            .parse()
            .map_err(|_| format!("'{group}' is no group id (ids are below 2^32)"));
    }
    let name = std::ffi::CString::new(group)
        .map_err(|_| format!("'{}' is no group name", group.escape_debug()))?;
    // The group database's records are small; 64 KiB holds one with thousands of members.
    let mut buf = vec![0u8; 64 * 1024];
    // SAFETY: an all-zero `group` is a valid value (null pointers, zero id) for
    // getgrnam_r to fill.
    let mut entry: libc::group = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::group = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call, `buf` for its length; getgrnam_r
    // writes the record into `entry` and `buf` and points `found` at `entry` or at null.
    let rc = unsafe {
        libc::getgrnam_r(
            name.as_ptr(),
            &mut entry,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut found,
        )
    };
    if rc != 0 {
        return Err(format!(
            "cannot look up group '{group}': {}",
            std::io::Error::from_raw_os_error(rc)
        ));
    }
    if found.is_null() {
        return Err(format!("no group named '{group}' on this host"));
    }
    Ok(entry.gr_gid)
}
