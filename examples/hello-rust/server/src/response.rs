//! The one response this server gives.

use std::io::Write;

pub const BODY: &str = "ok";

/// Writes the head, then the body.
pub fn write(out: &mut impl Write) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        BODY.len()
    );
    out.write_all(head.as_bytes())?;
    out.write_all(BODY.as_bytes())
}
