//! A small HTTP/1.1 server on Rust's standard library alone: one thread,
//! blocking sockets, one request per connection, answered and closed. It is
//! written plainly, as a first version is, so that ratchet's agents have
//! something to find (see ../knowledge-base/seed.md).

mod response;

use std::io::Read;
use std::net::{Shutdown, TcpListener, TcpStream};

fn main() {
    let port = match port_from_args() {
        Ok(port) => port,
        Err(why) => {
            eprintln!("hello-rust: {why}; usage: hello-rust --port PORT");
            std::process::exit(2);
        }
    };
    let listener = match TcpListener::bind(("127.0.0.1", port)) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("hello-rust: bind 127.0.0.1:{port}: {e}");
            std::process::exit(1);
        }
    };
    for stream in listener.incoming() {
        match stream {
            Ok(s) => {
                if let Err(e) = serve(s) {
                    eprintln!("hello-rust: connection: {e}");
                }
            }
            Err(e) => eprintln!("hello-rust: accept: {e}"),
        }
    }
}

fn port_from_args() -> Result<u16, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [flag, port] if flag == "--port" => port
            .parse()
            .map_err(|_| format!("--port {port:?} is not a port")),
        _ => Err("--port is required".into()),
    }
}

/// Reads one request's head, answers it, and closes the connection.
fn serve(mut stream: TcpStream) -> std::io::Result<()> {
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        request.extend_from_slice(&buf[..n]);
    }
    response::write(&mut stream)?;
    stream.shutdown(Shutdown::Write)
}
