//! Wall-clock time stamps for records, in UTC, without a time-zone database.

pub fn now_utc() -> String {
    utc(std::time::SystemTime::now())
}

/// The instant `at`, as records write it.
pub fn utc(at: std::time::SystemTime) -> String {
    let t = at
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs() as libc::time_t;
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    unsafe { libc::gmtime_r(&t, &mut tm) };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

/// The same instant as a name: ISO 8601's basic form (`20261205T180607Z`),
/// the one format of every run id and record directory, sortable and free
/// of characters a path or a git ref name would mind.
pub fn stamp() -> String {
    now_utc().replace(['-', ':'], "")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_stamp_is_the_basic_form_of_the_time_stamp() {
        let (t, s) = (super::now_utc(), super::stamp());
        assert_eq!(s.len(), "20261205T180607Z".len(), "{s}");
        assert!(s.ends_with('Z') && s.as_bytes()[8] == b'T', "{s}");
        // Taken a moment apart, the two agree to the minute.
        assert_eq!(&s[..4], &t[..4]);
    }
}
